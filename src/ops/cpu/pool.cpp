// CPU pooling kernels (NCHW): max pooling with argmax indices and average pooling, forward and
// backward, one OpenMP task per (sample, channel) plane.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"

namespace opsnn::ops {
namespace {

// Sizes of one pooling call, read from the input-side and output-side tensors.
struct PoolShape {
  int64_t planes, in_h, in_w, out_h, out_w;
  PoolShape(const Shape& input, const Shape& output)
      : planes(input[0] * input[1]), in_h(input[2]), in_w(input[3]), out_h(output[2]), out_w(output[3]) {}
  int64_t in_plane() const { return in_h * in_w; }
  int64_t out_plane() const { return out_h * out_w; }
  bool parallel() const { return planes * std::max(in_plane(), out_plane()) > cpu::kParallelMinElements; }
};

// One window, clipped to the input, and the divisor average pooling uses for it.
struct Window {
  int64_t h_begin, h_end, w_begin, w_end;
  int64_t divisor;
};

Window window_at(int64_t oh, int64_t ow, const PoolShape& s, const Pool2dGeometry& g) {
  int64_t h_begin = oh * g.stride_h - g.pad_h, w_begin = ow * g.stride_w - g.pad_w;
  // As PyTorch: with count_include_pad the divisor counts padding but not cells beyond it.
  const int64_t h_end_padded = std::min(h_begin + g.kernel_h, s.in_h + g.pad_h);
  const int64_t w_end_padded = std::min(w_begin + g.kernel_w, s.in_w + g.pad_w);
  const int64_t padded_area = (h_end_padded - h_begin) * (w_end_padded - w_begin);
  const int64_t h_end = std::min(h_end_padded, s.in_h), w_end = std::min(w_end_padded, s.in_w);
  h_begin = std::max<int64_t>(h_begin, 0);
  w_begin = std::max<int64_t>(w_begin, 0);
  const int64_t area = (h_end - h_begin) * (w_end - w_begin);
  return {h_begin, h_end, w_begin, w_end, g.count_include_pad ? padded_area : area};
}

// value beats best: larger, or the first NaN (NaN propagates, as in PyTorch); ties keep the earlier cell.
template <typename T>
bool beats(T value, T best) {
  return value > best || (value != value && best == best);
}

// 2x2 windows at stride 2 without padding (every CNN's down-sampling): the four cells read directly, in
// the general loop's order, so the results and indices are the same.
template <typename T>
void max_forward_2x2(const T* x, T* y, int32_t* argmax, const PoolShape& s) {
#pragma omp parallel for schedule(static) if (s.parallel())
  for (int64_t plane = 0; plane < s.planes; ++plane) {
    const T* in = x + plane * s.in_plane();
    T* out = y + plane * s.out_plane();
    int32_t* index = argmax + plane * s.out_plane();
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      const int64_t top = 2 * oh * s.in_w;
      const T* row0 = in + top;
      const T* row1 = row0 + s.in_w;
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        const int64_t column = 2 * ow;
        T best = row0[column];
        int64_t at = top + column;
        if (beats(row0[column + 1], best)) best = row0[column + 1], at = top + column + 1;
        if (beats(row1[column], best)) best = row1[column], at = top + s.in_w + column;
        if (beats(row1[column + 1], best)) best = row1[column + 1], at = top + s.in_w + column + 1;
        out[oh * s.out_w + ow] = best;
        index[oh * s.out_w + ow] = static_cast<int32_t>(at);
      }
    }
  }
}

template <typename T>
void max_forward_typed(const Tensor& input, Tensor& out, Tensor& indices, const Pool2dGeometry& g) {
  const PoolShape s(input.shape(), out.shape());
  const T* x = input.data<T>();
  T* y = out.data<T>();
  int32_t* argmax = indices.data<int32_t>();
  if (g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0 &&
      2 * s.out_h <= s.in_h && 2 * s.out_w <= s.in_w)
    return max_forward_2x2(x, y, argmax, s);
#pragma omp parallel for schedule(static) if (s.parallel())
  for (int64_t plane = 0; plane < s.planes; ++plane) {
    const T* in = x + plane * s.in_plane();
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        const Window window = window_at(oh, ow, s, g);
        // Padding counts as -inf, so only input cells compete; the first maximum wins ties and the
        // first NaN wins over everything (NaN propagates, as in PyTorch).
        T best = -std::numeric_limits<T>::infinity();
        int64_t best_index = window.h_begin * s.in_w + window.w_begin;
        for (int64_t ih = window.h_begin; ih < window.h_end; ++ih) {
          for (int64_t iw = window.w_begin; iw < window.w_end; ++iw) {
            const T value = in[ih * s.in_w + iw];
            if (beats(value, best)) {
              best = value;
              best_index = ih * s.in_w + iw;
            }
          }
        }
        const int64_t o = plane * s.out_plane() + oh * s.out_w + ow;
        y[o] = best;
        argmax[o] = static_cast<int32_t>(best_index);
      }
    }
  }
}

