// Baselines of `opsnn-bench optim --device cuda` (unfused_chain.cu): the traditional Adam pipeline as
// separate kernels, and the fill used to give the benchmark non-zero data.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace opsnn::bench {

// Device buffers of the unfused chain (n floats each).
struct UnfusedAdamBuffers {
  float* params;
  float* grads;
  float* exp_avg;
  float* exp_avg_sq;
  float* prepared;  // g * (1/loss_scale) + wd * p
  float* m_hat;
  float* v_hat;
  double* norm_partials;  // one per block of the norm pass
  int64_t n;
};

// One Adam step as the traditional chain: norm pass, gradient preparation, momentum, variance, bias
// correction, update: six kernels, every intermediate through memory.
void unfused_adam_step(const UnfusedAdamBuffers& b, int64_t step, cudaStream_t stream);
// Deterministic values in [low, high) (a hash of the index and seed).
void fill_uniform(float* data, int64_t n, uint64_t seed, float low, float high, cudaStream_t stream);
// Bytes the chain moves per parameter (reads + writes of every kernel).
inline constexpr double kUnfusedAdamBytesPerParameter = 72.0;

}  // namespace opsnn::bench
