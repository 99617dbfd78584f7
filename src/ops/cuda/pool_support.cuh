// Device and host helpers shared by the pooling kernels (pool.cu) and the fused batch norm, relu and max
// pooling of a ResNet stem (norm_pool.cu): 32-bit launch geometry, the windows covering an input cell,
// position decoding with multiply-shifts, launches over runs of whole planes, and paired 16-bit stores.
// Internal to src/ops/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/fast_divide.h"
#include "ops/cuda/kernels.h"
#include "opsnn/core/error.h"

namespace opsnn::cuda::pool {

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
  // Cells per input and per output plane, as offsets of whole planes are counted.
  __host__ __device__ int64_t in_plane() const { return static_cast<int64_t>(in_h) * in_w; }
  __host__ __device__ int64_t out_plane() const { return static_cast<int64_t>(out_h) * out_w; }
};

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

// Calls visit(value, dh, dw) for the cells of the window at (h_origin, w_origin) of one plane that lie inside
// the input, row by row, each value loaded as a float (padding is skipped). kWindow > 0 fixes a square
// kWindow x kWindow window at compile time and issues every load before the first visit, so the loads are
// in flight together; 0 reads the window from the geometry.
template <int kWindow, typename T, typename Visit>
__device__ __forceinline__ void visit_window(const T* plane, const Geometry32& s, int h_origin, int w_origin,
                                             Visit&& visit) {
  if constexpr (kWindow > 0) {
    float values[kWindow * kWindow];
    bool inside[kWindow * kWindow];
#pragma unroll
    for (int dh = 0; dh < kWindow; ++dh)
#pragma unroll
      for (int dw = 0; dw < kWindow; ++dw) {
        const int ih = h_origin + dh, iw = w_origin + dw, k = dh * kWindow + dw;
        inside[k] = ih >= 0 && ih < s.in_h && iw >= 0 && iw < s.in_w;
        values[k] = inside[k] ? static_cast<float>(plane[ih * s.in_w + iw]) : 0.0f;
      }
#pragma unroll
    for (int dh = 0; dh < kWindow; ++dh)
#pragma unroll
      for (int dw = 0; dw < kWindow; ++dw)
        if (inside[dh * kWindow + dw]) visit(values[dh * kWindow + dw], dh, dw);
  } else {
    for (int dh = 0; dh < s.kernel_h; ++dh) {
      const int ih = h_origin + dh;
      if (ih < 0 || ih >= s.in_h) continue;
      for (int dw = 0; dw < s.kernel_w; ++dw) {
        const int iw = w_origin + dw;
        if (iw >= 0 && iw < s.in_w) visit(static_cast<float>(plane[ih * s.in_w + iw]), dh, dw);
      }
    }
  }
}

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

// Loads a (and b after it, with `both`) as floats: 16-bit values at a 4-byte boundary as one 32-bit word,
// store_row_pair's counterpart.
template <typename T>
__device__ __forceinline__ void load_row_pair(const T* at, bool both, float& a, float& b) {
  if constexpr (sizeof(T) == 2) {
    if (both && reinterpret_cast<uintptr_t>(at) % 4 == 0) {
      const uint32_t word = *reinterpret_cast<const uint32_t*>(at);
      a = static_cast<float>(T::from_bits(static_cast<uint16_t>(word & 0xffffu)));
      b = static_cast<float>(T::from_bits(static_cast<uint16_t>(word >> 16)));
      return;
    }
  }
  a = static_cast<float>(at[0]);
  b = both ? static_cast<float>(at[1]) : 0.0f;
}

// The 2x2 block of input cells that position `at` of a launch over stride-2 blocks names: rows row..row + 1
// and columns column..column + 1 of its plane, the second of each only where the plane has it (an odd
// extent's last block is one cell high or wide). first: the block's first cell, row * W + column.
struct Stride2Block {
  int row, column, first;
  bool second_row, second_column;
};
__device__ __forceinline__ Stride2Block stride2_block(const PositionDecoder::Position& at, const Geometry32& s) {
  const int row = 2 * at.row, column = 2 * at.column;
  return {row, column, row * s.in_w + column, row + 1 < s.in_h, column + 1 < s.in_w};
}

