// CPU conv2d kernels (NCHW input, OIHW weight; NHWC input through permuted copies): forward and the
// input/weight gradients, each an im2col over cache-sized bands of output rows (or, for 1x1 stride-1
// unpadded kernels, the input itself) multiplied by Eigen's GEMM (cpu::matmul, in the CPU variant in use),
// with col2im scattering the input gradient back. fp32 convolutions go to oneDNN instead where
// OPSNN_CPU_ENGINE says so (onednn.h); this Eigen path stays the reference and runs every other dtype.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_variants.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"
#include "ops/cpu/onednn.h"

namespace opsnn::ops {
namespace {

// out (m x n, row stride ldo) = op(a) * op(b), or += when accumulate; a and b row-major with row strides
// lda and ldb, transposed when asked (cpu::Matmul).
template <typename T>
void multiply(const T* a, int64_t lda, bool transpose_a, const T* b, int64_t ldb, bool transpose_b, T* out, int64_t ldo,
              int64_t m, int64_t n, int64_t k, bool accumulate) {
  opsnn::cpu::Matmul<T> product;
  product.a = a;
  product.lda = lda;
  product.transpose_a = transpose_a;
  product.b = b;
  product.ldb = ldb;
  product.transpose_b = transpose_b;
  product.out = out;
  product.ldo = ldo;
  product.m = m;
  product.n = n;
  product.k = k;
  product.beta = accumulate ? T(1) : T(0);
  opsnn::cpu::matmul(product);
}

// Every size of one convolution, read from the (already validated) tensors: oneDNN's description of it,
// with the derived sizes the Eigen path needs.
struct ConvShape : onednn::ConvDims {
  ConvShape(const Shape& input, const Shape& weight, const Shape& output, const Conv2dGeometry& g)
      : onednn::ConvDims{.batch = input[0],
                         .in_channels = input[1],
                         .in_h = input[2],
                         .in_w = input[3],
                         .out_channels = weight[0],
                         .kernel_h = weight[2],
                         .kernel_w = weight[3],
                         .out_h = output[2],
                         .out_w = output[3],
                         .geometry = g} {}

  int64_t in_plane() const { return in_h * in_w; }
  int64_t out_plane() const { return out_h * out_w; }
  int64_t col_rows() const { return in_channels * kernel_h * kernel_w; }
  // A 1x1 stride-1 unpadded convolution is a plain GEMM on the input image: no im2col needed.
  bool pointwise() const {
    return kernel_h == 1 && kernel_w == 1 && geometry.stride_h == 1 && geometry.stride_w == 1 && geometry.pad_h == 0 &&
           geometry.pad_w == 0;
  }
};

// Below this many column elements, im2col/col2im stay on one thread.
constexpr int64_t kParallelColElements = 1 << 16;
// im2col works on bands of output rows whose columns hold about this many elements (512 KiB of f32, a
// core's L2 here), so a band stays in cache between being written and being multiplied instead of
// streaming megabytes through memory; on the ResNet stem and 56x56 layers this lifted conv2d from about
// 45-60% to 80% of Eigen's GEMM rate.
constexpr int64_t kBandElements = 1 << 17;

// Spreading samples over threads (each GEMM then single-threaded: Eigen does not nest inside an OpenMP
// region) keeps every thread's im2col band in its own cache and needs no synchronisation inside a
// sample. It pays when the batch divides well over the threads; otherwise samples run in turn and
// Eigen's GEMM uses all threads.
bool spread_samples_over_threads(int64_t batch) {
  const int64_t threads = omp_get_max_threads();
  if (omp_in_parallel() || threads < 2 || batch < threads) return false;
  return batch % threads == 0 || batch >= 4 * threads;
}

template <typename Fn>
void for_each_sample(int64_t batch, bool spread, Fn&& fn) {
  if (spread) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < batch; ++n) fn(n);
  } else {
    for (int64_t n = 0; n < batch; ++n) fn(n);
  }
}

