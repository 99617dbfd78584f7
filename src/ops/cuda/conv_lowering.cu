// Kernels of the convolution lowerings in src/ops/cuda/conv_lowerings.cpp: im2col (which, for a 1x1 kernel
// without padding, is the strided subsampling of the input), its adjoint col2im as a gather (each input
// value sums the column entries that read it, in a fixed order, so no atomics and bit-identical reruns;
// a vectorized scatter for the subsampling layout), the fixed-order sum of per-image weight-gradient
// partials, and the batched transpose that gives cuDNN a channels-last convolution's KRSC weight. The copies are
// memory-bound: grid-stride loops over 16-byte vectors where the row lengths allow.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "core/cuda/fast_divide.h"
#include "core/cuda/vectorized.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

namespace opsnn::cuda {
namespace {

constexpr int kColumnThreads = 256;
constexpr unsigned kMaxGridY = 65535;

// columns[n][row][p] for row = (c, r, s) and p = (oh, ow): x[n][c][oh*stride - pad + r][ow*stride - pad + s],
// zero outside the input and on the padding rows (row >= channels*kh*kw). A thread step writes V
// consecutive ow of one output row oh (a 16-byte store when V > 1; the launcher picks V dividing out_w);
// the launch covers fewer than 2^31 vectors, so every index decodes with 32-bit multiply-shifts.
struct Im2colDecode {
  FastDivider vectors_per_row, vectors_per_out_row, rows_padded, kernel_area, kernel_w;
  uint32_t rows;  // channels * kernel_h * kernel_w, the real rows
};

template <typename T, int V>
__global__ void __launch_bounds__(kColumnThreads)
    im2col_kernel(const T* x, T* columns, Im2colLayout l, Im2colDecode d, uint32_t vectors) {
  const int64_t plane = l.in_h * l.in_w, pixels = l.out_h * l.out_w;
  for (uint32_t v = blockIdx.x * kColumnThreads + threadIdx.x; v < vectors; v += gridDim.x * kColumnThreads) {
    const uint32_t image_row = d.vectors_per_row.divide(v), q = v - image_row * d.vectors_per_row.divisor;
    const uint32_t oh = d.vectors_per_out_row.divide(q), ow0 = (q - oh * d.vectors_per_out_row.divisor) * V;
    const uint32_t n = d.rows_padded.divide(image_row), row = image_row - n * d.rows_padded.divisor;
    Vector<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.values[j] = T(0.0f);
    if (row < d.rows) {
      const uint32_t c = d.kernel_area.divide(row), within = row - c * d.kernel_area.divisor;
      const uint32_t r = d.kernel_w.divide(within), s = within - r * d.kernel_w.divisor;
      const int64_t ih = static_cast<int64_t>(oh) * l.stride_h - l.pad_h + r;
      if (ih >= 0 && ih < l.in_h) {
        const T* source = x + (static_cast<int64_t>(n) * l.channels + c) * plane + ih * l.in_w;
        const int64_t iw0 = static_cast<int64_t>(ow0) * l.stride_w - l.pad_w + s;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const int64_t iw = iw0 + j * l.stride_w;
          if (iw >= 0 && iw < l.in_w) out.values[j] = source[iw];
        }
      }
    }
    store_vector<V>(columns + static_cast<int64_t>(image_row) * pixels + static_cast<int64_t>(oh) * l.out_w + ow0, out);
  }
}

// im2col for a kernel kKw wide at column stride kSw fixed at compile time (ResNet's 7x7/2 stem): a thread
// step takes one input row segment for V consecutive outputs of one output row, (V - 1) * kSw + kKw values
// loaded once, and writes the kKw column rows (c, r, 0..kKw-1) from it: each input value is loaded once
// per thread instead of once per column row, which made the general kernel's strided loads the bottleneck.
// Steps are (n, c, r, oh, q) with q the vector of V outputs; the padding rows are zeroed apart.
struct SpanDecode {
  FastDivider vectors_per_out_row, out_h, channel_rows, kernel_h;
};

template <typename T, int V, int kKw, int kSw>
__global__ void __launch_bounds__(kColumnThreads)
    im2col_span_kernel(const T* x, T* columns, Im2colLayout l, SpanDecode d, uint32_t steps) {
  constexpr int kSpan = (V - 1) * kSw + kKw;
  const int64_t plane = l.in_h * l.in_w, pixels = l.out_h * l.out_w;
  for (uint32_t step = blockIdx.x * kColumnThreads + threadIdx.x; step < steps; step += gridDim.x * kColumnThreads) {
    const uint32_t row_step = d.vectors_per_out_row.divide(step), q = step - row_step * d.vectors_per_out_row.divisor;
    const uint32_t kernel_row = d.out_h.divide(row_step), oh = row_step - kernel_row * d.out_h.divisor;
    const uint32_t n = d.channel_rows.divide(kernel_row), cr = kernel_row - n * d.channel_rows.divisor;
    const uint32_t c = d.kernel_h.divide(cr), r = cr - c * d.kernel_h.divisor;
    const int64_t ih = static_cast<int64_t>(oh) * l.stride_h - l.pad_h + r;
    const int64_t iw0 = static_cast<int64_t>(q) * V * kSw - l.pad_w;
    T span[kSpan];
    const bool row_inside = ih >= 0 && ih < l.in_h;
    const T* source = x + (static_cast<int64_t>(n) * l.channels + c) * plane + (row_inside ? ih : 0) * l.in_w;
#pragma unroll
    for (int k = 0; k < kSpan; ++k) {
      const int64_t iw = iw0 + k;
      span[k] = row_inside && iw >= 0 && iw < l.in_w ? source[iw] : T(0.0f);
    }
    T* out = columns + (static_cast<int64_t>(n) * l.rows_padded + static_cast<int64_t>(cr) * kKw) * pixels +
             static_cast<int64_t>(oh) * l.out_w + static_cast<int64_t>(q) * V;
#pragma unroll
    for (int s = 0; s < kKw; ++s) {
      Vector<T, V> values;
#pragma unroll
      for (int j = 0; j < V; ++j) values.values[j] = span[j * kSw + s];
      store_vector<V>(out + static_cast<int64_t>(s) * pixels, values);
    }
  }
}

// col2im of the subsampling layout (1x1 kernel, no padding): x[n][c][ih][iw] = columns[n][c][ih/sh][iw/sw]
// where both divide evenly and land inside the output, zero elsewhere. A thread step writes V
// consecutive iw of one input row (fewer than 2^31 vectors per launch, 32-bit decoding).
struct UnsubsampleDecode {
  FastDivider vectors_per_row, in_h, stride_h, stride_w;
};

template <typename T, int V>
__global__ void __launch_bounds__(kColumnThreads)
    unsubsample_kernel(const T* columns, T* x, Im2colLayout l, UnsubsampleDecode d, uint32_t vectors) {
  for (uint32_t v = blockIdx.x * kColumnThreads + threadIdx.x; v < vectors; v += gridDim.x * kColumnThreads) {
    const uint32_t input_row = d.vectors_per_row.divide(v);
    const uint32_t iw0 = (v - input_row * d.vectors_per_row.divisor) * V;
    const uint32_t plane = d.in_h.divide(input_row), ih = input_row - plane * d.in_h.divisor;
    const uint32_t oh = d.stride_h.divide(ih);
    Vector<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.values[j] = T(0.0f);
    if (oh * d.stride_h.divisor == ih && oh < static_cast<uint32_t>(l.out_h)) {
      const T* source = columns + (static_cast<int64_t>(plane) * l.out_h + oh) * l.out_w;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const uint32_t iw = iw0 + j, ow = d.stride_w.divide(iw);
        if (ow * d.stride_w.divisor == iw && ow < static_cast<uint32_t>(l.out_w)) out.values[j] = source[ow];
      }
    }
    store_vector<V>(x + static_cast<int64_t>(input_row) * l.in_w + iw0, out);
  }
}

