// CUDA pooling kernels over NCHW planes: max pooling with flat h*W+w argmax indices (first maximum on
// ties, NaN propagates) and average pooling with PyTorch's count_include_pad divisor, forward and
// backward, over f32, f16 or bf16 data (sums in f32). Windows are the CPU twin's
// (src/ops/cpu/pool.cpp): the max forward visits the same cells in the same order, and the average
// kernels share its window arithmetic line for line. The max backward gathers each plane's gradients
// in shared memory and writes grad_input once, in T, so it needs neither a zeroed f32 buffer nor a
// conversion pass.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/fast_divide.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"
#include "opsnn/core/error.h"

namespace opsnn::cuda {
namespace {

struct Window {
  int64_t h_begin, h_end, w_begin, w_end;
  int64_t divisor;
};

__device__ __forceinline__ Window window_at(int64_t oh, int64_t ow, const PoolLayout& s) {
  int64_t h_begin = oh * s.stride_h - s.pad_h, w_begin = ow * s.stride_w - s.pad_w;
  // With count_include_pad the divisor counts padding but not cells beyond it.
  const int64_t h_end_padded = min(h_begin + s.kernel_h, s.in_h + s.pad_h);
  const int64_t w_end_padded = min(w_begin + s.kernel_w, s.in_w + s.pad_w);
  const int64_t padded_area = (h_end_padded - h_begin) * (w_end_padded - w_begin);
  const int64_t h_end = min(h_end_padded, s.in_h), w_end = min(w_end_padded, s.in_w);
  h_begin = max(h_begin, int64_t{0});
  w_begin = max(w_begin, int64_t{0});
  const int64_t area = (h_end - h_begin) * (w_end - w_begin);
  return {h_begin, h_end, w_begin, w_end, s.count_include_pad ? padded_area : area};
}

constexpr int kMaxPoolThreads = 256;  // per block of the max-pool kernels
// The max backward's shared f32 tile of input cells: 64 KiB (16384 cells, a 128x128 plane) fits a
// block on every GPU since Volta once opted in; a Hopper SM holds three such blocks, or four of a
// 112x112 plane's 49 KiB.
constexpr int64_t kMaxTileBytes = 64 * 1024;
constexpr int64_t kDefaultSharedBytes = 48 * 1024;  // what a block gets without opting in

// Outputs of one launch (whole planes, fewer than 2^31 outputs) decode with 32-bit multiply-shifts:
// output o is in plane o / out_plane, row (o % out_plane) / out_w.
struct OutputDecoder {
  FastDivider plane, row;
};

// One thread per output (grid-stride), the window visited row by row as the CPU twin does. kWindow > 0
// fixes a square kWindow x kWindow window at compile time (unrolled loops); 0 reads it from the layout.
// Cells outside the input (padding) are skipped: they count as -inf and never win.
template <typename T, int kWindow>
__global__ void __launch_bounds__(kMaxPoolThreads)
    max_forward_kernel(const T* x, T* out, int64_t* indices, PoolLayout s, OutputDecoder decode, uint32_t total) {
  const uint32_t out_plane = decode.plane.divisor, out_w = decode.row.divisor;
  const int in_h = static_cast<int>(s.in_h), in_w = static_cast<int>(s.in_w);
  const int kernel_h = kWindow > 0 ? kWindow : static_cast<int>(s.kernel_h);
  const int kernel_w = kWindow > 0 ? kWindow : static_cast<int>(s.kernel_w);
  const uint32_t stride = gridDim.x * blockDim.x;  // o + stride < 2^32: o and stride are below 2^31
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += stride) {
    const uint32_t plane = decode.plane.divide(o), within = o - plane * out_plane;
    const uint32_t oh = decode.row.divide(within), ow = within - oh * out_w;
    const int h_origin = static_cast<int>(oh) * static_cast<int>(s.stride_h) - static_cast<int>(s.pad_h);
    const int w_origin = static_cast<int>(ow) * static_cast<int>(s.stride_w) - static_cast<int>(s.pad_w);
    const T* in = x + static_cast<int64_t>(plane) * in_h * in_w;
    // The first maximum wins ties and the first NaN wins over everything; a window of padding only
    // (or of -inf only) reports its first cell inside the input, as the CPU twin does.
    float best = -INFINITY;
    int best_index = max(h_origin, 0) * in_w + max(w_origin, 0);
#pragma unroll
    for (int dh = 0; dh < kernel_h; ++dh) {
      const int ih = h_origin + dh;
      if (ih < 0 || ih >= in_h) continue;
#pragma unroll
      for (int dw = 0; dw < kernel_w; ++dw) {
        const int iw = w_origin + dw;
        if (iw < 0 || iw >= in_w) continue;
        const float value = static_cast<float>(in[ih * in_w + iw]);
        if (value > best || (isnan(value) && !isnan(best))) {
          best = value;
          best_index = ih * in_w + iw;
        }
      }
    }
    out[o] = T(best);
    indices[o] = best_index;
  }
}

// One block per (plane, tile of tile_cells input cells), grid-stride over them: the block adds the
// gradients of the plane's outputs whose argmax lies in its tile into a zeroed f32 tile in shared
// memory, then writes the whole tile, zeros included, rounded once to T. Nothing is read from or
// zeroed in global memory beforehand, and only the tile's adds are atomic (shared, cheap); a cell that
// is the argmax of three or more windows may differ in its last bit between runs, as with the global
// atomics of a scatter.
template <typename T>
__global__ void __launch_bounds__(kMaxPoolThreads)
    max_backward_kernel(const T* grad_out, const int64_t* indices, T* grad_input, int64_t planes, int64_t in_plane,
                        int64_t out_plane, int64_t tile_cells, int64_t tiles) {
  extern __shared__ float tile[];
  for (int64_t task = blockIdx.x; task < planes * tiles; task += gridDim.x) {
    const int64_t plane = task / tiles, first = (task - plane * tiles) * tile_cells;
    const int cells = static_cast<int>(min(tile_cells, in_plane - first));
    for (int i = threadIdx.x; i < cells; i += blockDim.x) tile[i] = 0.0f;
    __syncthreads();
    const int64_t* plane_indices = indices + plane * out_plane;
    const T* plane_grads = grad_out + plane * out_plane;
    for (int64_t o = threadIdx.x; o < out_plane; o += blockDim.x) {
      const int64_t cell = plane_indices[o] - first;
      if (cell >= 0 && cell < cells) atomicAdd(tile + cell, static_cast<float>(plane_grads[o]));
    }
    __syncthreads();
    T* plane_input = grad_input + plane * in_plane + first;
    for (int i = threadIdx.x; i < cells; i += blockDim.x) plane_input[i] = T(tile[i]);
    __syncthreads();  // the tile is zeroed again for the next task
  }
}

template <typename T>
__global__ void avg_forward_kernel(const T* x, T* out, PoolLayout s, int64_t total) {
  const int64_t out_plane = s.out_h * s.out_w;
  for (int64_t o = global_thread_index(); o < total; o += global_thread_count()) {
    const int64_t plane = o / out_plane, within = o - plane * out_plane;
    const int64_t oh = within / s.out_w, ow = within - oh * s.out_w;
    const Window window = window_at(oh, ow, s);
    const T* in = x + plane * s.in_h * s.in_w;
    float total_value = 0.0f;
    for (int64_t ih = window.h_begin; ih < window.h_end; ++ih)
      for (int64_t iw = window.w_begin; iw < window.w_end; ++iw)
        total_value += static_cast<float>(in[ih * s.in_w + iw]);
    out[o] = T(total_value / static_cast<float>(window.divisor));
  }
}

// One thread per input cell gathers the shares of every window covering it (in the CPU's window
// order), so no atomics are needed and the result is deterministic.
template <typename T>
__global__ void avg_backward_kernel(const T* grad_out, T* grad_input, PoolLayout s, int64_t total) {
  const int64_t in_plane = s.in_h * s.in_w, out_plane = s.out_h * s.out_w;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t plane = i / in_plane, within = i - plane * in_plane;
    const int64_t ih = within / s.in_w, iw = within - ih * s.in_w;
    // Windows oh with oh * stride - pad <= ih < oh * stride - pad + kernel.
    const int64_t oh_begin = ih + s.pad_h < s.kernel_h ? 0 : (ih + s.pad_h - s.kernel_h) / s.stride_h + 1;
    const int64_t oh_end = min(s.out_h, (ih + s.pad_h) / s.stride_h + 1);
    const int64_t ow_begin = iw + s.pad_w < s.kernel_w ? 0 : (iw + s.pad_w - s.kernel_w) / s.stride_w + 1;
    const int64_t ow_end = min(s.out_w, (iw + s.pad_w) / s.stride_w + 1);
    const T* upstream = grad_out + plane * out_plane;
    float total_value = 0.0f;
    for (int64_t oh = oh_begin; oh < oh_end; ++oh)
      for (int64_t ow = ow_begin; ow < ow_end; ++ow)
        total_value +=
            static_cast<float>(upstream[oh * s.out_w + ow]) / static_cast<float>(window_at(oh, ow, s).divisor);
    grad_input[i] = T(total_value);
  }
}

}  // namespace