// A band of output rows [begin, end): its im2col block has col_rows() rows of (end - begin) * out_w columns.
struct RowBand {
  int64_t begin, end;
};

// Output rows per band: about kBandElements column elements (more when one sample's GEMMs use every
// thread, so each still has enough columns to split).
int64_t band_rows(const ConvShape& s, bool spread) {
  const int64_t target = spread ? kBandElements : kBandElements * omp_get_max_threads();
  return std::clamp<int64_t>(target / std::max<int64_t>(1, s.col_rows() * s.out_w), 1, s.out_h);
}

template <typename Fn>
void for_each_band(const ConvShape& s, bool spread, Fn&& fn) {
  const int64_t rows = band_rows(s, spread);
  for (int64_t begin = 0; begin < s.out_h; begin += rows) fn(RowBand{begin, std::min(s.out_h, begin + rows)});
}

// A per-thread buffer for one band's im2col block that only grows: allocating (and page-faulting) it on
// every call costs a noticeable share of a convolution.
template <typename T>
T* thread_scratch(const ConvShape& s, bool spread) {
  thread_local std::vector<T> buffer;
  const size_t count = static_cast<size_t>(s.col_rows() * band_rows(s, spread) * s.out_w);
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

// The range [begin, end) of output columns whose input column ow*stride - pad + offset lies in [0, width).
struct ValidRange {
  int64_t begin, end;
};
ValidRange valid_outputs(int64_t width, int64_t out_width, int64_t stride, int64_t pad, int64_t offset) {
  const int64_t shift = pad - offset;  // input index = ow * stride - shift
  int64_t begin = shift <= 0 ? 0 : (shift + stride - 1) / stride;
  int64_t end = width - 1 + shift < 0 ? 0 : (width - 1 + shift) / stride + 1;
  begin = std::min(begin, out_width);
  end = std::clamp(end, begin, out_width);
  return {begin, end};
}

// For the output rows of `band`: col[(c * KH + kh) * KW + kw, (oh - band.begin) * OW + ow] =
// image[c, oh * sh - ph + kh, ow * sw - pw + kw], 0 where that falls in the padding.
template <typename T>
void im2col(const T* image, const ConvShape& s, RowBand band, T* col) {
  const Conv2dGeometry& g = s.geometry;
  const int64_t kernel_area = s.kernel_h * s.kernel_w;
  const int64_t band_columns = (band.end - band.begin) * s.out_w;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && s.col_rows() * band_columns > kParallelColElements)
  for (int64_t row = 0; row < s.col_rows(); ++row) {
    const int64_t channel = row / kernel_area, kh = (row / s.kernel_w) % s.kernel_h, kw = row % s.kernel_w;
    const T* plane = image + channel * s.in_plane();
    const ValidRange valid = valid_outputs(s.in_w, s.out_w, g.stride_w, g.pad_w, kw);
    const int64_t iw_first = valid.begin * g.stride_w - g.pad_w + kw;
    for (int64_t oh = band.begin; oh < band.end; ++oh) {
      T* dst = col + row * band_columns + (oh - band.begin) * s.out_w;
      const int64_t ih = oh * g.stride_h - g.pad_h + kh;
      if (ih < 0 || ih >= s.in_h) {
        std::fill(dst, dst + s.out_w, T(0));
        continue;
      }
      std::fill(dst, dst + valid.begin, T(0));
      std::fill(dst + valid.end, dst + s.out_w, T(0));
      const T* src = plane + ih * s.in_w + iw_first;
      if (g.stride_w == 1) {
        std::memcpy(dst + valid.begin, src, static_cast<size_t>(valid.end - valid.begin) * sizeof(T));
      } else {
        for (int64_t ow = valid.begin; ow < valid.end; ++ow) dst[ow] = src[(ow - valid.begin) * g.stride_w];
      }
    }
  }
}