// x[n][c][ih][iw] = sum over (r, s) of columns[n][(c, r, s)][(oh, ow)] for every (oh, ow) whose window
// reads (ih, iw): oh*stride - pad + r == ih. Terms in f32 in (r, s) order, rounded once to T.
// blockIdx.y walks the (n, c) planes, blockIdx.x * threads + threadIdx.x the plane's positions.
template <typename TC, typename T>
__global__ void __launch_bounds__(kColumnThreads)
    col2im_kernel(const TC* columns, T* x, Im2colLayout l, FastDivider in_w) {
  const int64_t planes = l.images * l.channels, pixels = l.out_h * l.out_w;
  const uint32_t position = blockIdx.x * kColumnThreads + threadIdx.x;
  if (position >= static_cast<uint32_t>(l.in_h * l.in_w)) return;
  const int64_t ih = in_w.divide(position), iw = position - ih * l.in_w;
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const int64_t n = plane / l.channels, c = plane - n * l.channels;
    const TC* image_columns = columns + (n * l.rows_padded + c * l.kernel_h * l.kernel_w) * pixels;
    float sum = 0.0f;
    for (int64_t r = 0; r < l.kernel_h; ++r) {
      const int64_t h_offset = ih + l.pad_h - r;  // oh * stride_h when this r reads ih
      if (h_offset < 0 || h_offset % l.stride_h != 0) continue;
      const int64_t oh = h_offset / l.stride_h;
      if (oh >= l.out_h) continue;
      for (int64_t s = 0; s < l.kernel_w; ++s) {
        const int64_t w_offset = iw + l.pad_w - s;
        if (w_offset < 0 || w_offset % l.stride_w != 0) continue;
        const int64_t ow = w_offset / l.stride_w;
        if (ow >= l.out_w) continue;
        sum += static_cast<float>(image_columns[(r * l.kernel_w + s) * pixels + oh * l.out_w + ow]);
      }
    }
    x[plane * l.in_h * l.in_w + position] = T(sum);
  }
}

