// CUDA pooling kernels over NCHW planes: max pooling with flat h*W+w argmax indices (i32; first maximum
// on ties, NaN propagates) and average pooling with PyTorch's count_include_pad divisor, forward and
// backward, over f32, f16 or bf16 data (sums in f32). Windows are the CPU twin's
// (src/ops/cpu/pool.cpp): the max forward visits the same cells in the same order, and the average
// kernels share its window arithmetic. Both backwards gather: a thread visits the windows that cover its
// input cell in the CPU's order, adds their shares in f32 and writes the cell once, in T (the stride-2 max
// backward takes a 2x2 block of cells per thread). No atomics, no zeroed buffer, deterministic. Every
// kernel decodes its 32-bit positions with multiply-shifts (launches over whole planes, fewer than 2^31
// positions each): the 64-bit divisions they replace made the average backward division-bound.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "core/cuda/fast_divide.h"
#include "core/cuda/vectorized.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"
#include "ops/cuda/pool_support.cuh"
#include "opsnn/core/error.h"

namespace opsnn::cuda {
namespace {

using namespace pool;

struct Window {
  int h_begin, h_end, w_begin, w_end;
  int divisor;
};

__device__ __forceinline__ Window window_at(int oh, int ow, const Geometry32& s) {
  int h_begin = oh * s.stride_h - s.pad_h, w_begin = ow * s.stride_w - s.pad_w;
  // With count_include_pad the divisor counts padding but not cells beyond it.
  const int h_end_padded = min(h_begin + s.kernel_h, s.in_h + s.pad_h);
  const int w_end_padded = min(w_begin + s.kernel_w, s.in_w + s.pad_w);
  const int padded_area = (h_end_padded - h_begin) * (w_end_padded - w_begin);
  const int h_end = min(h_end_padded, s.in_h), w_end = min(w_end_padded, s.in_w);
  h_begin = max(h_begin, 0);
  w_begin = max(w_begin, 0);
  const int area = (h_end - h_begin) * (w_end - w_begin);
  return {h_begin, h_end, w_begin, w_end, s.count_include_pad ? padded_area : area};
}

// One thread per output (grid-stride), the window visited row by row as the CPU twin does (visit_window:
// kWindow > 0 fixes a square window at compile time). Cells outside the input (padding) are skipped: they
// count as -inf and never win.
template <typename T, int kWindow>
__global__ void __launch_bounds__(kPoolThreads)
    max_forward_kernel(const T* x, T* out, int32_t* indices, Geometry32 s, PositionDecoder decode, uint32_t total) {
  const uint32_t stride = gridDim.x * blockDim.x;  // o + stride < 2^32: o and stride are below 2^31
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += stride) {
    const PositionDecoder::Position at = decode(o);
    const int h_origin = at.row * s.stride_h - s.pad_h, w_origin = at.column * s.stride_w - s.pad_w;
    // The first maximum wins ties and the first NaN wins over everything; a window of padding only
    // (or of -inf only) reports its first cell inside the input, as the CPU twin does.
    float best = -INFINITY;
    int best_index = max(h_origin, 0) * s.in_w + max(w_origin, 0);
    visit_window<kWindow>(x + at.plane * s.in_plane(), s, h_origin, w_origin, [&](float value, int dh, int dw) {
      if (value > best || (isnan(value) && !isnan(best))) {
        best = value;
        best_index = (h_origin + dh) * s.in_w + w_origin + dw;
      }
    });
    out[o] = T(best);
    indices[o] = best_index;
  }
}

// One thread per input cell (grid-stride): share(total, o, oh, ow, cell, s) adds, in the CPU's window
// order, the share of each window (oh, ow) covering the cell (o: its flat output position across planes;
// cell: the cell's flat position in its plane) to the cell's f32 total, written once in T.
template <typename T, typename Share>
__global__ void __launch_bounds__(kPoolThreads)
    gather_backward_kernel(T* grad_input, Geometry32 s, PositionDecoder decode, uint32_t total, Share share) {
  const int64_t out_plane = s.out_plane();
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const PositionDecoder::Position at = decode(i);
    const Covering rows = rows_covering(at.row, s), columns = columns_covering(at.column, s);
    float total_value = 0.0f;
    for (int oh = rows.begin; oh < rows.end; ++oh)
      for (int ow = columns.begin; ow < columns.end; ++ow)
        share(total_value, at.plane * out_plane + oh * s.out_w + ow, oh, ow, at.within, s);
    grad_input[i] = T(total_value);
  }
}