// The adjoint of im2col for one band: image accumulates every column entry at its input position.
// Threads take whole channels, so no two write the same plane.
template <typename T>
void col2im(const T* col, const ConvShape& s, RowBand band, T* image) {
  const Conv2dGeometry& g = s.geometry;
  const int64_t kernel_area = s.kernel_h * s.kernel_w;
  const int64_t band_columns = (band.end - band.begin) * s.out_w;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && s.col_rows() * band_columns > kParallelColElements)
  for (int64_t channel = 0; channel < s.in_channels; ++channel) {
    T* plane = image + channel * s.in_plane();
    for (int64_t k = 0; k < kernel_area; ++k) {
      const int64_t kh = k / s.kernel_w, kw = k % s.kernel_w;
      const T* in_row = col + (channel * kernel_area + k) * band_columns;
      const ValidRange valid = valid_outputs(s.in_w, s.out_w, g.stride_w, g.pad_w, kw);
      const int64_t iw_first = valid.begin * g.stride_w - g.pad_w + kw;
      for (int64_t oh = band.begin; oh < band.end; ++oh) {
        const int64_t ih = oh * g.stride_h - g.pad_h + kh;
        if (ih < 0 || ih >= s.in_h) continue;
        const T* src = in_row + (oh - band.begin) * s.out_w;
        T* dst = plane + ih * s.in_w + iw_first;
        for (int64_t ow = valid.begin; ow < valid.end; ++ow) dst[(ow - valid.begin) * g.stride_w] += src[ow];
      }
    }
  }
}

template <typename T>
void forward_typed(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor& out, const ConvShape& s) {
  const T* x = input.data<T>();
  const T* b = bias.defined() ? bias.data<T>() : nullptr;
  T* y = out.data<T>();
  const T* weights = weight.data<T>();  // out_channels x col_rows
  const bool spread = spread_samples_over_threads(s.batch);
  for_each_sample(s.batch, spread, [&](int64_t n) {
    T* sample_out = y + n * s.out_channels * s.out_plane();
    const T* image = x + n * s.in_channels * s.in_plane();
    if (s.pointwise()) {
      multiply(weights, s.col_rows(), false, image, s.in_plane(), false, sample_out, s.out_plane(), s.out_channels,
               s.out_plane(), s.in_channels, false);
    } else {
      T* col = thread_scratch<T>(s, spread);
      for_each_band(s, spread, [&](RowBand band) {
        const int64_t columns = (band.end - band.begin) * s.out_w;
        im2col(image, s, band, col);
        // The band's columns inside the sample's [out_channels, out_plane] output.
        multiply(weights, s.col_rows(), false, col, columns, false, sample_out + band.begin * s.out_w, s.out_plane(),
                 s.out_channels, columns, s.col_rows(), false);
      });
    }
    if (b != nullptr)
      for (int64_t o = 0; o < s.out_channels; ++o) {
        T* channel_out = sample_out + o * s.out_plane();
        std::for_each(channel_out, channel_out + s.out_plane(), [&](T& value) { value += b[o]; });
      }
  });
}

template <typename T>
void backward_input_typed(const Tensor& grad_out, const Tensor& weight, Tensor& grad_input, const ConvShape& s) {
  const T* dy = grad_out.data<T>();
  T* dx = grad_input.data<T>();
  const T* weights = weight.data<T>();  // out_channels x col_rows, used transposed
  const bool spread = spread_samples_over_threads(s.batch);
  for_each_sample(s.batch, spread, [&](int64_t n) {
    const T* sample_grad = dy + n * s.out_channels * s.out_plane();
    T* image_grad = dx + n * s.in_channels * s.in_plane();
    if (s.pointwise()) {
      multiply(weights, s.col_rows(), true, sample_grad, s.out_plane(), false, image_grad, s.in_plane(), s.in_channels,
               s.in_plane(), s.out_channels, false);
      return;
    }
    T* col = thread_scratch<T>(s, spread);
    std::fill(image_grad, image_grad + s.in_channels * s.in_plane(), T(0));
    for_each_band(s, spread, [&](RowBand band) {
      const int64_t columns = (band.end - band.begin) * s.out_w;
      multiply(weights, s.col_rows(), true, sample_grad + band.begin * s.out_w, s.out_plane(), false, col, columns,
               s.col_rows(), columns, s.out_channels, false);
      col2im(col, s, band, image_grad);
    });
  });
}