// out[r][c] (+)= sum over i of partials[i][r][c] for c < cols of rows padded to cols_padded; the terms
// in i order, in double. A thread loads kPartialsInFlight terms before it adds any: with few outputs
// (a 64 x 256 gradient is 16384 threads) one load at a time left the kernel waiting on memory latency.
constexpr int kPartialsInFlight = 16;

__global__ void sum_partials_kernel(const float* partials, int64_t count, int64_t rows, int64_t cols,
                                    int64_t cols_padded, float* out, bool accumulate) {
  const int64_t matrix = rows * cols_padded;
  for (int64_t e = global_thread_index(); e < rows * cols; e += global_thread_count()) {
    const int64_t r = e / cols, c = e - r * cols;
    const float* terms = partials + r * cols_padded + c;
    double sum = accumulate ? static_cast<double>(out[e]) : 0.0;
    int64_t i = 0;
    for (; i + kPartialsInFlight <= count; i += kPartialsInFlight) {
      float loaded[kPartialsInFlight];
#pragma unroll
      for (int j = 0; j < kPartialsInFlight; ++j) loaded[j] = __ldg(terms + (i + j) * matrix);
#pragma unroll
      for (int j = 0; j < kPartialsInFlight; ++j) sum += static_cast<double>(loaded[j]);
    }
    for (; i < count; ++i) sum += static_cast<double>(__ldg(terms + i * matrix));
    out[e] = static_cast<float>(sum);
  }
}

