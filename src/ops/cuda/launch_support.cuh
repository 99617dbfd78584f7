// Device-side helpers shared by the .cu files of the CUDA compute backend: grid sizing for grid-stride
// loops and deterministic block-wide reductions (fixed shuffle tree, so equal inputs give equal sums).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace opsnn::cuda {

inline constexpr int kThreadsPerBlock = 256;

// Blocks for a grid-stride loop over `count` items; capped, since each thread loops anyway.
inline unsigned blocks_for(int64_t count, int threads = kThreadsPerBlock) {
  const int64_t blocks = (count + threads - 1) / threads;
  constexpr int64_t kMaxBlocks = 65535LL * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// Grid-stride index range helpers.
__device__ __forceinline__ int64_t global_thread_index() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t global_thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return b > a ? b : a;
  }
};

// Reduces `value` over the block (blockDim.x a multiple of 32, at most 1024) and returns the result to
// every thread. `scratch` is shared memory of 32 elements; the call contains __syncthreads.
template <typename T, typename Op>
__device__ T block_reduce(T value, T* scratch, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1) value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < warps ? scratch[lane] : scratch[0];
    // Only lanes below `warps` hold partials: each step combines a lane with lane + offset only when
    // that lane holds one, so the padding values never enter lane 0's result.
    for (int offset = 16; offset > 0; offset >>= 1) {
      T other = __shfl_down_sync(0xffffffffu, value, offset);
      if (lane + offset < warps) value = op(value, other);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) scratch[0] = value;
  __syncthreads();
  const T result = scratch[0];
  __syncthreads();
  return result;
}

}  // namespace opsnn::cuda
