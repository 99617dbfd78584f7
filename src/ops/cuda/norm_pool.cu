// Training-mode batch_norm_relu followed by stride-2 max pooling on NCHW planes (a ResNet stem's tail) in
// fused passes, so the full-size relu output and its gradient never reach memory:
//   forward:  norm.cu's statistics pass and finalize (running stats, saved statistics, coefficients), then
//             one pass that normalizes, relus and rounds each window's cells exactly as the normalizing
//             pass would store them and takes their maximum as max pooling would: the pooled output is
//             unfused max_pool2d's bit for bit, and its choice is kept as the argmax's offset in the
//             window (dh * kernel_w + dw, one byte; max_pool2d keeps a 4-byte flat index).
//   backward: the per-channel sums in output space: every window adds its gradient to the cell it chose,
//             so sum g and sum g * (x - mean) over the cells are sums over the windows of g and
//             g * (x_chosen - mean) (relu's mask recomputed from x_chosen); one block per plane writes
//             partials[plane] = partials[n * channels + c], which norm.cu's finalize merges as splits = n.
//             Then one pass per 2x2 block of cells gathers the gradient of the windows covering them
//             (pool_support.cuh, as max pooling's backward), masks it by relu's recomputed mask and writes
//             batch norm's input gradient.
// The gradient of a cell that is the argmax of several windows is their f32 sum, not rounded to the data
// type first as the unfused max-pooling backward stores it; sums of equal inputs are bit-identical run to
// run (fixed orders throughout).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "core/cuda/fast_divide.h"
#include "core/cuda/vectorized.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"
#include "ops/cuda/norm_support.cuh"
#include "ops/cuda/pool_support.cuh"
#include "opsnn/core/error.h"

namespace opsnn::cuda {
namespace {

using namespace norm;
using namespace pool;

constexpr int kSumsThreads = 128;  // per plane of the backward's sums (3136 outputs at the stem)
constexpr int kSumsUnroll = 8;

// The channel of plane p (planes are n * channels + c).
struct PlaneChannel {
  FastDivider channels;
  __device__ __forceinline__ uint32_t operator()(uint32_t plane) const {
    return plane - channels.divide(plane) * channels.divisor;
  }
};

// One thread per output (grid-stride), the window visited row by row as max_pool2d's forward does
// (visit_window), over the values batch_norm_relu would store: relu of the normalized value, rounded to T.
// kWindow > 0 fixes a square window at compile time. first_plane: the launch's first plane, for the channel.
template <typename T, int kWindow>
__global__ void __launch_bounds__(kPoolThreads)
    normalize_relu_max_kernel(const T* x, const float4* coefficients, T* out, uint8_t* offsets, Geometry32 s,
                              PositionDecoder decode, PlaneChannel channel_of, uint32_t first_plane, uint32_t total) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += stride) {
    const PositionDecoder::Position at = decode(o);
    const float4 k = coefficients[channel_of(first_plane + at.plane)];
    const int h_origin = at.row * s.stride_h - s.pad_h, w_origin = at.column * s.stride_w - s.pad_w;
    // The first maximum wins ties and the first NaN wins over everything; padding never wins (relu's
    // values are never -inf, so some cell inside always does).
    float best = -INFINITY;
    int best_offset = 0;
    visit_window<kWindow>(x + at.plane * s.in_plane(), s, h_origin, w_origin, [&](float input, int dh, int dw) {
      const float value = static_cast<float>(T(finish_normalized<T, true, false>(normalize_value(input, k), 0.0f)));
      if (value > best || (isnan(value) && !isnan(best))) {
        best = value;
        best_offset = dh * s.kernel_w + dw;
      }
    });
    out[o] = T(best);
    offsets[o] = static_cast<uint8_t>(best_offset);
  }
}