// dst[b] = transpose(src[b]) for `batches` row-major [rows, cols] matrices of U, each small enough for
// shared memory: a block reads a whole matrix in order (coalesced) and writes its transpose in order. A
// row of the staged matrix is `stride` elements, chosen so that a warp reading down a column meets no
// bank twice.
template <typename U>
__global__ void __launch_bounds__(kThreadsPerBlock)
    batched_transpose_kernel(const U* src, U* dst, int64_t batches, FastDivider by_rows, FastDivider by_cols,
                             int stride) {
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  U* staged = reinterpret_cast<U*>(staged_bytes);
  const int rows = static_cast<int>(by_rows.divisor), cols = static_cast<int>(by_cols.divisor);
  const int elements = rows * cols;
  for (int64_t b = blockIdx.x; b < batches; b += gridDim.x) {
    const U* in = src + b * elements;
    U* out = dst + b * elements;
    for (int e = threadIdx.x; e < elements; e += kThreadsPerBlock) {
      const int r = static_cast<int>(by_cols.divide(static_cast<uint32_t>(e)));
      staged[r * stride + (e - r * cols)] = in[e];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < elements; e += kThreadsPerBlock) {  // e = c * rows + r
      const int c = static_cast<int>(by_rows.divide(static_cast<uint32_t>(e)));
      out[e] = staged[(e - c * rows) * stride + c];
    }
    __syncthreads();
  }
}

dim3 grid_for(int64_t per_row, int64_t rows) {
  return dim3(static_cast<unsigned>((per_row + kColumnThreads - 1) / kColumnThreads),
              static_cast<unsigned>(rows < kMaxGridY ? (rows < 1 ? 1 : rows) : kMaxGridY));
}

// The widest vector (at most 16 bytes) of T whose width divides `length` and to whose size `stored` is
// aligned (every vector store then lands aligned: rows of `length` elements start at multiples of it).
template <typename T>
int vector_width_for(int64_t length, const T* stored) {
  const auto address = reinterpret_cast<uintptr_t>(stored);
  for (int width = static_cast<int>(16 / sizeof(T)); width > 1; width /= 2)
    if (length % width == 0 && address % (width * sizeof(T)) == 0) return width;
  return 1;
}

constexpr int64_t kMaxVectorsPerLaunch = FastDivider::kMaxDividend;

unsigned blocks_for_vectors(int64_t vectors) {
  return static_cast<unsigned>(std::min<int64_t>((vectors + kColumnThreads - 1) / kColumnThreads, 65535LL * 16));
}

// Launches over as many whole images as keep each launch below 2^31 vectors.
template <typename T, int V>
void im2col_with(const T* x, T* columns, const Im2colLayout& layout) {
  const int64_t vectors_per_row = layout.out_h * (layout.out_w / V);
  const int64_t vectors_per_image = layout.rows_padded * vectors_per_row;
  const int64_t images_per_launch = std::max<int64_t>(1, kMaxVectorsPerLaunch / vectors_per_image);
  Im2colDecode decode;
  decode.vectors_per_row = FastDivider(static_cast<uint32_t>(vectors_per_row));
  decode.vectors_per_out_row = FastDivider(static_cast<uint32_t>(layout.out_w / V));
  decode.rows_padded = FastDivider(static_cast<uint32_t>(layout.rows_padded));
  decode.kernel_area = FastDivider(static_cast<uint32_t>(layout.kernel_h * layout.kernel_w));
  decode.kernel_w = FastDivider(static_cast<uint32_t>(layout.kernel_w));
  decode.rows = static_cast<uint32_t>(layout.channels * layout.kernel_h * layout.kernel_w);
  for (int64_t first = 0; first < layout.images; first += images_per_launch) {
    const int64_t images = std::min(images_per_launch, layout.images - first);
    const auto vectors = static_cast<uint32_t>(images * vectors_per_image);
    im2col_kernel<T, V><<<blocks_for_vectors(vectors), kColumnThreads, 0, current_stream()>>>(
        x + first * layout.channels * layout.in_h * layout.in_w,
        columns + first * layout.rows_padded * layout.out_h * layout.out_w, layout, decode, vectors);
  }
}

