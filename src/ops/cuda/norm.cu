// CUDA batch normalization over [batch, channels, inner] (statistics per channel over batch and inner):
// training forward with the running-stat update, eval forward, and backward. One block per channel
// accumulates in double in a fixed order, the same formulas as the CPU twin (src/ops/cpu/norm.cpp).
// Data may be f32, f16 or bf16 (mixed precision); per-channel parameters and statistics are always f32.
#include <cmath>

#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

namespace opsnn::cuda {
namespace {

constexpr int kChannelThreads = 512;

// The position in x of element j (of batch * inner) of channel c.
__device__ __forceinline__ int64_t channel_offset(int64_t j, int64_t c, const ChannelLayout& layout) {
  const int64_t sample = j / layout.inner;
  return (sample * layout.channels + c) * layout.inner + (j - sample * layout.inner);
}

template <typename T>
__global__ void forward_train_kernel(const T* x, const float* gamma, const float* beta, float* running_mean,
                                     float* running_var, double momentum, double eps, T* out, float* save_mean,
                                     float* save_invstd, ChannelLayout layout) {
  __shared__ double scratch[32];
  const int64_t c = blockIdx.x;
  const int64_t count = layout.batch * layout.inner;
  // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) sum += static_cast<double>(static_cast<float>(x[channel_offset(j, c, layout)]));
  const double mean = block_reduce(sum, scratch, SumOp{}) / static_cast<double>(count);
  double squared = 0.0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const double deviation = static_cast<double>(static_cast<float>(x[channel_offset(j, c, layout)])) - mean;
    squared += deviation * deviation;
  }
  squared = block_reduce(squared, scratch, SumOp{});
  const double invstd = 1.0 / sqrt(squared / static_cast<double>(count) + eps);
  const float center = static_cast<float>(mean);
  const float scale = static_cast<float>(static_cast<double>(gamma[c]) * invstd);
  const float shift = beta[c];
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t i = channel_offset(j, c, layout);
    out[i] = T((static_cast<float>(x[i]) - center) * scale + shift);
  }
  if (threadIdx.x == 0) {
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = static_cast<float>(invstd);
    // Running variance takes the unbiased estimate, as PyTorch does.
    running_mean[c] = static_cast<float>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
    running_var[c] = static_cast<float>((1.0 - momentum) * static_cast<double>(running_var[c]) +
                                        momentum * squared / (static_cast<double>(count) - 1.0));
  }
}

template <typename T>
__global__ void forward_eval_kernel(const T* x, const float* gamma, const float* beta, const float* running_mean,
                                    const float* running_var, double eps, T* out, ChannelLayout layout,
                                    int64_t total) {
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t c = (i / layout.inner) % layout.channels;
    const float center = running_mean[c];
    const float scale = static_cast<float>(static_cast<double>(gamma[c]) / sqrt(static_cast<double>(running_var[c]) + eps));
    out[i] = T((static_cast<float>(x[i]) - center) * scale + beta[c]);
  }
}

// With xhat = (x - mean) * invstd and g the output gradient, per channel over its M elements:
//   grad_beta = sum g,  grad_gamma = sum g * xhat,
//   grad_x = gamma * invstd * (g - sum g / M - xhat * sum(g * xhat) / M).
template <typename T>
__global__ void backward_kernel(const T* grad_out, const T* x, const float* gamma, const float* save_mean,
                                const float* save_invstd, T* grad_input, float* grad_gamma, float* grad_beta,
                                ChannelLayout layout) {
  __shared__ double scratch[32];
  const int64_t c = blockIdx.x;
  const int64_t count = layout.batch * layout.inner;
  const double mean = static_cast<double>(save_mean[c]), invstd = static_cast<double>(save_invstd[c]);
  double sum_grad = 0.0, sum_grad_centered = 0.0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t i = channel_offset(j, c, layout);
    const double grad = static_cast<double>(static_cast<float>(grad_out[i]));
    sum_grad += grad;
    sum_grad_centered += grad * (static_cast<double>(static_cast<float>(x[i])) - mean);
  }
  sum_grad = block_reduce(sum_grad, scratch, SumOp{});
  sum_grad_centered = block_reduce(sum_grad_centered, scratch, SumOp{});
  if (threadIdx.x == 0) {
    if (grad_beta != nullptr) grad_beta[c] = static_cast<float>(sum_grad);
    if (grad_gamma != nullptr) grad_gamma[c] = static_cast<float>(sum_grad_centered * invstd);
  }
  const double k = static_cast<double>(gamma[c]) * invstd;
  const double projection = sum_grad_centered * invstd * invstd / static_cast<double>(count);
  const float k_f = static_cast<float>(k), mean_f = static_cast<float>(mean);
  const float mean_grad_f = static_cast<float>(sum_grad / static_cast<double>(count));
  const float slope = static_cast<float>(k * projection);
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t i = channel_offset(j, c, layout);
    grad_input[i] = T(k_f * (static_cast<float>(grad_out[i]) - mean_grad_f) - slope * (static_cast<float>(x[i]) - mean_f));
  }
}

}  // namespace

template <typename T>
void launch_batch_norm_forward_train(const T* x, const float* gamma, const float* beta, float* running_mean,
                                     float* running_var, double momentum, double eps, T* out, float* save_mean,
                                     float* save_invstd, const ChannelLayout& layout) {
  if (layout.channels == 0) return;
  forward_train_kernel<<<static_cast<unsigned>(layout.channels), kChannelThreads>>>(
      x, gamma, beta, running_mean, running_var, momentum, eps, out, save_mean, save_invstd, layout);
}

template <typename T>
void launch_batch_norm_forward_eval(const T* x, const float* gamma, const float* beta, const float* running_mean,
                                    const float* running_var, double eps, T* out, const ChannelLayout& layout) {
  const int64_t total = layout.batch * layout.channels * layout.inner;
  if (total == 0) return;
  forward_eval_kernel<<<blocks_for(total), kThreadsPerBlock>>>(x, gamma, beta, running_mean, running_var, eps, out,
                                                               layout, total);
}

template <typename T>
void launch_batch_norm_backward(const T* grad_out, const T* x, const float* gamma, const float* save_mean,
                                const float* save_invstd, T* grad_input, float* grad_gamma, float* grad_beta,
                                const ChannelLayout& layout) {
  if (layout.channels == 0) return;
  backward_kernel<<<static_cast<unsigned>(layout.channels), kChannelThreads>>>(
      grad_out, x, gamma, save_mean, save_invstd, grad_input, grad_gamma, grad_beta, layout);
}

#define OPSNN_INSTANTIATE_BATCH_NORM(T)                                                                          \
  template void launch_batch_norm_forward_train<T>(const T*, const float*, const float*, float*, float*, double, \
                                                   double, T*, float*, float*, const ChannelLayout&);            \
  template void launch_batch_norm_forward_eval<T>(const T*, const float*, const float*, const float*,            \
                                                  const float*, double, T*, const ChannelLayout&);               \
  template void launch_batch_norm_backward<T>(const T*, const T*, const float*, const float*, const float*, T*,  \
                                              float*, float*, const ChannelLayout&);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_BATCH_NORM)

}  // namespace opsnn::cuda