template <typename T>
void launch_max_pool_forward(const T* x, T* out, int64_t* indices, const PoolLayout& layout) {
  const int64_t in_plane = layout.in_h * layout.in_w, out_plane = layout.out_h * layout.out_w;
  if (layout.planes * out_plane == 0) return;
  constexpr int64_t kMaxDividend = FastDivider::kMaxDividend;
  OPSNN_CHECK(out_plane <= kMaxDividend && in_plane <= kMaxDividend,
              "CUDA max_pool2d_forward: planes of 2^31 or more cells are not supported");
  const OutputDecoder decode{FastDivider(static_cast<uint32_t>(out_plane)),
                             FastDivider(static_cast<uint32_t>(layout.out_w))};
  const bool square = layout.kernel_h == layout.kernel_w;
  // Launches over as many whole planes as keep the outputs' indices below 2^31.
  const int64_t planes_per_launch = kMaxDividend / out_plane;
  for (int64_t first = 0; first < layout.planes; first += planes_per_launch) {
    const int64_t planes = std::min(planes_per_launch, layout.planes - first);
    const auto total = static_cast<uint32_t>(planes * out_plane);
    const T* in = x + first * in_plane;
    T* plane_out = out + first * out_plane;
    int64_t* plane_indices = indices + first * out_plane;
    const unsigned blocks = blocks_for(total, kMaxPoolThreads);
    if (square && layout.kernel_h == 3)
      max_forward_kernel<T, 3><<<blocks, kMaxPoolThreads>>>(in, plane_out, plane_indices, layout, decode, total);
    else if (square && layout.kernel_h == 2)
      max_forward_kernel<T, 2><<<blocks, kMaxPoolThreads>>>(in, plane_out, plane_indices, layout, decode, total);
    else
      max_forward_kernel<T, 0><<<blocks, kMaxPoolThreads>>>(in, plane_out, plane_indices, layout, decode, total);
  }
}