// im2col_span_kernel over as many whole images as keep each launch below 2^31 steps, then the padding
// rows (channels * kh * kw up to rows_padded) of every image zeroed in one strided memset.
template <typename T, int V, int kKw, int kSw>
void im2col_span_with(const T* x, T* columns, const Im2colLayout& layout) {
  const int64_t pixels = layout.out_h * layout.out_w, rows = layout.channels * layout.kernel_h * layout.kernel_w;
  const int64_t steps_per_image = layout.channels * layout.kernel_h * layout.out_h * (layout.out_w / V);
  const int64_t images_per_launch = std::max<int64_t>(1, kMaxVectorsPerLaunch / steps_per_image);
  SpanDecode decode;
  decode.vectors_per_out_row = FastDivider(static_cast<uint32_t>(layout.out_w / V));
  decode.out_h = FastDivider(static_cast<uint32_t>(layout.out_h));
  decode.channel_rows = FastDivider(static_cast<uint32_t>(layout.channels * layout.kernel_h));
  decode.kernel_h = FastDivider(static_cast<uint32_t>(layout.kernel_h));
  for (int64_t first = 0; first < layout.images; first += images_per_launch) {
    const int64_t images = std::min(images_per_launch, layout.images - first);
    const auto steps = static_cast<uint32_t>(images * steps_per_image);
    im2col_span_kernel<T, V, kKw, kSw><<<blocks_for_vectors(steps), kColumnThreads, 0, current_stream()>>>(
        x + first * layout.channels * layout.in_h * layout.in_w, columns + first * layout.rows_padded * pixels, layout,
        decode, steps);
  }
  if (layout.rows_padded > rows) {
    const size_t image_bytes = static_cast<size_t>(layout.rows_padded * pixels) * sizeof(T);
    OPSNN_CUDA_CHECK(cudaMemset2DAsync(columns + rows * pixels, image_bytes, 0,
                                       static_cast<size_t>((layout.rows_padded - rows) * pixels) * sizeof(T),
                                       static_cast<size_t>(layout.images), current_stream()));
  }
}

// Launches over as many whole planes as keep each launch below 2^31 vectors.
template <typename T, int V>
void unsubsample_with(const T* columns, T* x, const Im2colLayout& layout) {
  const int64_t vectors_per_plane = layout.in_h * (layout.in_w / V);
  const int64_t planes = layout.images * layout.channels;
  const int64_t planes_per_launch = std::max<int64_t>(1, kMaxVectorsPerLaunch / vectors_per_plane);
  UnsubsampleDecode decode;
  decode.vectors_per_row = FastDivider(static_cast<uint32_t>(layout.in_w / V));
  decode.in_h = FastDivider(static_cast<uint32_t>(layout.in_h));
  decode.stride_h = FastDivider(static_cast<uint32_t>(layout.stride_h));
  decode.stride_w = FastDivider(static_cast<uint32_t>(layout.stride_w));
  for (int64_t first = 0; first < planes; first += planes_per_launch) {
    const int64_t count = std::min(planes_per_launch, planes - first);
    const auto vectors = static_cast<uint32_t>(count * vectors_per_plane);
    unsubsample_kernel<T, V><<<blocks_for_vectors(vectors), kColumnThreads, 0, current_stream()>>>(
        columns + first * layout.out_h * layout.out_w, x + first * layout.in_h * layout.in_w, layout, decode, vectors);
  }
}

// Calls fn(std::integral_constant<int, V>) for the vector width V (8, 4, 2 or 1) the launch uses.
template <typename Fn>
void with_width(int width, Fn&& fn) {
  switch (width) {
    case 8:
      fn(std::integral_constant<int, 8>{});
      return;
    case 4:
      fn(std::integral_constant<int, 4>{});
      return;
    case 2:
      fn(std::integral_constant<int, 2>{});
      return;
    default:
      fn(std::integral_constant<int, 1>{});
      return;
  }
}

}  // namespace

template <typename T>
void launch_im2col(const T* x, T* columns, const Im2colLayout& layout) {
  const int64_t pixels = layout.out_h * layout.out_w;
  if (layout.images * layout.rows_padded == 0 || pixels == 0) return;
  const bool stem = layout.kernel_w == 7 && layout.stride_w == 2;
  with_width(vector_width_for<T>(layout.out_w, columns), [&](auto width) {
    constexpr int V = decltype(width)::value;
    if constexpr (V * sizeof(T) <= 16) {
      if (stem)
        im2col_span_with<T, V, 7, 2>(x, columns, layout);
      else
        im2col_with<T, V>(x, columns, layout);
    }
  });
}

