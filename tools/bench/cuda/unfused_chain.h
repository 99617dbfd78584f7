// Baselines of `opsnn-bench optim --device cuda` (unfused_chain.cu): the traditional Adam and AdamW
// pipelines as separate kernels, and the fill used to give the benchmark non-zero data.
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

// adam: norm pass, gradient preparation (unscale + L2 term), momentum, variance, bias correction,
// update: six kernels, every intermediate through memory. adamw: the same with AdamW's decoupled decay
// p *= 1 - lr * wd (wd 1e-2, the fused AdamW's default) as a seventh kernel before the update, as
// op-by-op implementations run it (PyTorch's for-loop AdamW: param.mul_(1 - lr * weight_decay)).
enum class UnfusedRule { adam, adamw };
void unfused_step(const UnfusedAdamBuffers& b, UnfusedRule rule, int64_t step, cudaStream_t stream);
// Deterministic values in [low, high) (a hash of the index and seed).
void fill_uniform(float* data, int64_t n, uint64_t seed, float low, float high, cudaStream_t stream);
// Bytes the chain moves per parameter (reads + writes of every kernel; the decay reads and writes p).
inline constexpr double unfused_bytes_per_parameter(UnfusedRule rule) {
  return rule == UnfusedRule::adamw ? 80.0 : 72.0;
}

}  // namespace opsnn::bench