template <typename T>
void launch_max_pool_backward(const T* grad_out, const int64_t* indices, T* grad_input, int64_t planes,
                              int64_t in_plane, int64_t out_plane) {
  if (planes * in_plane == 0) return;
  const int64_t tile_cells = std::min<int64_t>(in_plane, kMaxTileBytes / static_cast<int64_t>(sizeof(float)));
  const int64_t tiles = (in_plane + tile_cells - 1) / tile_cells;
  const auto shared_bytes = static_cast<int>(tile_cells * static_cast<int64_t>(sizeof(float)));
  if (shared_bytes > kDefaultSharedBytes)
    OPSNN_CUDA_CHECK(
        cudaFuncSetAttribute(max_backward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes));
  // One block per (plane, tile) task, up to a cap; each block then loops over tasks.
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(planes * tiles, 65535LL * 8));
  max_backward_kernel<T><<<blocks, kMaxPoolThreads, shared_bytes>>>(grad_out, indices, grad_input, planes, in_plane,
                                                                    out_plane, tile_cells, tiles);
}

template <typename T>
void launch_avg_pool_forward(const T* x, T* out, const PoolLayout& layout) {
  const int64_t total = layout.planes * layout.out_h * layout.out_w;
  if (total == 0) return;
  avg_forward_kernel<<<blocks_for(total), kThreadsPerBlock>>>(x, out, layout, total);
}

template <typename T>
void launch_avg_pool_backward(const T* grad_out, T* grad_input, const PoolLayout& layout) {
  const int64_t total = layout.planes * layout.in_h * layout.in_w;
  if (total == 0) return;
  avg_backward_kernel<<<blocks_for(total), kThreadsPerBlock>>>(grad_out, grad_input, layout, total);
}

#define OPSNN_INSTANTIATE_POOL(T)                                                                     \
  template void launch_max_pool_forward<T>(const T*, T*, int64_t*, const PoolLayout&);                \
  template void launch_max_pool_backward<T>(const T*, const int64_t*, T*, int64_t, int64_t, int64_t); \
  template void launch_avg_pool_forward<T>(const T*, T*, const PoolLayout&);                          \
  template void launch_avg_pool_backward<T>(const T*, T*, const PoolLayout&);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_POOL)

}  // namespace opsnn::cuda