// The flat cell (h * W + w) that window (oh, ow) chose, from its offset in the window.
struct ChosenCell {
  const uint8_t* offsets;  // the plane's
  FastDivider by_kernel_w;
  int stride_h, pad_h, stride_w, pad_w, in_w;
  __device__ __forceinline__ ChosenCell(const uint8_t* plane_offsets, const FastDivider& kernel_w, const Geometry32& s)
      : offsets(plane_offsets),
        by_kernel_w(kernel_w),
        stride_h(s.stride_h),
        pad_h(s.pad_h),
        stride_w(s.stride_w),
        pad_w(s.pad_w),
        in_w(s.in_w) {}
  __device__ __forceinline__ int operator()(int o, int oh, int ow) const {
    const uint32_t offset = offsets[o], dh = by_kernel_w.divide(offset);
    const int dw = static_cast<int>(offset - dh * by_kernel_w.divisor);
    return (oh * stride_h - pad_h + static_cast<int>(dh)) * in_w + ow * stride_w - pad_w + dw;
  }
};

// Per plane (blocks stride over planes): sum g and sum g * (x_chosen - mean) over its windows, g masked by
// relu's mask recomputed from x_chosen, into partials[plane].
template <typename T>
__global__ void __launch_bounds__(kSumsThreads)
    pooled_gradient_sums_kernel(const T* grad_out, const uint8_t* offsets, const T* x, NormalizeInputs forward,
                                Geometry32 s, FastDivider by_out_w, FastDivider by_kernel_w, int64_t planes,
                                int64_t channels, double2* partials) {
  __shared__ double scratch[32];
  const int out_plane = s.out_h * s.out_w, in_plane = s.in_h * s.in_w;
  for (int64_t plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    const int64_t channel = plane % channels;
    const float mean = forward.mean[channel];
    const float4 mask_k = normalize_coefficients(forward, channel);
    const T* g = grad_out + plane * out_plane;
    const T* values = x + plane * in_plane;
    const ChosenCell chosen(offsets + plane * out_plane, by_kernel_w, s);
    double sum_grad = 0.0, sum_grad_centered = 0.0;
    for (int first = threadIdx.x; first < out_plane; first += kSumsUnroll * kSumsThreads) {
      float grads[kSumsUnroll], centered[kSumsUnroll];
      int cells[kSumsUnroll];
#pragma unroll
      for (int u = 0; u < kSumsUnroll; ++u) {
        const int o = first + u * kSumsThreads;
        const int oh = static_cast<int>(by_out_w.divide(static_cast<uint32_t>(o)));
        cells[u] = o < out_plane ? chosen(o, oh, o - oh * s.out_w) : -1;
        grads[u] = o < out_plane ? static_cast<float>(g[o]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kSumsUnroll; ++u) centered[u] = cells[u] >= 0 ? static_cast<float>(values[cells[u]]) : mean;
#pragma unroll
      for (int u = 0; u < kSumsUnroll; ++u) {
        if (!relu_output_positive<T>(centered[u], mask_k)) grads[u] = 0.0f;
        centered[u] = grads[u] * (centered[u] - mean);
      }
      sum_grad += grouped_sum<kSumsUnroll>(grads);
      sum_grad_centered += grouped_sum<kSumsUnroll>(centered);
    }
    sum_grad = block_reduce(sum_grad, scratch, SumOp{});
    sum_grad_centered = block_reduce(sum_grad_centered, scratch, SumOp{});
    if (threadIdx.x == 0) partials[plane] = make_double2(sum_grad, sum_grad_centered);
  }
}

// One thread per 2x2 block of input cells (stride 2): the gathered pooling gradient, masked by relu's mask
// recomputed from x, through batch norm's input gradient.
template <typename T>
__global__ void __launch_bounds__(kPoolThreads)
    pooled_grad_input_kernel(const T* grad_out, const uint8_t* offsets, const T* x, T* grad_input,
                             const float4* coefficients, const float4* mask_coefficients, Geometry32 s,
                             FastDivider by_kernel_w, PositionDecoder decode, PlaneChannel channel_of,
                             uint32_t first_plane, uint32_t total) {
  const int64_t out_plane = s.out_plane(), in_plane = s.in_plane();
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t b = blockIdx.x * blockDim.x + threadIdx.x; b < total; b += stride) {
    const PositionDecoder::Position at = decode(b);
    const uint32_t channel = channel_of(first_plane + at.plane);
    const Stride2Block block = stride2_block(at, s);
    float values[4];
    load_block(x + at.plane * in_plane, block, s, values);
    float sums[4];
    const ChosenCell chosen(offsets + at.plane * out_plane, by_kernel_w, s);
    stride2_block_sums(grad_out + at.plane * out_plane, chosen, block, s, sums);
    const float4 k = coefficients[channel], mask_k = mask_coefficients[channel];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float grad = relu_output_positive<T>(values[c], mask_k) ? sums[c] : 0.0f;
      sums[c] = grad_input_value(grad, values[c], k);
    }
    store_block(grad_input + at.plane * in_plane, block, s, sums);
  }
}

