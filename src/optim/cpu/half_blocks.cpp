// fp16 <-> fp32 block conversions for the CPU optimizer kernels (see half_blocks.h).
#include "optim/cpu/half_blocks.h"

#if defined(__F16C__)
#include <immintrin.h>  // _mm256_cvtph_ps, _mm256_cvtps_ph
#endif

namespace opsnn::optim::cpu::OPSNN_CPU_VARIANT {

void half_to_float_block(const Half* input, float* output, int64_t count) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(output + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(input + i))));
#endif
  for (; i < count; ++i) output[i] = half_bits_to_float(input[i].bits);
}

void float_to_half_block(const float* input, Half* output, int64_t count) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(output + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(input + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < count; ++i) output[i].bits = float_to_half_bits(input[i]);
}

bool hardware_half_conversion() {
#if defined(__F16C__)
  return true;
#else
  return false;
#endif
}

}  // namespace opsnn::optim::cpu::OPSNN_CPU_VARIANT