template <typename TC, typename T>
void launch_col2im(const TC* columns, T* x, const Im2colLayout& layout) {
  const int64_t planes = layout.images * layout.channels, positions = layout.in_h * layout.in_w;
  if (planes == 0 || positions == 0) return;
  if constexpr (std::is_same_v<TC, T>) {
    if (layout.kernel_h == 1 && layout.kernel_w == 1 && layout.pad_h == 0 && layout.pad_w == 0 &&
        layout.rows_padded == layout.channels) {
      with_width(vector_width_for<T>(layout.in_w, x), [&](auto width) {
        constexpr int V = decltype(width)::value;
        if constexpr (V * sizeof(T) <= 16) unsubsample_with<T, V>(columns, x, layout);
      });
      return;
    }
  }
  col2im_kernel<TC, T><<<grid_for(positions, planes), kColumnThreads, 0, current_stream()>>>(
      columns, x, layout, FastDivider(static_cast<uint32_t>(layout.in_w)));
}

void launch_sum_partials(const float* partials, int64_t count, int64_t rows, int64_t cols, int64_t cols_padded,
                         float* out, bool accumulate) {
  if (rows * cols == 0) return;
  sum_partials_kernel<<<blocks_for(rows * cols), kThreadsPerBlock, 0, current_stream()>>>(partials, count, rows, cols,
                                                                                          cols_padded, out, accumulate);
}

bool launch_batched_transpose(const void* src, void* dst, int64_t batches, int64_t rows, int64_t cols,
                              size_t element_bytes) {
  if (batches * rows * cols == 0) return true;
  if (element_bytes != 2 && element_bytes != 4 && element_bytes != 8) return false;
  // Staged rows padded so consecutive rows start in different banks: an odd number of elements for 4- and
  // 8-byte ones, twice an odd number for 2-byte ones (an odd number of 4-byte words).
  int64_t stride = cols;
  if (element_bytes == 2)
    while (stride % 4 != 2) ++stride;
  else if (stride % 2 == 0)
    ++stride;
  const size_t shared_bytes = static_cast<size_t>(rows * stride) * element_bytes;
  if (shared_bytes > 48 * 1024) return false;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(batches, 65535));
  const FastDivider by_rows(static_cast<uint32_t>(rows)), by_cols(static_cast<uint32_t>(cols));
  const int st = static_cast<int>(stride);
  switch (element_bytes) {
    case 2:
      batched_transpose_kernel<uint16_t><<<blocks, kThreadsPerBlock, shared_bytes, current_stream()>>>(
          static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), batches, by_rows, by_cols, st);
      break;
    case 4:
      batched_transpose_kernel<uint32_t><<<blocks, kThreadsPerBlock, shared_bytes, current_stream()>>>(
          static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), batches, by_rows, by_cols, st);
      break;
    default:
      batched_transpose_kernel<uint64_t><<<blocks, kThreadsPerBlock, shared_bytes, current_stream()>>>(
          static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), batches, by_rows, by_cols, st);
  }
  return true;
}

#define OPSNN_INSTANTIATE_LOWERING(T)                                           \
  template void launch_im2col<T>(const T*, T*, const Im2colLayout&);            \
  template void launch_col2im<float, T>(const float*, T*, const Im2colLayout&); \
  template void launch_col2im<T, T>(const T*, T*, const Im2colLayout&);
OPSNN_INSTANTIATE_LOWERING(opsnn::Half)
OPSNN_INSTANTIATE_LOWERING(opsnn::BFloat16)
template void launch_im2col<float>(const float*, float*, const Im2colLayout&);
template void launch_col2im<float, float>(const float*, float*, const Im2colLayout&);
#undef OPSNN_INSTANTIATE_LOWERING

}  // namespace opsnn::cuda