// Max pooling's share: the window's gradient where the cell is its argmax. Every index lies inside its
// own window (padding never wins, see the forward), so the covering windows are the only candidates.
template <typename T>
struct MaxShare {
  const T* grad_out;
  const int32_t* indices;
  __device__ __forceinline__ void operator()(float& total, int64_t o, int, int, int cell, const Geometry32&) const {
    if (indices[o] == cell) total += static_cast<float>(grad_out[o]);
  }
};

// Average pooling's share: the window's gradient over its divisor.
template <typename T>
struct AverageShare {
  const T* grad_out;
  __device__ __forceinline__ void operator()(float& total, int64_t o, int oh, int ow, int, const Geometry32& s) const {
    total += static_cast<float>(grad_out[o]) / static_cast<float>(window_at(oh, ow, s).divisor);
  }
};

// The max backward at stride 2 (ResNet's 3x3/2 stem pool): one thread per 2x2 block of input cells, rows
// 2a..2a+1 and columns 2b..2b+1, which the same few windows cover (kernel / 2 + 1 per axis: two for a 3x3
// window; the launcher takes this kernel for windows up to 5 wide; stride2_block_sums). The per-cell
// thread's position decoding and window search are shared by four cells. The sums run in window order per
// cell, as MaxShare's gather does.
template <typename T>
__global__ void __launch_bounds__(kPoolThreads)
    max_backward_stride2_kernel(const T* grad_out, const int32_t* indices, T* grad_input, Geometry32 s,
                                PositionDecoder decode, uint32_t total) {
  const int64_t out_plane = s.out_plane(), in_plane = s.in_plane();
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t b = blockIdx.x * blockDim.x + threadIdx.x; b < total; b += stride) {
    const PositionDecoder::Position at = decode(b);
    const Stride2Block block = stride2_block(at, s);
    float sums[4];
    const int32_t* plane_indices = indices + at.plane * out_plane;
    stride2_block_sums(
        grad_out + at.plane * out_plane, [&](int o, int, int) { return plane_indices[o]; }, block, s, sums);
    store_block(grad_input + at.plane * in_plane, block, s, sums);
  }
}

template <typename T>
__global__ void __launch_bounds__(kPoolThreads)
    avg_forward_kernel(const T* x, T* out, Geometry32 s, PositionDecoder decode, uint32_t total) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += stride) {
    const PositionDecoder::Position at = decode(o);
    const Window window = window_at(at.row, at.column, s);
    const T* in = x + at.plane * s.in_plane();
    float total_value = 0.0f;
    for (int ih = window.h_begin; ih < window.h_end; ++ih)
      for (int iw = window.w_begin; iw < window.w_end; ++iw) total_value += static_cast<float>(in[ih * s.in_w + iw]);
    out[o] = T(total_value / static_cast<float>(window.divisor));
  }
}

}  // namespace

template <typename T>
void launch_max_pool_forward(const T* x, T* out, int32_t* indices, const PoolLayout& layout) {
  const int64_t in_plane = layout.in_h * layout.in_w, out_plane = layout.out_h * layout.out_w;
  OPSNN_CHECK(in_plane <= FastDivider::kMaxDividend,
              "CUDA max_pool2d_forward: planes of 2^31 or more cells are not supported");
  const Geometry32 geometry(layout);
  const PositionDecoder decode(out_plane, layout.out_w);
  const bool square = layout.kernel_h == layout.kernel_w;
  over_plane_runs(layout.planes, out_plane, "max_pool2d_forward", [&](int64_t first, uint32_t total) {
    const T* in = x + first * in_plane;
    T* run_out = out + first * out_plane;
    int32_t* run_indices = indices + first * out_plane;
    // Resident grids: each thread strides over many outputs rather than a block launched per 256.
    const unsigned blocks =
        std::min(blocks_for(total, kPoolThreads), resident_grid<max_forward_kernel<T, 3>>(total, kPoolThreads));
    if (square && layout.kernel_h == 3)
      max_forward_kernel<T, 3>
          <<<blocks, kPoolThreads, 0, current_stream()>>>(in, run_out, run_indices, geometry, decode, total);
    else if (square && layout.kernel_h == 2)
      max_forward_kernel<T, 2>
          <<<blocks, kPoolThreads, 0, current_stream()>>>(in, run_out, run_indices, geometry, decode, total);
    else
      max_forward_kernel<T, 0>
          <<<blocks, kPoolThreads, 0, current_stream()>>>(in, run_out, run_indices, geometry, decode, total);
  });
}