template <typename T>
void backward_weight_typed(const Tensor& grad_out, const Tensor& input, Tensor& grad_weight, const ConvShape& s) {
  const T* dy = grad_out.data<T>();
  const T* x = input.data<T>();
  const int64_t weight_size = s.out_channels * s.col_rows();
  const bool spread = spread_samples_over_threads(s.batch);
  // accumulator (out_channels x col_rows) += the sample's output gradient times its columns, transposed.
  auto accumulate_sample = [&](int64_t n, T* accumulator) {
    const T* sample_grad = dy + n * s.out_channels * s.out_plane();
    const T* image = x + n * s.in_channels * s.in_plane();
    if (s.pointwise()) {
      multiply(sample_grad, s.out_plane(), false, image, s.in_plane(), true, accumulator, s.col_rows(), s.out_channels,
               s.col_rows(), s.out_plane(), true);
      return;
    }
    T* col = thread_scratch<T>(s, spread);
    for_each_band(s, spread, [&](RowBand band) {
      const int64_t columns = (band.end - band.begin) * s.out_w;
      im2col(image, s, band, col);
      multiply(sample_grad + band.begin * s.out_w, s.out_plane(), false, col, columns, true, accumulator, s.col_rows(),
               s.out_channels, s.col_rows(), columns, true);
    });
  };
  T* dw = grad_weight.data<T>();
  std::fill(dw, dw + weight_size, T(0));
  if (!spread) {
    for (int64_t n = 0; n < s.batch; ++n) accumulate_sample(n, dw);
    return;
  }
  // Each thread sums its samples into its own buffer (thread 0 straight into the result); the partial
  // sums are then added in thread order, so the result does not depend on timing.
  const int threads = omp_get_max_threads();
  std::vector<std::vector<T>> partials(static_cast<size_t>(threads - 1));
#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    T* accumulator = dw;
    if (thread > 0) {
      partials[static_cast<size_t>(thread - 1)].assign(static_cast<size_t>(weight_size), T(0));
      accumulator = partials[static_cast<size_t>(thread - 1)].data();
    }
#pragma omp for schedule(static)
    for (int64_t n = 0; n < s.batch; ++n) accumulate_sample(n, accumulator);
  }
#pragma omp parallel for schedule(static) if (weight_size > cpu::kParallelMinElements)
  for (int64_t i = 0; i < weight_size; ++i)
    for (const std::vector<T>& partial : partials)
      if (!partial.empty()) dw[i] += partial[static_cast<size_t>(i)];
}

// Channels-last convolutions run the NCHW kernels on permuted copies: the CPU computes the same sums
// in either layout, so it stays the reference the CUDA backend's NHWC kernels are tested against.
Tensor as_nchw(const Tensor& nhwc) { return nhwc.permute({0, 3, 1, 2}).contiguous(); }
Tensor empty_nchw_like(const Tensor& nhwc) {
  return Tensor::empty({nhwc.size(0), nhwc.size(3), nhwc.size(1), nhwc.size(2)}, nhwc.dtype(), nhwc.device());
}
void copy_to_nhwc(const Tensor& nchw, Tensor& nhwc) { nhwc.copy_(nchw.permute({0, 2, 3, 1}).contiguous()); }

Conv2dGeometry nchw_geometry(Conv2dGeometry geometry) {
  geometry.channels_last = false;
  return geometry;
}

