// CUDA embedding lookup (gather rows of the table), its dense backward (scatter-add with atomics, so
// duplicate indices accumulate; the summation order of duplicates is unspecified, unlike the CPU twin in
// src/ops/cpu/embedding.cpp), and the index range check that embedding and nll_loss run before use.
#include <cmath>

#include "core/cuda/current_stream.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

namespace opsnn::cuda {
namespace {

// An index outside the table reaches these kernels only from a replayed graph, whose check reports it
// afterwards (ops.cpp): its row reads as NaN and its gradient is dropped, never an access outside the table.
__global__ void embedding_forward_kernel(const float* table, const int64_t* indices, float* out, int64_t count,
                                         int64_t width, int64_t table_rows) {
  const int64_t total = count * width;
  for (int64_t e = global_thread_index(); e < total; e += global_thread_count()) {
    const int64_t i = e / width, k = e - i * width, row = indices[i];
    out[e] = row >= 0 && row < table_rows ? table[row * width + k] : NAN;
  }
}

__global__ void embedding_backward_kernel(const float* grad_out, const int64_t* indices, float* grad_weight,
                                          int64_t count, int64_t width, int64_t table_rows) {
  const int64_t total = count * width;
  for (int64_t e = global_thread_index(); e < total; e += global_thread_count()) {
    const int64_t i = e / width, k = e - i * width, row = indices[i];
    if (row >= 0 && row < table_rows) atomicAdd(grad_weight + row * width + k, grad_out[e]);
  }
}

__global__ void find_out_of_range_kernel(const int64_t* values, int64_t count, int64_t limit,
                                         unsigned long long* first_bad) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count())
    if (values[i] < 0 || values[i] >= limit) atomicMin(first_bad, static_cast<unsigned long long>(i));
}

__global__ void reset_kernel(unsigned long long* first_bad) { *first_bad = ~0ULL; }

// A graph's sticky record {position, value} takes this replay's first bad position when it holds none.
__global__ void commit_out_of_range_kernel(const int64_t* values, const unsigned long long* first_bad,
                                           unsigned long long* record) {
  const unsigned long long position = *first_bad;
  if (position == ~0ULL || record[0] != ~0ULL) return;
  record[0] = position;
  record[1] = static_cast<unsigned long long>(values[position]);
}

}  // namespace

void launch_embedding_forward(const float* table, const int64_t* indices, float* out, int64_t count, int64_t width,
                              int64_t table_rows) {
  if (count * width == 0) return;
  embedding_forward_kernel<<<blocks_for(count * width), kThreadsPerBlock, 0, current_stream()>>>(
      table, indices, out, count, width, table_rows);
}

void launch_embedding_backward(const float* grad_out, const int64_t* indices, float* grad_weight, int64_t count,
                               int64_t width, int64_t table_rows) {
  if (count * width == 0) return;
  embedding_backward_kernel<<<blocks_for(count * width), kThreadsPerBlock, 0, current_stream()>>>(
      grad_out, indices, grad_weight, count, width, table_rows);
}

void launch_find_out_of_range(const int64_t* values, int64_t count, int64_t limit, unsigned long long* first_bad) {
  reset_kernel<<<1, 1, 0, current_stream()>>>(first_bad);
  if (count == 0) return;
  find_out_of_range_kernel<<<blocks_for(count), kThreadsPerBlock, 0, current_stream()>>>(values, count, limit,
                                                                                         first_bad);
}

void launch_commit_out_of_range(const int64_t* values, const unsigned long long* first_bad,
                                unsigned long long* record) {
  commit_out_of_range_kernel<<<1, 1, 0, current_stream()>>>(values, first_bad, record);
}

}  // namespace opsnn::cuda