template <typename T>
void launch_max_pool_backward(const T* grad_out, const int32_t* indices, T* grad_input, const PoolLayout& layout) {
  const int64_t in_plane = layout.in_h * layout.in_w, out_plane = layout.out_h * layout.out_w;
  const Geometry32 geometry(layout);
  if (stride2_blocks_fit(layout)) {  // a thread per 2x2 block of cells
    const int64_t blocks_h = (layout.in_h + 1) / 2, blocks_w = (layout.in_w + 1) / 2;
    const PositionDecoder decode(blocks_h * blocks_w, blocks_w);
    OPSNN_CHECK(in_plane <= FastDivider::kMaxDividend,
                "CUDA max_pool2d_backward: planes of 2^31 or more cells are not supported");
    over_plane_runs(layout.planes, blocks_h * blocks_w, "max_pool2d_backward", [&](int64_t first, uint32_t total) {
      const unsigned blocks =
          std::min(blocks_for(total, kPoolThreads), resident_grid<max_backward_stride2_kernel<T>>(total, kPoolThreads));
      max_backward_stride2_kernel<T>
          <<<blocks, kPoolThreads, 0, current_stream()>>>(grad_out + first * out_plane, indices + first * out_plane,
                                                          grad_input + first * in_plane, geometry, decode, total);
    });
    return;
  }
  const PositionDecoder decode(in_plane, layout.in_w);
  over_plane_runs(layout.planes, in_plane, "max_pool2d_backward", [&](int64_t first, uint32_t total) {
    const MaxShare<T> share{grad_out + first * out_plane, indices + first * out_plane};
    gather_backward_kernel<<<blocks_for(total, kPoolThreads), kPoolThreads, 0, current_stream()>>>(
        grad_input + first * in_plane, geometry, decode, total, share);
  });
}

template <typename T>
void launch_avg_pool_forward(const T* x, T* out, const PoolLayout& layout) {
  const int64_t in_plane = layout.in_h * layout.in_w, out_plane = layout.out_h * layout.out_w;
  OPSNN_CHECK(in_plane <= FastDivider::kMaxDividend,
              "CUDA avg_pool2d_forward: planes of 2^31 or more cells are not supported");
  const Geometry32 geometry(layout);
  const PositionDecoder decode(out_plane, layout.out_w);
  over_plane_runs(layout.planes, out_plane, "avg_pool2d_forward", [&](int64_t first, uint32_t total) {
    avg_forward_kernel<T><<<blocks_for(total, kPoolThreads), kPoolThreads, 0, current_stream()>>>(
        x + first * in_plane, out + first * out_plane, geometry, decode, total);
  });
}

template <typename T>
void launch_avg_pool_backward(const T* grad_out, T* grad_input, const PoolLayout& layout) {
  const int64_t in_plane = layout.in_h * layout.in_w, out_plane = layout.out_h * layout.out_w;
  const Geometry32 geometry(layout);
  const PositionDecoder decode(in_plane, layout.in_w);
  over_plane_runs(layout.planes, in_plane, "avg_pool2d_backward", [&](int64_t first, uint32_t total) {
    const AverageShare<T> share{grad_out + first * out_plane};
    gather_backward_kernel<<<blocks_for(total, kPoolThreads), kPoolThreads, 0, current_stream()>>>(
        grad_input + first * in_plane, geometry, decode, total, share);
  });
}

#define OPSNN_INSTANTIATE_POOL(T)                                                             \
  template void launch_max_pool_forward<T>(const T*, T*, int32_t*, const PoolLayout&);        \
  template void launch_max_pool_backward<T>(const T*, const int32_t*, T*, const PoolLayout&); \
  template void launch_avg_pool_forward<T>(const T*, T*, const PoolLayout&);                  \
  template void launch_avg_pool_backward<T>(const T*, T*, const PoolLayout&);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_POOL)

}  // namespace opsnn::cuda