// The backward's workspace: coefficients and mask coefficients (float4 per channel), then one double2
// partial per plane.
struct FusedWorkspace {
  float4 *coefficients, *mask_coefficients;
  double2* partials;
};

FusedWorkspace carve_fused(void* workspace, int64_t channels) {
  float4* coefficients = static_cast<float4*>(workspace);
  return {coefficients, coefficients + channels, reinterpret_cast<double2*>(coefficients + 2 * channels)};
}

}  // namespace

bool batch_norm_relu_max_pool_fits(const PoolLayout& pool) {
  return stride2_blocks_fit(pool) && pool.in_h * pool.in_w <= FastDivider::kMaxDividend &&
         pool.planes <= FastDivider::kMaxDividend;
}

size_t batch_norm_relu_max_pool_workspace_bytes(const ChannelLayout& layout) {
  const size_t backward = static_cast<size_t>(layout.channels) * 2 * sizeof(float4) +
                          static_cast<size_t>(layout.batch * layout.channels) * sizeof(double2);
  return std::max(batch_norm_workspace_bytes(layout), backward);
}

template <typename T>
void launch_batch_norm_relu_max_pool_forward_train(const T* x, const float* gamma, const float* beta,
                                                   float* running_mean, float* running_var, double momentum, double eps,
                                                   T* out, uint8_t* offsets, float* save_mean, float* save_invstd,
                                                   const ChannelLayout& layout, const PoolLayout& pool,
                                                   void* workspace) {
  if (layout.channels == 0 || layout.batch * layout.inner == 0) return;
  OPSNN_CHECK(batch_norm_relu_max_pool_fits(pool), "CUDA batch_norm_relu_max_pool2d: unsupported pooling geometry");
  launch_batch_norm_forward_train<T>(x, gamma, beta, running_mean, running_var, momentum, eps, false, nullptr, nullptr,
                                     nullptr, save_mean, save_invstd, layout, workspace);
  const float4* coefficients = forward_coefficients(workspace);
  const int64_t in_plane = pool.in_h * pool.in_w, out_plane = pool.out_h * pool.out_w;
  const Geometry32 geometry(pool);
  const PositionDecoder decode(out_plane, pool.out_w);
  const PlaneChannel channel_of{FastDivider(static_cast<uint32_t>(layout.channels))};
  const bool window3 = pool.kernel_h == 3 && pool.kernel_w == 3;
  over_plane_runs(pool.planes, out_plane, "batch_norm_relu_max_pool2d", [&](int64_t first, uint32_t total) {
    const unsigned blocks =
        std::min(blocks_for(total, kPoolThreads), resident_grid<normalize_relu_max_kernel<T, 3>>(total, kPoolThreads));
    const auto launch = [&](auto kernel) {
      kernel<<<blocks, kPoolThreads, 0, current_stream()>>>(x + first * in_plane, coefficients, out + first * out_plane,
                                                            offsets + first * out_plane, geometry, decode, channel_of,
                                                            static_cast<uint32_t>(first), total);
    };
    if (window3)
      launch(normalize_relu_max_kernel<T, 3>);
    else
      launch(normalize_relu_max_kernel<T, 0>);
  });
}

