// FastDivider: division of 32-bit indices by a divisor fixed at launch time through a precomputed
// multiplier, so index decoding in kernels costs a multiply-high, an add and a shift instead of an
// integer division. Host and device code share it (the tests check it on the host).
#pragma once

#include <cstdint>

#include "opsnn/core/macros.h"

namespace opsnn::cuda {

// Granlund & Montgomery, "Division by invariant integers using multiplication" (PLDI 1994), section 4:
// with shift = ceil(log2 d) and magic = floor(2^32 (2^shift - d) / d) + 1, n / d = (mulhi(n, magic) + n)
// >> shift for every n < 2^31 (mulhi(n, magic) <= n, so the sum cannot overflow 32 bits).
struct FastDivider {
  static constexpr uint32_t kMaxDividend = 0x7fffffffu;  // dividends and divisors up to 2^31 - 1
  uint32_t divisor = 1;
  uint32_t magic = 1;
  uint32_t shift = 0;

  FastDivider() = default;
  explicit FastDivider(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }

  OPSNN_HD uint32_t divide(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(n, magic);
#else
    const uint32_t high = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
    return (high + n) >> shift;
  }
};

}  // namespace opsnn::cuda