template <typename T>
void max_backward_typed(const Tensor& grad_out, const Tensor& indices, Tensor& grad_input) {
  const PoolShape s(grad_input.shape(), grad_out.shape());
  const T* dy = grad_out.data<T>();
  const int32_t* argmax = indices.data<int32_t>();
  T* dx = grad_input.data<T>();
#pragma omp parallel for schedule(static) if (s.parallel())
  for (int64_t plane = 0; plane < s.planes; ++plane) {
    T* in_grad = dx + plane * s.in_plane();
    std::fill(in_grad, in_grad + s.in_plane(), T(0));
    for (int64_t o = plane * s.out_plane(); o < (plane + 1) * s.out_plane(); ++o) in_grad[argmax[o]] += dy[o];
  }
}

template <typename T>
void avg_forward_typed(const Tensor& input, Tensor& out, const Pool2dGeometry& g) {
  const PoolShape s(input.shape(), out.shape());
  const T* x = input.data<T>();
  T* y = out.data<T>();
#pragma omp parallel for schedule(static) if (s.parallel())
  for (int64_t plane = 0; plane < s.planes; ++plane) {
    const T* in = x + plane * s.in_plane();
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        const Window window = window_at(oh, ow, s, g);
        T total = 0;
        for (int64_t ih = window.h_begin; ih < window.h_end; ++ih)
          for (int64_t iw = window.w_begin; iw < window.w_end; ++iw) total += in[ih * s.in_w + iw];
        y[plane * s.out_plane() + oh * s.out_w + ow] = total / static_cast<T>(window.divisor);
      }
    }
  }
}

template <typename T>
void avg_backward_typed(const Tensor& grad_out, Tensor& grad_input, const Pool2dGeometry& g) {
  const PoolShape s(grad_input.shape(), grad_out.shape());
  const T* dy = grad_out.data<T>();
  T* dx = grad_input.data<T>();
#pragma omp parallel for schedule(static) if (s.parallel())
  for (int64_t plane = 0; plane < s.planes; ++plane) {
    T* in_grad = dx + plane * s.in_plane();
    std::fill(in_grad, in_grad + s.in_plane(), T(0));
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        const Window window = window_at(oh, ow, s, g);
        const T share = dy[plane * s.out_plane() + oh * s.out_w + ow] / static_cast<T>(window.divisor);
        for (int64_t ih = window.h_begin; ih < window.h_end; ++ih)
          for (int64_t iw = window.w_begin; iw < window.w_end; ++iw) in_grad[ih * s.in_w + iw] += share;
      }
    }
  }
}

}  // namespace

void CpuBackend::max_pool2d_forward(const Tensor& input, Tensor& out, Tensor& indices, const Pool2dGeometry& geometry) {
  cpu::visit_floating(input.dtype(), "max_pool2d_forward",
                      [&](auto tag) { max_forward_typed<decltype(tag)>(input, out, indices, geometry); });
}

void CpuBackend::max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_input,
                                     const Pool2dGeometry& /*geometry: each index names its cell*/) {
  cpu::visit_floating(grad_out.dtype(), "max_pool2d_backward",
                      [&](auto tag) { max_backward_typed<decltype(tag)>(grad_out, indices, grad_input); });
}

void CpuBackend::avg_pool2d_forward(const Tensor& input, Tensor& out, const Pool2dGeometry& geometry) {
  cpu::visit_floating(input.dtype(), "avg_pool2d_forward",
                      [&](auto tag) { avg_forward_typed<decltype(tag)>(input, out, geometry); });
}

void CpuBackend::avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_input, const Pool2dGeometry& geometry) {
  cpu::visit_floating(grad_out.dtype(), "avg_pool2d_backward",
                      [&](auto tag) { avg_backward_typed<decltype(tag)>(grad_out, grad_input, geometry); });
}

}  // namespace opsnn::ops