// Runs an NCHW convolution on the engine OPSNN_CPU_ENGINE picks: with_eigen() always for dtypes other than
// fp32 and for shapes oneDNN does not support, else as onednn::run_on_engine decides.
template <typename Eigen, typename OneDnn>
void run_conv(const ConvShape& s, onednn::Direction direction, DType dtype, Eigen&& with_eigen, OneDnn&& with_onednn) {
  if (dtype != DType::f32 || onednn::policy() == onednn::Policy::eigen) return with_eigen();
  if (!onednn::conv_supported(s)) return with_eigen();
  // oneDNN's direct kernels block the input channels by 8 or 16: with a single one (a grayscale stem) its
  // weight gradient ran 2.6x slower than Eigen's (src/ops/cpu/README.md), so onednn leaves it to Eigen.
  if (onednn::policy() == onednn::Policy::onednn && direction == onednn::Direction::backward_weights &&
      s.in_channels == 1)
    return with_eigen();
  onednn::run_on_engine(onednn::conv_key(s, direction), with_eigen, with_onednn);
}

}  // namespace

void CpuBackend::conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor& out,
                                const Conv2dGeometry& geometry) {
  if (geometry.channels_last) {
    Tensor nchw_out = empty_nchw_like(out);
    conv2d_forward(as_nchw(input), weight, bias, nchw_out, nchw_geometry(geometry));
    copy_to_nhwc(nchw_out, out);
    return;
  }
  const ConvShape shape(input.shape(), weight.shape(), out.shape(), geometry);
  run_conv(
      shape, onednn::Direction::forward, input.dtype(),
      [&] {
        cpu::visit_floating(input.dtype(), "conv2d_forward",
                            [&](auto tag) { forward_typed<decltype(tag)>(input, weight, bias, out, shape); });
      },
      [&] {
        onednn::conv_forward(shape, input.data<float>(), weight.data<float>(),
                             bias.defined() ? bias.data<float>() : nullptr, out.data<float>());
      });
}

void CpuBackend::conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, Tensor& grad_input,
                                       const Conv2dGeometry& geometry, bool accumulate) {
  if (accumulate) {  // a fresh gradient, then added: the bits of the engine's own sum
    Tensor fresh = Tensor::empty(grad_input.shape(), grad_input.dtype(), grad_input.device());
    conv2d_backward_input(grad_out, weight, fresh, geometry, false);
    grad_input.add_(fresh);
    return;
  }
  if (geometry.channels_last) {
    Tensor nchw_grad_input = empty_nchw_like(grad_input);
    conv2d_backward_input(as_nchw(grad_out), weight, nchw_grad_input, nchw_geometry(geometry), false);
    copy_to_nhwc(nchw_grad_input, grad_input);
    return;
  }
  const ConvShape shape(grad_input.shape(), weight.shape(), grad_out.shape(), geometry);
  run_conv(
      shape, onednn::Direction::backward_data, grad_out.dtype(),
      [&] {
        cpu::visit_floating(grad_out.dtype(), "conv2d_backward_input", [&](auto tag) {
          backward_input_typed<decltype(tag)>(grad_out, weight, grad_input, shape);
        });
      },
      [&] {
        onednn::conv_backward_data(shape, grad_out.data<float>(), weight.data<float>(), grad_input.data<float>());
      });
}

void CpuBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, Tensor& grad_weight,
                                        const Conv2dGeometry& geometry) {
  if (geometry.channels_last) {
    conv2d_backward_weight(as_nchw(grad_out), as_nchw(input), grad_weight, nchw_geometry(geometry));
    return;
  }
  const ConvShape shape(input.shape(), grad_weight.shape(), grad_out.shape(), geometry);
  run_conv(
      shape, onednn::Direction::backward_weights, grad_out.dtype(),
      [&] {
        cpu::visit_floating(grad_out.dtype(), "conv2d_backward_weight", [&](auto tag) {
          backward_weight_typed<decltype(tag)>(grad_out, input, grad_weight, shape);
        });
      },
      [&] {
        onednn::conv_backward_weights(shape, grad_out.data<float>(), input.data<float>(), grad_weight.data<float>());
      });
}

}  // namespace opsnn::ops