// The block's cells of a plane as floats, in the order (row, column), (row, column + 1), (row + 1, column),
// (row + 1, column + 1); cells the block lacks read as 0.
template <typename T>
__device__ __forceinline__ void load_block(const T* plane, const Stride2Block& block, const Geometry32& s,
                                           float* values) {
  values[2] = values[3] = 0.0f;
  load_row_pair(plane + block.first, block.second_column, values[0], values[1]);
  if (block.second_row) load_row_pair(plane + block.first + s.in_w, block.second_column, values[2], values[3]);
}

// Stores values[0..3] into the block's cells of a plane (load_block's order), those it has.
template <typename T>
__device__ __forceinline__ void store_block(T* plane, const Stride2Block& block, const Geometry32& s,
                                            const float* values) {
  store_row_pair(plane + block.first, values[0], values[1], block.second_column);
  if (block.second_row) store_row_pair(plane + block.first + s.in_w, values[2], values[3], block.second_column);
}

// Max pooling's gradient at a 2x2 block of input cells of one plane, stride 2 (ResNet's 3x3/2 stem pool),
// which the same few windows cover (kernel / 2 + 1 per axis, at most kMaxCovering). Each covering window's
// choice is read once and compared with the block's four cells; sums[0..3] receive, in f32 and in window
// order, the gradients of the windows whose argmax each cell is: (row, column), (row, column + 1),
// (row + 1, column), (row + 1, column + 1). grads points at the plane's outputs; chosen(o, oh, ow) gives
// the flat cell (h * W + w) that window o = oh * out_w + ow chose.
template <typename T, typename Chosen>
__device__ __forceinline__ void stride2_block_sums(const T* grads, const Chosen& chosen, const Stride2Block& block,
                                                   const Geometry32& s, float* sums) {
  const bool second_row = block.second_row, second_column = block.second_column;
  const Covering rows = {rows_covering(block.row, s).begin, rows_covering(block.row + second_row, s).end};
  const Covering columns = {columns_covering(block.column, s).begin,
                            columns_covering(block.column + second_column, s).end};
  const int first = block.first;
  // Every covering window's choice and gradient loaded first (-1 for none: it names no cell), so the
  // loads are in flight together; then the sums in window order.
  int window_cell[kMaxCovering][kMaxCovering];
  float window_grad[kMaxCovering][kMaxCovering];
#pragma unroll
  for (int i = 0; i < kMaxCovering; ++i)
#pragma unroll
    for (int j = 0; j < kMaxCovering; ++j) {
      const int oh = rows.begin + i, ow = columns.begin + j, o = oh * s.out_w + ow;
      const bool covering = oh < rows.end && ow < columns.end;
      window_cell[i][j] = covering ? chosen(o, oh, ow) : -1;
      window_grad[i][j] = covering ? static_cast<float>(grads[o]) : 0.0f;
    }
#pragma unroll
  for (int c = 0; c < 4; ++c) sums[c] = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxCovering; ++i)
#pragma unroll
    for (int j = 0; j < kMaxCovering; ++j) {
      const int offset = window_cell[i][j] - first;
      // Which of the block's cells the choice names, if any (a flat index one past the row's end is the
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
}

// Whether the stride-2 block kernels take a pooling of this geometry: stride 2 both ways and at most
// kMaxCovering windows per axis over a 2-cell block (windows up to 5 wide).
inline bool stride2_blocks_fit(const PoolLayout& layout) {
  return layout.stride_h == 2 && layout.stride_w == 2 && layout.kernel_h / 2 + 1 <= kMaxCovering &&
         layout.kernel_w / 2 + 1 <= kMaxCovering;
}

}  // namespace opsnn::cuda::pool
