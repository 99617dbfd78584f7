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
#include "opsnn/core/error.h"

namespace opsnn::cuda {
namespace {

// A launch's sizes in 32 bits: planes hold fewer than 2^31 cells, and kernel, stride and padding are at
// most the padded plane's extent. The strides also as multiply-shift dividers, for the backwards' search
// of the windows covering a cell.
struct Geometry32 {
  int in_h, in_w, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  FastDivider by_stride_h, by_stride_w;
  bool count_include_pad;
  explicit Geometry32(const PoolLayout& s)
      : in_h(static_cast<int>(s.in_h)),
        in_w(static_cast<int>(s.in_w)),
        out_h(static_cast<int>(s.out_h)),
        out_w(static_cast<int>(s.out_w)),
        kernel_h(static_cast<int>(s.kernel_h)),
        kernel_w(static_cast<int>(s.kernel_w)),
        stride_h(static_cast<int>(s.stride_h)),
        stride_w(static_cast<int>(s.stride_w)),
        pad_h(static_cast<int>(s.pad_h)),
        pad_w(static_cast<int>(s.pad_w)),
        by_stride_h(static_cast<uint32_t>(s.stride_h)),
        by_stride_w(static_cast<uint32_t>(s.stride_w)),
        count_include_pad(s.count_include_pad) {}
};

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

// The windows covering input row (or column) i: those o with o * stride - pad <= i < o * stride - pad +
// kernel, clipped to [0, outputs).
struct Covering {
  int begin, end;
};
__device__ __forceinline__ Covering windows_covering(int i, int kernel, const FastDivider& stride, int pad,
                                                     int outputs) {
  const uint32_t padded = static_cast<uint32_t>(i + pad);
  return {static_cast<int>(padded) < kernel ? 0 : static_cast<int>(stride.divide(padded - kernel)) + 1,
          min(outputs, static_cast<int>(stride.divide(padded)) + 1)};
}
__device__ __forceinline__ Covering rows_covering(int row, const Geometry32& s) {
  return windows_covering(row, s.kernel_h, s.by_stride_h, s.pad_h, s.out_h);
}
__device__ __forceinline__ Covering columns_covering(int column, const Geometry32& s) {
  return windows_covering(column, s.kernel_w, s.by_stride_w, s.pad_w, s.out_w);
}

// Decodes position p of a launch over whole planes of plane_cells cells, row_cells per row: its plane,
// row and column.
struct PositionDecoder {
  FastDivider plane, row;
  PositionDecoder(int64_t plane_cells, int64_t row_cells)
      : plane(static_cast<uint32_t>(plane_cells)), row(static_cast<uint32_t>(row_cells)) {}
  struct Position {
    uint32_t plane;
    int row, column, within;
  };
  __device__ __forceinline__ Position operator()(uint32_t p) const {
    const uint32_t plane_index = plane.divide(p), within = p - plane_index * plane.divisor;
    const uint32_t row_index = row.divide(within);
    return {plane_index, static_cast<int>(row_index), static_cast<int>(within - row_index * row.divisor),
            static_cast<int>(within)};
  }
};

// Calls launch(first_plane, positions) for runs of whole planes of plane_cells positions each, fewer than
// 2^31 positions per run.
template <typename Launch>
void over_plane_runs(int64_t planes, int64_t plane_cells, const char* op, Launch&& launch) {
  constexpr int64_t kMaxDividend = FastDivider::kMaxDividend;
  OPSNN_CHECK(plane_cells <= kMaxDividend, "CUDA ", op, ": planes of 2^31 or more cells are not supported");
  if (planes * plane_cells == 0) return;
  const int64_t planes_per_launch = kMaxDividend / plane_cells;
  for (int64_t first = 0; first < planes; first += planes_per_launch) {
    const int64_t run = std::min(planes_per_launch, planes - first);
    launch(first, static_cast<uint32_t>(run * plane_cells));
  }
}

constexpr int kPoolThreads = 256;  // per block of the pooling kernels

// One thread per output (grid-stride), the window visited row by row as the CPU twin does. kWindow > 0
// fixes a square kWindow x kWindow window at compile time (unrolled loops); 0 reads it from the layout.
// Cells outside the input (padding) are skipped: they count as -inf and never win.
template <typename T, int kWindow>
__global__ void __launch_bounds__(kPoolThreads)
    max_forward_kernel(const T* x, T* out, int32_t* indices, Geometry32 s, PositionDecoder decode, uint32_t total) {
  const int kernel_h = kWindow > 0 ? kWindow : s.kernel_h;
  const int kernel_w = kWindow > 0 ? kWindow : s.kernel_w;
  const uint32_t stride = gridDim.x * blockDim.x;  // o + stride < 2^32: o and stride are below 2^31
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += stride) {
    const PositionDecoder::Position at = decode(o);
    const int h_origin = at.row * s.stride_h - s.pad_h, w_origin = at.column * s.stride_w - s.pad_w;
    const T* in = x + static_cast<int64_t>(at.plane) * s.in_h * s.in_w;
    // The first maximum wins ties and the first NaN wins over everything; a window of padding only
    // (or of -inf only) reports its first cell inside the input, as the CPU twin does.
    float best = -INFINITY;
    int best_index = max(h_origin, 0) * s.in_w + max(w_origin, 0);
    const auto visit = [&](float value, int ih, int iw) {
      if (value > best || (isnan(value) && !isnan(best))) {
        best = value;
        best_index = ih * s.in_w + iw;
      }
    };
    if constexpr (kWindow > 0) {
      // Every load of the window first, padding as -inf (which never wins), then the comparisons in the
      // same order: the loads are in flight together rather than one after another.
      float values[kWindow * kWindow];
#pragma unroll
      for (int dh = 0; dh < kWindow; ++dh)
#pragma unroll
        for (int dw = 0; dw < kWindow; ++dw) {
          const int ih = h_origin + dh, iw = w_origin + dw;
          const bool inside = ih >= 0 && ih < s.in_h && iw >= 0 && iw < s.in_w;
          values[dh * kWindow + dw] = inside ? static_cast<float>(in[ih * s.in_w + iw]) : -INFINITY;
        }
#pragma unroll
      for (int dh = 0; dh < kWindow; ++dh)
#pragma unroll
        for (int dw = 0; dw < kWindow; ++dw) visit(values[dh * kWindow + dw], h_origin + dh, w_origin + dw);
    } else {
      for (int dh = 0; dh < kernel_h; ++dh) {
        const int ih = h_origin + dh;
        if (ih < 0 || ih >= s.in_h) continue;
        for (int dw = 0; dw < kernel_w; ++dw) {
          const int iw = w_origin + dw;
          if (iw >= 0 && iw < s.in_w) visit(static_cast<float>(in[ih * s.in_w + iw]), ih, iw);
        }
      }
    }
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
  const int64_t out_plane = static_cast<int64_t>(s.out_h) * s.out_w;
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

// Windows per axis the stride-2 max backward can take over a 2-cell block (kernel / 2 + 1 each).
constexpr int kMaxCovering = 3;

// Stores a (and b after it, with `both`): 16-bit values at a 4-byte boundary as one 32-bit word, so a
// warp's row of cells is one contiguous store.
template <typename T>
__device__ __forceinline__ void store_row_pair(T* at, float a, float b, bool both) {
  if constexpr (sizeof(T) == 2) {
    if (both && reinterpret_cast<uintptr_t>(at) % 4 == 0) {
      *reinterpret_cast<uint32_t*>(at) = static_cast<uint32_t>(T(a).bits) | (static_cast<uint32_t>(T(b).bits) << 16);
      return;
    }
  }
  at[0] = T(a);
  if (both) at[1] = T(b);
}

// The max backward at stride 2 (ResNet's 3x3/2 stem pool): one thread per 2x2 block of input cells, rows
// 2a..2a+1 and columns 2b..2b+1, which the same few windows cover (kernel / 2 + 1 per axis: two for a 3x3
// window; the launcher takes this kernel for windows up to 5 wide). Each covering window's index is read
// once and compared with the block's four cells, so the per-cell thread's position decoding and window
// search are shared by four cells. The sums run in window order per cell, as MaxShare's gather does.
template <typename T>
__global__ void __launch_bounds__(kPoolThreads)
    max_backward_stride2_kernel(const T* grad_out, const int32_t* indices, T* grad_input, Geometry32 s,
                                PositionDecoder decode, uint32_t total) {
  const int64_t out_plane = static_cast<int64_t>(s.out_h) * s.out_w;
  const int64_t in_plane = static_cast<int64_t>(s.in_h) * s.in_w;
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t b = blockIdx.x * blockDim.x + threadIdx.x; b < total; b += stride) {
    const PositionDecoder::Position at = decode(b);
    const int row = 2 * at.row, column = 2 * at.column;
    const bool second_row = row + 1 < s.in_h, second_column = column + 1 < s.in_w;
    const Covering rows = {rows_covering(row, s).begin, rows_covering(second_row ? row + 1 : row, s).end};
    const Covering columns = {columns_covering(column, s).begin,
                              columns_covering(second_column ? column + 1 : column, s).end};
    const int32_t* plane_indices = indices + at.plane * out_plane;
    const T* plane_grads = grad_out + at.plane * out_plane;
    const int first = row * s.in_w + column;
    // Every covering window's index and gradient loaded first (-1 for none: it names no cell), so the
    // loads are in flight together; then the sums in window order.
    int32_t window_index[kMaxCovering][kMaxCovering];
    float window_grad[kMaxCovering][kMaxCovering];
#pragma unroll
    for (int i = 0; i < kMaxCovering; ++i)
#pragma unroll
      for (int j = 0; j < kMaxCovering; ++j) {
        const int oh = rows.begin + i, ow = columns.begin + j, o = oh * s.out_w + ow;
        const bool covering = oh < rows.end && ow < columns.end;
        window_index[i][j] = covering ? plane_indices[o] : -1;
        window_grad[i][j] = covering ? static_cast<float>(plane_grads[o]) : 0.0f;
      }
    float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // (row, column), (row, column + 1), (row + 1, column), ...
#pragma unroll
    for (int i = 0; i < kMaxCovering; ++i)
#pragma unroll
      for (int j = 0; j < kMaxCovering; ++j) {
        const int offset = window_index[i][j] - first;
        // Which of the block's cells the index names, if any (a flat index one past the row's end is the
        // next row's first cell, another block's).
        int cell = -1;
        if (offset == 0)
          cell = 0;
        else if (second_column && offset == 1)
          cell = 1;
        else if (second_row && offset == s.in_w)
          cell = 2;
        else if (second_row && second_column && offset == s.in_w + 1)
          cell = 3;
        if (cell >= 0) sums[cell] += window_grad[i][j];
      }
    T* plane_input = grad_input + at.plane * in_plane + first;
    store_row_pair(plane_input, sums[0], sums[1], second_column);
    if (second_row) store_row_pair(plane_input + s.in_w, sums[2], sums[3], second_column);
  }
}

template <typename T>
__global__ void __launch_bounds__(kPoolThreads)
    avg_forward_kernel(const T* x, T* out, Geometry32 s, PositionDecoder decode, uint32_t total) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += stride) {
    const PositionDecoder::Position at = decode(o);
    const Window window = window_at(at.row, at.column, s);
    const T* in = x + static_cast<int64_t>(at.plane) * s.in_h * s.in_w;
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
  if (layout.stride_h == 2 && layout.stride_w == 2 && layout.kernel_h / 2 + 1 <= kMaxCovering &&
      layout.kernel_w / 2 + 1 <= kMaxCovering) {  // a thread per 2x2 block of cells
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