template <typename T>
void launch_batch_norm_relu_max_pool_backward(const T* grad_out, const uint8_t* offsets, const T* x, const float* gamma,
                                              const float* beta, const float* save_mean, const float* save_invstd,
                                              T* grad_input, float* grad_gamma, float* grad_beta,
                                              bool accumulate_parameter_grads, const ChannelLayout& layout,
                                              const PoolLayout& pool, void* workspace) {
  if (layout.channels == 0 || layout.batch * layout.inner == 0) return;
  OPSNN_CHECK(batch_norm_relu_max_pool_fits(pool), "CUDA batch_norm_relu_max_pool2d: unsupported pooling geometry");
  const FusedWorkspace space = carve_fused(workspace, layout.channels);
  const NormalizeInputs forward{save_mean, save_invstd, gamma, beta};
  const int64_t in_plane = pool.in_h * pool.in_w, out_plane = pool.out_h * pool.out_w;
  const Geometry32 geometry(pool);
  const FastDivider by_kernel_w(static_cast<uint32_t>(pool.kernel_w));
  const unsigned sums_blocks = static_cast<unsigned>(std::min<int64_t>(pool.planes, 65535LL * 16));
  pooled_gradient_sums_kernel<T><<<sums_blocks, kSumsThreads, 0, current_stream()>>>(
      grad_out, offsets, x, forward, geometry, FastDivider(static_cast<uint32_t>(pool.out_w)), by_kernel_w, pool.planes,
      layout.channels, space.partials);
  launch_backward_finalize(space.partials, layout.batch, layout.channels,
                           static_cast<double>(layout.batch * layout.inner), forward, grad_gamma, grad_beta,
                           accumulate_parameter_grads, space.coefficients, space.mask_coefficients);
  const int64_t blocks_h = (pool.in_h + 1) / 2, blocks_w = (pool.in_w + 1) / 2;
  const PositionDecoder decode(blocks_h * blocks_w, blocks_w);
  const PlaneChannel channel_of{FastDivider(static_cast<uint32_t>(layout.channels))};
  over_plane_runs(
      pool.planes, blocks_h * blocks_w, "batch_norm_relu_max_pool2d backward", [&](int64_t first, uint32_t total) {
        const unsigned blocks =
            std::min(blocks_for(total, kPoolThreads), resident_grid<pooled_grad_input_kernel<T>>(total, kPoolThreads));
        pooled_grad_input_kernel<T><<<blocks, kPoolThreads, 0, current_stream()>>>(
            grad_out + first * out_plane, offsets + first * out_plane, x + first * in_plane,
            grad_input + first * in_plane, space.coefficients, space.mask_coefficients, geometry, by_kernel_w, decode,
            channel_of, static_cast<uint32_t>(first), total);
      });
}

#define OPSNN_INSTANTIATE_BATCH_NORM_RELU_MAX_POOL(T)                                                                  \
  template void launch_batch_norm_relu_max_pool_forward_train<T>(const T*, const float*, const float*, float*, float*, \
                                                                 double, double, T*, uint8_t*, float*, float*,         \
                                                                 const ChannelLayout&, const PoolLayout&, void*);      \
  template void launch_batch_norm_relu_max_pool_backward<T>(                                                           \
      const T*, const uint8_t*, const T*, const float*, const float*, const float*, const float*, T*, float*, float*,  \
      bool, const ChannelLayout&, const PoolLayout&, void*);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_BATCH_NORM_RELU_MAX_POOL)

}  // namespace opsnn::cuda
