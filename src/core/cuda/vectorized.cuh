// Memory-bound elementwise kernels made fast in one place: a grid of exactly the blocks that stay
// resident on the device (queried once per kernel and device), grid-stride loops, 16-byte vector loads
// and stores where every operand's address allows it, and scalar loops for the unaligned head and the
// tail. launch_map(op, count, stream, out, in...) computes out[i] = op(in[i]...) for contiguous arrays.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/multiprocessors.h"

namespace opsnn::cuda {

inline constexpr int kMapThreadsPerBlock = 256;
inline constexpr int kVectorBytes = 16;

// Elements per vector step of a kernel over types Ts: 16 bytes of the widest; the narrower operands
// then move 8, 4 or 2 bytes per step.
template <typename... Ts>
inline constexpr int kVectorWidth = kVectorBytes / std::max({sizeof(Ts)...});

template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Vector {
  T values[kWidth];
};

template <int kWidth, typename T>
__device__ __forceinline__ Vector<T, kWidth> load_vector(const T* at) {
  return *reinterpret_cast<const Vector<T, kWidth>*>(at);
}
template <int kWidth, typename T>
__device__ __forceinline__ void store_vector(T* at, const Vector<T, kWidth>& value) {
  *reinterpret_cast<Vector<T, kWidth>*>(at) = value;
}

// How many leading elements to process one by one so that from there on every pointer is aligned to its
// vector size: the same for all when their misalignments (in elements) agree, else `count` (no vector
// steps at all, e.g. a view that starts one element into a buffer, combined with an aligned output).
template <int kWidth, typename... Ts>
int64_t vector_head(int64_t count, const Ts*... pointers) {
  int64_t misalignment = -1;
  bool agree = true;
  auto visit = [&](auto* pointer) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(pointer)>>;
    const auto address = reinterpret_cast<uintptr_t>(pointer);
    if (address % sizeof(T) != 0) {
      agree = false;
      return;
    }
    const auto own = static_cast<int64_t>((address / sizeof(T)) % kWidth);
    if (misalignment < 0)
      misalignment = own;
    else if (own != misalignment)
      agree = false;
  };
  (visit(pointers), ...);
  if (!agree) return count;
  return std::min<int64_t>(count, (kWidth - misalignment) % kWidth);
}

// Blocks of `threads` threads that fill the current device for `kKernel` (SMs x resident blocks per SM,
// queried once per device), fewer when `work_items` (one per thread and loop step) need fewer.
template <auto kKernel>
unsigned resident_grid(int64_t work_items, int threads = kMapThreadsPerBlock) {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> cached_blocks[kCachedDevices];  // static storage: zero until first queried
  int device = 0;
  OPSNN_CUDA_CHECK(cudaGetDevice(&device));
  int blocks = device < kCachedDevices ? cached_blocks[device].load(std::memory_order_relaxed) : 0;
  if (blocks == 0) {
    int per_multiprocessor = 0;
    OPSNN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kKernel, threads, 0));
    blocks = std::max(1, per_multiprocessor * static_cast<int>(multiprocessor_count(device)));
    if (device < kCachedDevices) cached_blocks[device].store(blocks, std::memory_order_relaxed);
  }
  const int64_t needed = (work_items + threads - 1) / threads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, needed)));
}

template <int kWidth, typename Op, typename... In>
__device__ __forceinline__ auto map_vector(const Op& op, const Vector<In, kWidth>&... inputs) {
  Vector<decltype(op(inputs.values[0]...)), kWidth> result;
#pragma unroll
  for (int k = 0; k < kWidth; ++k) result.values[k] = op(inputs.values[k]...);
  return result;
}

// out[i] = op(in[i]...) for i < count: elements [0, head) and the tail one by one, the rest in vector
// steps of kWidth elements, whose addresses are aligned (vector_head). `out` may be one of the inputs.
template <int kWidth, typename Op, typename Out, typename... In>
__global__ void map_kernel(Op op, int64_t count, int64_t head, Out* out, const In*... in) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t vectors = (count - head) / kWidth;
  const int64_t tail = head + vectors * kWidth;
#pragma unroll 1
  for (int64_t i = first; i < head; i += stride) out[i] = op(in[i]...);
#pragma unroll 1
  for (int64_t i = tail + first; i < count; i += stride) out[i] = op(in[i]...);
  for (int64_t v = first; v < vectors; v += stride) {
    const int64_t at = head + v * kWidth;
    store_vector<kWidth>(out + at, map_vector<kWidth>(op, load_vector<kWidth>(in + at)...));
  }
}

template <typename Op, typename Out, typename... In>
void launch_map(const Op& op, int64_t count, cudaStream_t stream, Out* out, const In*... in) {
  if (count <= 0) return;
  constexpr int kWidth = kVectorWidth<Out, In...>;
  const int64_t head = vector_head<kWidth>(count, static_cast<const Out*>(out), in...);
  const int64_t vectors = (count - head) / kWidth;
  const int64_t scalars = count - vectors * kWidth;
  const unsigned blocks = resident_grid<map_kernel<kWidth, Op, Out, In...>>(std::max(vectors, scalars));
  map_kernel<kWidth, Op, Out, In...><<<blocks, kMapThreadsPerBlock, 0, stream>>>(op, count, head, out, in...);
}

}  // namespace opsnn::cuda
