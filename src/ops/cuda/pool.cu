// CUDA pooling kernels over NCHW planes: max pooling with flat h*W+w argmax indices (first maximum on
// ties, NaN propagates) and average pooling with PyTorch's count_include_pad divisor, forward and
// backward, over f32, f16 or bf16 data (sums in f32). Window arithmetic is the CPU twin's
// (src/ops/cpu/pool.cpp) line for line.
#include <cmath>

#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

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

template <typename T>
__global__ void max_forward_kernel(const T* x, T* out, int64_t* indices, PoolLayout s, int64_t total) {
  const int64_t out_plane = s.out_h * s.out_w;
  for (int64_t o = global_thread_index(); o < total; o += global_thread_count()) {
    const int64_t plane = o / out_plane, within = o - plane * out_plane;
    const int64_t oh = within / s.out_w, ow = within - oh * s.out_w;
    const Window window = window_at(oh, ow, s);
    const T* in = x + plane * s.in_h * s.in_w;
    // Padding counts as -inf; the first maximum wins ties and the first NaN wins over everything.
    float best = -INFINITY;
    int64_t best_index = window.h_begin * s.in_w + window.w_begin;
    for (int64_t ih = window.h_begin; ih < window.h_end; ++ih) {
      for (int64_t iw = window.w_begin; iw < window.w_end; ++iw) {
        const float value = static_cast<float>(in[ih * s.in_w + iw]);
        if (value > best || (isnan(value) && !isnan(best))) {
          best = value;
          best_index = ih * s.in_w + iw;
        }
      }
    }
    out[o] = T(best);
    indices[o] = best_index;
  }
}

template <typename T>
__global__ void max_backward_kernel(const T* grad_out, const int64_t* indices, float* grad_input,
                                    int64_t in_plane, int64_t out_plane, int64_t total) {
  for (int64_t o = global_thread_index(); o < total; o += global_thread_count())
    atomicAdd(grad_input + (o / out_plane) * in_plane + indices[o], static_cast<float>(grad_out[o]));
}

template <typename T> __global__ void avg_forward_kernel(const T* x, T* out, PoolLayout s, int64_t total) {
  const int64_t out_plane = s.out_h * s.out_w;
  for (int64_t o = global_thread_index(); o < total; o += global_thread_count()) {
    const int64_t plane = o / out_plane, within = o - plane * out_plane;
    const int64_t oh = within / s.out_w, ow = within - oh * s.out_w;
    const Window window = window_at(oh, ow, s);
    const T* in = x + plane * s.in_h * s.in_w;
    float total_value = 0.0f;
    for (int64_t ih = window.h_begin; ih < window.h_end; ++ih)
      for (int64_t iw = window.w_begin; iw < window.w_end; ++iw) total_value += static_cast<float>(in[ih * s.in_w + iw]);
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
        total_value += static_cast<float>(upstream[oh * s.out_w + ow]) / static_cast<float>(window_at(oh, ow, s).divisor);
    grad_input[i] = T(total_value);
  }
}

}  // namespace

template <typename T> void launch_max_pool_forward(const T* x, T* out, int64_t* indices, const PoolLayout& layout) {
  const int64_t total = layout.planes * layout.out_h * layout.out_w;
  if (total == 0) return;
  max_forward_kernel<<<blocks_for(total), kThreadsPerBlock>>>(x, out, indices, layout, total);
}

template <typename T>
void launch_max_pool_backward(const T* grad_out, const int64_t* indices, float* grad_input, int64_t planes,
                              int64_t in_plane, int64_t out_plane) {
  const int64_t total = planes * out_plane;
  if (total == 0) return;
  max_backward_kernel<<<blocks_for(total), kThreadsPerBlock>>>(grad_out, indices, grad_input, in_plane, out_plane,
                                                               total);
}

template <typename T> void launch_avg_pool_forward(const T* x, T* out, const PoolLayout& layout) {
  const int64_t total = layout.planes * layout.out_h * layout.out_w;
  if (total == 0) return;
  avg_forward_kernel<<<blocks_for(total), kThreadsPerBlock>>>(x, out, layout, total);
}

template <typename T> void launch_avg_pool_backward(const T* grad_out, T* grad_input, const PoolLayout& layout) {
  const int64_t total = layout.planes * layout.in_h * layout.in_w;
  if (total == 0) return;
  avg_backward_kernel<<<blocks_for(total), kThreadsPerBlock>>>(grad_out, grad_input, layout, total);
}

#define OPSNN_INSTANTIATE_POOL(T)                                                                               \
  template void launch_max_pool_forward<T>(const T*, T*, int64_t*, const PoolLayout&);                          \
  template void launch_max_pool_backward<T>(const T*, const int64_t*, float*, int64_t, int64_t, int64_t);       \
  template void launch_avg_pool_forward<T>(const T*, T*, const PoolLayout&);                                    \
  template void launch_avg_pool_backward<T>(const T*, T*, const PoolLayout&);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_POOL)

}  // namespace opsnn::cuda
