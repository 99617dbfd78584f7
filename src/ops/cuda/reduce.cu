// CUDA sum over chosen dimensions (keepdim layout). Terms accumulate in double in a fixed order (one
// thread, or one block with a fixed reduction tree, per output), so results are reproducible run to
// run; the result is rounded once to the storage type (f32, f16 or bf16). The CPU twin is
// src/ops/cpu/reduce.cpp.
#include "core/cuda/current_stream.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

namespace opsnn::cuda {
namespace {

// Below this many terms per output, one thread sums each output; above, one block does.
constexpr int64_t kThreadPerOutputMaxTerms = 64;

__device__ __forceinline__ int64_t decompose(int64_t index, int dim, const int64_t* extents, const int64_t* strides) {
  int64_t offset = 0;
  for (int d = dim - 1; d >= 0; --d) {
    offset += (index % extents[d]) * strides[d];
    index /= extents[d];
  }
  return offset;
}

template <typename T>
__global__ void sum_thread_per_output_kernel(const T* x, T* out, ReduceLayout layout, int64_t out_count,
                                             int64_t reduced_count) {
  for (int64_t o = global_thread_index(); o < out_count; o += global_thread_count()) {
    const T* base = x + decompose(o, layout.kept_dim, layout.kept_extents, layout.kept_strides);
    double total = 0.0;
    for (int64_t r = 0; r < reduced_count; ++r)
      total += static_cast<double>(
          static_cast<float>(base[decompose(r, layout.reduced_dim, layout.reduced_extents, layout.reduced_strides)]));
    out[o] = T(static_cast<float>(total));
  }
}

template <typename T>
__global__ void sum_block_per_output_kernel(const T* x, T* out, ReduceLayout layout, int64_t out_count,
                                            int64_t reduced_count) {
  __shared__ double scratch[32];
  for (int64_t o = blockIdx.x; o < out_count; o += gridDim.x) {
    const T* base = x + decompose(o, layout.kept_dim, layout.kept_extents, layout.kept_strides);
    double total = 0.0;
    for (int64_t r = threadIdx.x; r < reduced_count; r += blockDim.x)
      total += static_cast<double>(
          static_cast<float>(base[decompose(r, layout.reduced_dim, layout.reduced_extents, layout.reduced_strides)]));
    total = block_reduce(total, scratch, SumOp{});
    if (threadIdx.x == 0) out[o] = T(static_cast<float>(total));
  }
}

}  // namespace

template <typename T>
void launch_sum(const T* x, T* out, const ReduceLayout& layout, int64_t out_count, int64_t reduced_count) {
  if (out_count == 0) return;
  if (reduced_count <= kThreadPerOutputMaxTerms) {
    sum_thread_per_output_kernel<<<blocks_for(out_count), kThreadsPerBlock, 0, current_stream()>>>(
        x, out, layout, out_count, reduced_count);
  } else {
    const unsigned blocks = static_cast<unsigned>(out_count < 65535 * 8 ? out_count : 65535 * 8);
    sum_block_per_output_kernel<<<blocks, kThreadsPerBlock, 0, current_stream()>>>(x, out, layout, out_count,
                                                                                   reduced_count);
  }
}

#define OPSNN_INSTANTIATE_SUM(T) template void launch_sum<T>(const T*, T*, const ReduceLayout&, int64_t, int64_t);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_SUM)

}  // namespace opsnn::cuda
