// CUDA embedding lookup (gather rows of the table), its dense backward (scatter-add with atomics, so
// duplicate indices accumulate; the summation order of duplicates is unspecified, unlike the CPU twin in
// src/ops/cpu/embedding.cpp), and the index range check that embedding and nll_loss run before use.
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

namespace opsnn::cuda {
namespace {

__global__ void embedding_forward_kernel(const float* table, const int64_t* indices, float* out, int64_t count,
                                         int64_t width) {
  const int64_t total = count * width;
  for (int64_t e = global_thread_index(); e < total; e += global_thread_count()) {
    const int64_t i = e / width, k = e - i * width;
    out[e] = table[indices[i] * width + k];
  }
}

__global__ void embedding_backward_kernel(const float* grad_out, const int64_t* indices, float* grad_weight,
                                          int64_t count, int64_t width) {
  const int64_t total = count * width;
  for (int64_t e = global_thread_index(); e < total; e += global_thread_count()) {
    const int64_t i = e / width, k = e - i * width;
    atomicAdd(grad_weight + indices[i] * width + k, grad_out[e]);
  }
}

__global__ void find_out_of_range_kernel(const int64_t* values, int64_t count, int64_t limit,
                                         unsigned long long* first_bad) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count())
    if (values[i] < 0 || values[i] >= limit) atomicMin(first_bad, static_cast<unsigned long long>(i));
}

__global__ void reset_kernel(unsigned long long* first_bad) { *first_bad = ~0ULL; }

}  // namespace

void launch_embedding_forward(const float* table, const int64_t* indices, float* out, int64_t count, int64_t width) {
  if (count * width == 0) return;
  embedding_forward_kernel<<<blocks_for(count * width), kThreadsPerBlock>>>(table, indices, out, count, width);
}

void launch_embedding_backward(const float* grad_out, const int64_t* indices, float* grad_weight, int64_t count,
                               int64_t width) {
  if (count * width == 0) return;
  embedding_backward_kernel<<<blocks_for(count * width), kThreadsPerBlock>>>(grad_out, indices, grad_weight, count,
                                                                             width);
}

void launch_find_out_of_range(const int64_t* values, int64_t count, int64_t limit, unsigned long long* first_bad) {
  reset_kernel<<<1, 1>>>(first_bad);
  if (count == 0) return;
  find_out_of_range_kernel<<<blocks_for(count), kThreadsPerBlock>>>(values, count, limit, first_bad);
}

}  // namespace opsnn::cuda
