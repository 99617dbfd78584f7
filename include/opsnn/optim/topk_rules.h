// The per-element rules of top-k sparsification (topk.h), shared by the CPU sparsifier and the CUDA
// kernels so both select the same elements bit for bit: the accumulation update, the squared score and
// the threshold sample positions. Header-only, no third-party includes, OPSNN_HD.
#pragma once

#include <cstdint>

#include "opsnn/core/macros.h"
#include "opsnn/core/rng.h"

namespace opsnn::optim {

// Per step: variance EMA decay, momentum (momentum correction), lr compensation factor of the accumulator.
struct TopKAccumulateScalars {
  float beta = 0.0f;
  float one_minus_beta = 1.0f;
  float momentum = 0.0f;
  float accumulator_factor = 1.0f;
  float grad_multiplier = 1.0f;
};

// variance = beta*variance + (1-beta)*g^2; then error feedback acc = acc*f + g, or with momentum correction
// (DGC eq. 5) u = momentum*u + g and acc = acc*f + u. Unfused as written (no fmaf): the CPU loop and the
// CUDA kernel (--fmad=false) compute the same bits.
OPSNN_HD void topk_accumulate_element(float gradient, float& variance, float& accumulator,
                                      const TopKAccumulateScalars& s) {
  const float g = gradient * s.grad_multiplier;
  variance = s.beta * variance + s.one_minus_beta * g * g;
  accumulator = accumulator * s.accumulator_factor + g;
}
OPSNN_HD void topk_accumulate_element(float gradient, float& variance, float& velocity, float& accumulator,
                                      const TopKAccumulateScalars& s) {
  const float g = gradient * s.grad_multiplier;
  variance = s.beta * variance + s.one_minus_beta * g * g;
  velocity = s.momentum * velocity + g;
  accumulator = accumulator * s.accumulator_factor + velocity;
}

// score^2 = acc^2 * variance in double: acc^2 of an fp32 value is exact in double, so the one rounding is
// the same everywhere; the order is the score's, without a sqrt and without fp32 overflow or underflow.
OPSNN_HD double topk_score_squared(float accumulator, float variance) {
  const double value = accumulator;
  return value * value * static_cast<double>(variance);
}

// Position of sample draw `draw` of step `step` in [0, n): the 64 bits x of Philox(seed, step * 2^32 + draw)
// mapped to floor(x * n / 2^64).
OPSNN_HD int64_t topk_sample_position(uint64_t seed, int64_t step, int64_t draw, int64_t n) {
  Philox4 bits = philox4x32_10(seed, (static_cast<uint64_t>(step) << 32) + static_cast<uint64_t>(draw));
  const uint64_t wide = (static_cast<uint64_t>(bits.v[0]) << 32) | bits.v[1];
#if defined(__CUDA_ARCH__)
  return static_cast<int64_t>(__umul64hi(wide, static_cast<uint64_t>(n)));
#else
  return static_cast<int64_t>((static_cast<unsigned __int128>(wide) * static_cast<uint64_t>(n)) >> 64);
#endif
}

// Elements per block of the selection: ties are allotted block by block in index order, and each block
// writes its (index, value) pairs from a precomputed first slot. Fixed, so the output never depends on
// threads or device.
inline constexpr int64_t kTopKBlock = int64_t{1} << 16;

}  // namespace opsnn::optim
