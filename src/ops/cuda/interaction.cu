// CUDA dot interaction, the twin of src/ops/cpu/interaction.cpp: one thread per output value, summing in
// double over the same terms in the same order as the CPU, so for f32 inputs (whose products are exact in
// double) both give the same bits. Forward: one thread per (sample, pair); backward: one thread per
// (sample, feature, component), no atomics.
#include <cmath>

#include "core/cuda/current_stream.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

namespace opsnn::cuda {
namespace {

__device__ __forceinline__ int64_t pair_index(int64_t i, int64_t j) { return i * (i - 1) / 2 + j; }

// The row i of pair p: the i with i(i-1)/2 <= p < (i+1)i/2, from the square root and corrected for its
// rounding.
__device__ __forceinline__ int64_t pair_row(int64_t p) {
  int64_t i = static_cast<int64_t>((1.0 + sqrt(1.0 + 8.0 * static_cast<double>(p))) / 2.0);
  while (i > 1 && pair_index(i, 0) > p) --i;
  while (pair_index(i + 1, 0) <= p) ++i;
  return i;
}

__global__ void dot_interaction_forward_kernel(const float* x, float* out, int64_t batch, int64_t features,
                                               int64_t width, int64_t pairs) {
  const int64_t total = batch * pairs;
  for (int64_t e = global_thread_index(); e < total; e += global_thread_count()) {
    const int64_t b = e / pairs, p = e - b * pairs;
    const int64_t i = pair_row(p), j = p - pair_index(i, 0);
    const float* left = x + (b * features + i) * width;
    const float* right = x + (b * features + j) * width;
    double sum = 0.0;
    for (int64_t d = 0; d < width; ++d) sum += static_cast<double>(left[d]) * static_cast<double>(right[d]);
    out[e] = static_cast<float>(sum);
  }
}

__global__ void dot_interaction_backward_kernel(const float* grad_out, const float* x, float* grad_x, int64_t batch,
                                                int64_t features, int64_t width, int64_t pairs) {
  const int64_t total = batch * features * width;
  for (int64_t e = global_thread_index(); e < total; e += global_thread_count()) {
    const int64_t d = e % width, row = e / width;
    const int64_t i = row % features, b = row / features;
    const float* sample = x + b * features * width;
    const float* upstream = grad_out + b * pairs;
    double sum = 0.0;
    for (int64_t j = 0; j < features; ++j) {
      if (j == i) continue;
      const double g = static_cast<double>(upstream[j < i ? pair_index(i, j) : pair_index(j, i)]);
      sum += g * static_cast<double>(sample[j * width + d]);
    }
    grad_x[e] = static_cast<float>(sum);
  }
}

}  // namespace

void launch_dot_interaction_forward(const float* x, float* out, int64_t batch, int64_t features, int64_t width) {
  const int64_t pairs = features * (features - 1) / 2;
  if (batch * pairs == 0) return;
  dot_interaction_forward_kernel<<<blocks_for(batch * pairs), kThreadsPerBlock, 0, current_stream()>>>(
      x, out, batch, features, width, pairs);
}

void launch_dot_interaction_backward(const float* grad_out, const float* x, float* grad_x, int64_t batch,
                                     int64_t features, int64_t width) {
  const int64_t pairs = features * (features - 1) / 2;
  if (batch * features * width == 0) return;
  dot_interaction_backward_kernel<<<blocks_for(batch * features * width), kThreadsPerBlock, 0, current_stream()>>>(
      grad_out, x, grad_x, batch, features, width, pairs);
}

}  // namespace opsnn::cuda
