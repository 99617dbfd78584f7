// CUDA batch normalization over [batch, channels, inner] (statistics per channel over batch and inner):
// training forward with the running-stat update, eval forward, and backward, each optionally with a
// fused relu (the forwards write relu(batch norm); the backward masks the upstream gradient as it reads
// it, by the relu output or by the sign of the forward's value recomputed from x: the training forward's
// coefficients come from the saved statistics, gamma and beta alone); the CPU twin is
// src/ops/cpu/norm.cpp. Data may be f32, f16 or bf16 (mixed precision); per-channel parameters and
// statistics are always f32.
//
// Each op runs three kernels, so that a few channels still fill the GPU and every pass streams the data
// once, coalesced (training forward reads x twice and writes once; backward reads g and x twice):
//   1. partials: a (channel, split) grid; each block walks one contiguous slab of its channel's
//      batch * inner values (rows of `inner`, loaded in the widest vector of up to 16 bytes that divides
//      inner and suits the pointers' alignment: 4 bf16 values for a 14x14 plane) and writes one partial
//      result to the workspace;
//   2. finalize: one block per channel merges that channel's partials (each thread a strided share, in
//      order; then the lanes of each warp in a shuffle tree; then the warps in order) and writes the
//      per-channel results (statistics and running stats, or grad_gamma and grad_beta) and the
//      coefficients of the elementwise pass;
//   3. map: a grid-stride elementwise pass over the whole flat tensor in 16-byte vectors whatever inner
//      (given 16-byte aligned pointers and inner >= the vector width): each thread tracks the channel
//      and row column of its vector as it strides (no division per element); a vector that crosses a row
//      end takes the next channel's coefficients for its values past the end, and the tensor's last
//      values that fill no vector are done one by one.
// Every sum has a fixed order for a given device (the split count follows its SM count), so equal
// inputs give bit-identical results run to run.
// With inner == 1 (channels-last activations as [N * H * W, C], or a plain [N, C] batch) the partials and
// map passes are norm_rows.cu's, which walk rows with the channel innermost; finalize stays the same.
//
// Precision: a thread adds its float terms in groups of at most 8 and the group sums in double. The
// forward terms are deviations from a shift taken from the data (the first value of the warp's part of
// the slab), so the sum of squares does not cancel the way E[x^2] - E[x]^2 would; each warp turns its
// shifted sums into (count, mean, M2) and these merge pairwise as in Chan, Golub & LeVeque, "Updating
// formulae and a pairwise algorithm for computing sample variances" (1979).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"
#include "ops/cuda/norm_rows.h"
#include "ops/cuda/norm_support.cuh"

namespace opsnn::cuda {
namespace {

using namespace norm;

constexpr int kReduceThreads = 256;
constexpr int kFinalizeThreads = 256;  // one block per channel
constexpr int kMapThreads = 256;
// The partials grid aims at this many blocks per SM (several waves, so uneven residency costs little),
// with at least kMinElementsPerBlock values per block.
constexpr int64_t kReduceBlocksPerSm = 32;
constexpr int64_t kMinElementsPerBlock = 16384;
constexpr int64_t kMapBlocksPerSm = 8;  // a grid-stride pass needs no more than one resident wave
constexpr unsigned kFullMask = 0xffffffffu;

// ---- walking the tensor without dividing per element ----

// The partials kernels' view of the tensor, in units of V values (V divides inner): batch * channels
// rows of row_units units; channel c's rows are rows n * channels + c.
struct UnitGeometry {
  int64_t batch, channels, row_units;
};

// One thread's place among a channel's units: the unit's offset in the tensor and its column in its row.
struct ChannelWalk {
  int64_t offset, column;
};
// Moving a ChannelWalk a fixed number of units on: the column moves by `columns` and the offset by
// `offset`; passing a row's end adds `wrap`, the other channels' rows in between.
struct ChannelStep {
  int64_t columns, offset, wrap;
};

__device__ __forceinline__ ChannelWalk start_channel_walk(int64_t position, int64_t channel, const UnitGeometry& g) {
  const int64_t row = position / g.row_units, column = position - row * g.row_units;
  return {(row * g.channels + channel) * g.row_units + column, column};
}

__device__ __forceinline__ void advance(ChannelWalk& walk, const ChannelStep& step, int64_t row_units) {
  walk.offset += step.offset;
  walk.column += step.columns;
  if (walk.column >= row_units) {
    walk.column -= row_units;
    walk.offset += step.wrap;
  }
}

// The map passes walk the flat tensor, batch * channels rows of `inner` values (channel c's rows are
// rows n * channels + c), in vectors of V values. A thread's place: the column of its vector's first
// value in that value's row, and the row's channel.
struct TensorWalk {
  int64_t column, channel;
};
// Moving a TensorWalk a fixed number of values on: the column moves by `columns` and the channel by
// `channels` (both reduced: columns < inner, channels < the channel count).
struct TensorStep {
  int64_t columns, channels;
};

// Geometry of a grid-stride pass over `values` values: `vectors` whole vectors, then the tail (fewer
// than V values) that one thread does one value at a time; `stride` (the grid's threads) vectors apart.
struct MapGeometry {
  int64_t inner, channels, vectors, values, stride;
  TensorStep step;  // stride * V values on
};

__device__ __forceinline__ TensorWalk start_tensor_walk(int64_t value, const MapGeometry& g) {
  const int64_t row = value / g.inner;
  return {value - row * g.inner, row % g.channels};
}

__device__ __forceinline__ void advance(TensorWalk& walk, const MapGeometry& g) {
  walk.column += g.step.columns;
  walk.channel += g.step.channels;
  if (walk.column >= g.inner) {
    walk.column -= g.inner;
    ++walk.channel;
  }
  if (walk.channel >= g.channels) walk.channel -= g.channels;
}

// The coefficients of one vector's values. With inner >= V a vector spans at most two rows: its first
// `split` values lie in the walk's channel (`first`), the rest past the row's end in the next row,
// whose channel is the next one (`second`; channel 0 of the next batch item after the last).
struct VectorCoefficients {
  float4 first, second;
  int split;
};

template <int V>
__device__ __forceinline__ VectorCoefficients coefficients_at(const float4* coefficients, const TensorWalk& walk,
                                                              const MapGeometry& g) {
  VectorCoefficients k{coefficients[walk.channel], {}, V};
  k.second = k.first;
  if (g.inner - walk.column < V) {
    k.split = static_cast<int>(g.inner - walk.column);
    k.second = coefficients[walk.channel + 1 == g.channels ? 0 : walk.channel + 1];
  }
  return k;
}

__device__ __forceinline__ float4 pick(const VectorCoefficients& k, int value) {
  return value < k.split ? k.first : k.second;
}

// The channel of one value, by division (the tail's few values only).
__device__ __forceinline__ int64_t channel_of(int64_t value, const MapGeometry& g) {
  return (value / g.inner) % g.channels;
}

// ---- partial results ----

__device__ __forceinline__ Moments shuffle_down(const Moments& m, int offset) {
  return {__shfl_down_sync(kFullMask, m.count, offset), __shfl_down_sync(kFullMask, m.mean, offset),
          __shfl_down_sync(kFullMask, m.m2, offset)};
}

// Merges the lanes' moments in a shuffle tree; complete in lane 0.
__device__ __forceinline__ Moments warp_merge(Moments m) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Moments other = shuffle_down(m, offset);
    if ((threadIdx.x & 31) + offset < 32) m = merge(m, other);
  }
  return m;
}

__device__ __forceinline__ double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(kFullMask, value, offset);
  return value;  // complete in lane 0
}

__device__ __forceinline__ double2 warp_sum(double2 value) {
  return make_double2(warp_sum(value.x), warp_sum(value.y));
}

// Merges the values of the block's threads: the lanes of each warp in a shuffle tree, then the warps'
// results in warp order (a fixed order, so equal inputs give equal bits). warp_merge(value) returns the
// warp's result in lane 0; merge(a, b) joins two. Every thread calls it; the result is in thread 0.
template <typename S, typename WarpMerge, typename Merge>
__device__ S block_merge(S value, WarpMerge warp_merge, Merge merge) {
  __shared__ S warp_results[kFinalizeThreads / 32];
  value = warp_merge(value);
  if ((threadIdx.x & 31) == 0) warp_results[threadIdx.x / 32] = value;
  __syncthreads();
  if (threadIdx.x == 0)
    for (unsigned w = 1; w < blockDim.x / 32; ++w) value = merge(value, warp_results[w]);
  __syncthreads();  // warp_results is rewritten by the next call
  return value;
}

// Geometry of the partials grid: blockIdx.y is the split; split s covers positions
// [s * chunk_units, (s + 1) * chunk_units) of each channel's batch * row_units units.
struct SplitGeometry {
  UnitGeometry units;
  int64_t chunk_units;
  ChannelStep step;  // kReduceThreads units on
};

// Moments of each (channel, split) slab of x into partials[split * channels + channel].
template <typename T, int V>
__global__ void __launch_bounds__(kReduceThreads)
    moments_kernel(const T* x, SplitGeometry geometry, Moments* partials) {
  __shared__ Moments warp_moments[kReduceThreads / 32];
  const UnitGeometry& g = geometry.units;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t begin = blockIdx.y * geometry.chunk_units;
  const int64_t end = std::min(g.batch * g.row_units, begin + geometry.chunk_units);
  for (int64_t channel = blockIdx.x; channel < g.channels; channel += gridDim.x) {
    const int64_t first = begin + threadIdx.x;
    ChannelWalk walk = start_channel_walk(first, channel, g);
    // Lane 0 holds the warp's first position: when it has none the warp has nothing to add.
    const float lead = first < end ? static_cast<float>(x[walk.offset * V]) : 0.0f;
    const float shift = __shfl_sync(kFullMask, lead, 0);
    double sum = 0.0, squares = 0.0;
    int64_t count = 0;
    for (int64_t position = first; position < end; position += kUnroll<V> * kReduceThreads) {
      float deviations[kUnroll<V> * V], squared[kUnroll<V> * V];
#pragma unroll
      for (int u = 0; u < kUnroll<V>; ++u) {
        float* d = deviations + u * V;
        if (position + u * kReduceThreads < end) {
          load_unit<T, V>(x, walk.offset, d);
          count += V;
#pragma unroll
          for (int k = 0; k < V; ++k) d[k] -= shift;
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) d[k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < V; ++k) squared[u * V + k] = d[k] * d[k];
        advance(walk, geometry.step, g.row_units);
      }
      sum += grouped_sum<kUnroll<V> * V>(deviations);
      squares += grouped_sum<kUnroll<V> * V>(squared);
    }
    sum = warp_sum(sum);
    squares = warp_sum(squares);
    for (int offset = 16; offset > 0; offset >>= 1)
      count += static_cast<int64_t>(__shfl_down_sync(kFullMask, static_cast<long long>(count), offset));
    if (lane == 0) {
      Moments m{0.0, 0.0, 0.0};
      if (count > 0) {
        const double n = static_cast<double>(count), shifted_mean = sum / n;
        m = {n, static_cast<double>(shift) + shifted_mean, std::max(squares - sum * shifted_mean, 0.0)};
      }
      warp_moments[warp] = m;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      Moments total = warp_moments[0];
      for (int w = 1; w < kReduceThreads / 32; ++w) total = merge(total, warp_moments[w]);
      partials[blockIdx.y * g.channels + channel] = total;
    }
    __syncthreads();  // warp_moments is rewritten for the next channel
  }
}

// Merges each channel's partial moments; writes the statistics, the running-stat update and the
// coefficients {center, scale, shift} of out = (x - center) * scale + shift, and with a non-null
// residual_coefficients a normalized residual's coefficients from residual_norm.
__global__ void __launch_bounds__(kFinalizeThreads)
    finalize_forward_kernel(const Moments* partials, int64_t splits, int64_t channels, const float* gamma,
                            const float* beta, float* running_mean, float* running_var, double momentum, double eps,
                            float* save_mean, float* save_invstd, float4* coefficients, NormalizeInputs residual_norm,
                            float4* residual_coefficients) {
  for (int64_t channel = blockIdx.x; channel < channels; channel += gridDim.x) {
    Moments m{0.0, 0.0, 0.0};
    for (int64_t split = threadIdx.x; split < splits; split += blockDim.x)
      m = merge(m, partials[split * channels + channel]);
    m = block_merge(
        m, [](const Moments& v) { return warp_merge(v); },
        [](const Moments& a, const Moments& b) { return merge(a, b); });
    if (threadIdx.x != 0) continue;
    const double mean = m.mean, invstd = 1.0 / sqrt(m.m2 / m.count + eps);
    const float mean_f = static_cast<float>(mean), invstd_f = static_cast<float>(invstd);
    save_mean[channel] = mean_f;
    save_invstd[channel] = invstd_f;
    // Running variance takes the unbiased estimate, as PyTorch does.
    running_mean[channel] =
        static_cast<float>((1.0 - momentum) * static_cast<double>(running_mean[channel]) + momentum * mean);
    running_var[channel] = static_cast<float>((1.0 - momentum) * static_cast<double>(running_var[channel]) +
                                              momentum * m.m2 / (m.count - 1.0));
    // From the saved statistics, so that the backward can recompute the values (the fused relu's mask).
    coefficients[channel] = normalize_coefficients(mean_f, invstd_f, gamma[channel], beta[channel]);
    if (residual_coefficients != nullptr)
      residual_coefficients[channel] = normalize_coefficients(residual_norm, channel);
  }
}

// Coefficients {center, scale, shift} of the eval forward from the running statistics.
__global__ void eval_coefficients_kernel(const float* gamma, const float* beta, const float* running_mean,
                                         const float* running_var, double eps, int64_t channels, float4* coefficients) {
  for (int64_t channel = global_thread_index(); channel < channels; channel += global_thread_count()) {
    const double scale = static_cast<double>(gamma[channel]) / sqrt(static_cast<double>(running_var[channel]) + eps);
    coefficients[channel] = make_float4(running_mean[channel], static_cast<float>(scale), beta[channel], 0.0f);
  }
}

// out = (x - center) * scale + shift with each value's channel's coefficients, finished by
// finish_normalized (relu with kRelu; relu of that plus the residual, as R says, with a residual: the
// normalized residual's coefficients are residual_coefficients).
template <typename T, int V, bool kRelu, Residual R>
__global__ void __launch_bounds__(kMapThreads)
    normalize_kernel(const T* x, const T* residual, T* out, const float4* coefficients,
                     const float4* residual_coefficients, MapGeometry g) {
  constexpr bool kResidual = R != Residual::none;
  const int64_t start = global_thread_index();
  TensorWalk walk = start_tensor_walk(start * V, g);
  for (int64_t vector = start; vector < g.vectors; vector += kUnroll<V> * g.stride) {
    float values[kUnroll<V> * V];
    float added[kResidual ? kUnroll<V> * V : 1];
    VectorCoefficients k[kUnroll<V>], residual_k[kUnroll<V>];
#pragma unroll
    for (int u = 0; u < kUnroll<V>; ++u) {
      if (vector + u * g.stride < g.vectors) {
        load_unit<T, V>(x, vector + u * g.stride, values + u * V);
        if constexpr (kResidual) load_unit<T, V>(residual, vector + u * g.stride, added + u * V);
        k[u] = coefficients_at<V>(coefficients, walk, g);
        if constexpr (R == Residual::normalized) residual_k[u] = coefficients_at<V>(residual_coefficients, walk, g);
      }
      advance(walk, g);
    }
#pragma unroll
    for (int u = 0; u < kUnroll<V>; ++u) {
      if (vector + u * g.stride >= g.vectors) continue;
      float* v = values + u * V;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float r = 0.0f;
        if constexpr (kResidual) r = residual_value<T, R>(added[u * V + e], pick(residual_k[u], e));
        v[e] = finish_normalized<T, kRelu, kResidual>(normalize_value(v[e], pick(k[u], e)), r);
      }
      store_unit<T, V>(out, vector + u * g.stride, v);
    }
  }
  if (start != 0) return;
  for (int64_t i = g.vectors * V; i < g.values; ++i) {
    const int64_t channel = channel_of(i, g);
    const float v = normalize_value(static_cast<float>(x[i]), coefficients[channel]);
    float r = 0.0f;
    if constexpr (kResidual)
      r = residual_value<T, R>(static_cast<float>(residual[i]),
                               R == Residual::normalized ? residual_coefficients[channel] : float4{});
    out[i] = T(finish_normalized<T, kRelu, kResidual>(v, r));
  }
}

// Sums of g and of g * (x - mean) over each (channel, split) slab into partials[split * channels + channel]
// (g masked as M says; with kStore the masked g also stored into masked_out).
template <typename T, int V, Mask M, bool kStore>
__global__ void __launch_bounds__(kReduceThreads)
    gradient_sums_kernel(const T* grad_out, const T* relu_output, const T* x, NormalizeInputs forward,
                         SplitGeometry geometry, double2* partials, T* masked_out) {
  static_assert(M == Mask::stored || !kStore, "only a read mask is stored");
  __shared__ double scratch[32];
  const UnitGeometry& g = geometry.units;
  const int64_t begin = blockIdx.y * geometry.chunk_units;
  const int64_t end = std::min(g.batch * g.row_units, begin + geometry.chunk_units);
  for (int64_t channel = blockIdx.x; channel < g.channels; channel += gridDim.x) {
    const float mean = forward.mean[channel];
    float4 mask_k{};
    if constexpr (M == Mask::recomputed) mask_k = normalize_coefficients(forward, channel);
    const int64_t first = begin + threadIdx.x;
    ChannelWalk walk = start_channel_walk(first, channel, g);
    double sum_grad = 0.0, sum_grad_centered = 0.0;
    for (int64_t position = first; position < end; position += kUnroll<V> * kReduceThreads) {
      float grads[kUnroll<V> * V], centered[kUnroll<V> * V];
#pragma unroll
      for (int u = 0; u < kUnroll<V>; ++u) {
        float* gu = grads + u * V;
        float* cu = centered + u * V;
        if (position + u * kReduceThreads < end) {
          unpack_gradient(load_raw_gradient<T, V, M>(grad_out, relu_output, x, walk.offset), gu, cu,
                          [&](int) { return mask_k; });
          if constexpr (kStore) store_unit<T, V>(masked_out, walk.offset, gu);
#pragma unroll
          for (int k = 0; k < V; ++k) cu[k] = gu[k] * (cu[k] - mean);
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) gu[k] = cu[k] = 0.0f;
        }
        advance(walk, geometry.step, g.row_units);
      }
      sum_grad += grouped_sum<kUnroll<V> * V>(grads);
      sum_grad_centered += grouped_sum<kUnroll<V> * V>(centered);
    }
    sum_grad = block_reduce(sum_grad, scratch, SumOp{});
    sum_grad_centered = block_reduce(sum_grad_centered, scratch, SumOp{});
    if (threadIdx.x == 0) partials[blockIdx.y * g.channels + channel] = make_double2(sum_grad, sum_grad_centered);
  }
}

// With xhat = (x - mean) * invstd and g the output gradient, per channel over its M elements:
//   grad_beta = sum g,  grad_gamma = sum g * xhat,
//   grad_x = gamma * invstd * (g - sum g / M - xhat * sum(g * xhat) / M).
// Merges each channel's partial sums, writes (with accumulate: adds into) grad_gamma / grad_beta (either
// may be null) and the coefficients {k, mean_grad, slope, mean} of grad_x = k * (g - mean_grad) - slope *
// (x - mean); with a non-null mask_coefficients also the forward's coefficients (forward.beta given), from
// which the grad_x pass recomputes the relu mask.
__global__ void __launch_bounds__(kFinalizeThreads)
    finalize_backward_kernel(const double2* partials, int64_t splits, int64_t channels, double count,
                             NormalizeInputs forward, float* grad_gamma, float* grad_beta, bool accumulate,
                             float4* coefficients, float4* mask_coefficients) {
  for (int64_t channel = blockIdx.x; channel < channels; channel += gridDim.x) {
    double2 sums = make_double2(0.0, 0.0);
    for (int64_t split = threadIdx.x; split < splits; split += blockDim.x) {
      const double2 partial = partials[split * channels + channel];
      sums.x += partial.x;
      sums.y += partial.y;
    }
    sums = block_merge(
        sums, [](double2 v) { return warp_sum(v); },
        [](double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); });
    if (threadIdx.x != 0) continue;
    const double sum_grad = sums.x, sum_grad_centered = sums.y;
    const double invstd = static_cast<double>(forward.invstd[channel]);
    const float beta_grad = static_cast<float>(sum_grad);
    const float gamma_grad = static_cast<float>(sum_grad_centered * invstd);
    if (grad_beta != nullptr) grad_beta[channel] = accumulate ? grad_beta[channel] + beta_grad : beta_grad;
    if (grad_gamma != nullptr) grad_gamma[channel] = accumulate ? grad_gamma[channel] + gamma_grad : gamma_grad;
    const double k = static_cast<double>(forward.gamma[channel]) * invstd;
    const double projection = sum_grad_centered * invstd * invstd / count;
    coefficients[channel] = make_float4(static_cast<float>(k), static_cast<float>(sum_grad / count),
                                        static_cast<float>(k * projection), forward.mean[channel]);
    if (mask_coefficients != nullptr) mask_coefficients[channel] = normalize_coefficients(forward, channel);
  }
}

// grad_input = k * (g - mean_grad) - slope * (x - mean) with each value's channel's coefficients (g
// masked as M says; Mask::recomputed reads the forward's coefficients from mask_coefficients).
template <typename T, int V, Mask M>
__global__ void __launch_bounds__(kMapThreads)
    grad_input_kernel(const T* grad_out, const T* relu_output, const T* x, T* grad_input, const float4* coefficients,
                      const float4* mask_coefficients, MapGeometry g) {
  const int64_t start = global_thread_index();
  TensorWalk walk = start_tensor_walk(start * V, g);
  for (int64_t vector = start; vector < g.vectors; vector += kUnroll<V> * g.stride) {
    RawGradientUnit<T, V, M> raw[kUnroll<V>];
    VectorCoefficients k[kUnroll<V>], mask_k[kUnroll<V>];
#pragma unroll
    for (int u = 0; u < kUnroll<V>; ++u) {
      if (vector + u * g.stride < g.vectors) {
        raw[u] = load_raw_gradient<T, V, M>(grad_out, relu_output, x, vector + u * g.stride);
        k[u] = coefficients_at<V>(coefficients, walk, g);
        if constexpr (M == Mask::recomputed) mask_k[u] = coefficients_at<V>(mask_coefficients, walk, g);
      }
      advance(walk, g);
    }
#pragma unroll
    for (int u = 0; u < kUnroll<V>; ++u) {
      if (vector + u * g.stride >= g.vectors) continue;
      float grads[V], values[V];
      unpack_gradient(raw[u], grads, values, [&](int e) { return pick(mask_k[u], e); });
#pragma unroll
      for (int e = 0; e < V; ++e) grads[e] = grad_input_value(grads[e], values[e], pick(k[u], e));
      store_unit<T, V>(grad_input, vector + u * g.stride, grads);
    }
  }
  if (start != 0) return;
  for (int64_t i = g.vectors * V; i < g.values; ++i) {
    const int64_t channel = channel_of(i, g);
    float grad = 0.0f, value = 0.0f;
    unpack_gradient(load_raw_gradient<T, 1, M>(grad_out, relu_output, x, i), &grad, &value,
                    [&](int) { return M == Mask::recomputed ? mask_coefficients[channel] : float4{}; });
    grad_input[i] = T(grad_input_value(grad, value, coefficients[channel]));
  }
}

// ---- host side: launch geometry and workspace ----

// Splits per channel of the partials grid; a function of the layout and the device only, so the
// workspace size and the launches agree.
int64_t split_count(const ChannelLayout& layout) {
  if (layout.inner == 1) return row_split_count(layout.batch, layout.channels);
  const int64_t wanted = ceil_div(multiprocessor_count() * kReduceBlocksPerSm, layout.channels);
  const int64_t most = std::max<int64_t>(1, layout.batch * layout.inner / kMinElementsPerBlock);
  return std::clamp<int64_t>(wanted, 1, most);
}

// The workspace: the elementwise pass's per-channel coefficients (at the start: forward_coefficients reads
// the training forward's there) and a second set (the backward's mask coefficients, or the forward's
// normalized residual's; float4 each, first, so every part stays 16-byte aligned), then the partials of
// every (split, channel) block.
struct Workspace {
  float4 *coefficients, *second_coefficients;
  void* partials;
};

Workspace carve(void* workspace, const ChannelLayout& layout) {
  float4* coefficients = static_cast<float4*>(workspace);
  return {coefficients, coefficients + layout.channels, coefficients + 2 * layout.channels};
}

// Values per load of the partials kernels: the widest vector (16 bytes at most) that divides inner, so
// every row starts on a vector boundary, and to whose size every pointer is aligned (a null one is).
template <typename T>
int reduce_width(const ChannelLayout& layout, std::initializer_list<const void*> pointers) {
  for (int width = kVectorWidth<T>; width > 1; width /= 2)
    if (layout.inner % width == 0 && aligned(pointers, width * static_cast<int64_t>(sizeof(T)))) return width;
  return 1;
}

// Values per load of the map passes: 16-byte vectors over the flat tensor whenever the pointers are
// 16-byte aligned and a vector spans at most two rows (inner >= V); whatever inner and the tensor's size
// (a vector may straddle two channels' rows; the last values that fill no vector form a tail).
template <typename T>
int map_width(const ChannelLayout& layout, std::initializer_list<const void*> pointers) {
  return layout.inner >= kVectorWidth<T> && aligned(pointers, 16) ? kVectorWidth<T> : 1;
}

UnitGeometry unit_geometry(const ChannelLayout& layout, int vector_width) {
  return {layout.batch, layout.channels, layout.inner / vector_width};
}

SplitGeometry split_geometry(const ChannelLayout& layout, int vector_width, int64_t splits) {
  const UnitGeometry g = unit_geometry(layout, vector_width);
  const int64_t columns = kReduceThreads % g.row_units, row_stride = g.channels * g.row_units;
  return {g,
          ceil_div(g.batch * g.row_units, splits),
          {columns, (kReduceThreads / g.row_units) * row_stride + columns, row_stride - g.row_units}};
}

dim3 split_grid(const ChannelLayout& layout, int64_t splits) {
  constexpr int64_t kMaxGridX = 0x7fffffff;
  return dim3(static_cast<unsigned>(std::min(layout.channels, kMaxGridX)), static_cast<unsigned>(splits));
}

unsigned finalize_blocks(int64_t channels) { return static_cast<unsigned>(std::min<int64_t>(channels, 1LL << 20)); }

template <int V>
MapGeometry map_geometry(const ChannelLayout& layout, unsigned& blocks) {
  const int64_t values = layout.batch * layout.channels * layout.inner, vectors = values / V;
  blocks = static_cast<unsigned>(
      std::clamp<int64_t>(ceil_div(vectors, kMapThreads * kUnroll<V>), 1, multiprocessor_count() * kMapBlocksPerSm));
  const int64_t stride = static_cast<int64_t>(blocks) * kMapThreads, step = stride * V;
  return {layout.inner, layout.channels, vectors,
          values,       stride,          {step % layout.inner, (step / layout.inner) % layout.channels}};
}

// residual: null, or (with relu) added before it, normalized first with residual_coefficients where those
// are not null.
template <typename T>
void launch_normalize(const T* x, const T* residual, const float4* residual_coefficients, T* out,
                      const float4* coefficients, const ChannelLayout& layout, bool relu) {
  if (layout.inner == 1) {
    launch_row_normalize(x, residual, residual_coefficients, out, coefficients, layout.batch, layout.channels, relu);
    return;
  }
  // A null residual passes the alignment tests.
  with_width<kVectorWidth<T>>(map_width<T>(layout, {x, residual, out}), [&](auto width) {
    constexpr int V = decltype(width)::value;
    unsigned blocks = 0;
    const MapGeometry geometry = map_geometry<V>(layout, blocks);
    if (residual != nullptr && residual_coefficients != nullptr)
      normalize_kernel<T, V, true, Residual::normalized><<<blocks, kMapThreads, 0, current_stream()>>>(
          x, residual, out, coefficients, residual_coefficients, geometry);
    else if (residual != nullptr)
      normalize_kernel<T, V, true, Residual::given>
          <<<blocks, kMapThreads, 0, current_stream()>>>(x, residual, out, coefficients, nullptr, geometry);
    else if (relu)
      normalize_kernel<T, V, true, Residual::none>
          <<<blocks, kMapThreads, 0, current_stream()>>>(x, residual, out, coefficients, nullptr, geometry);
    else
      normalize_kernel<T, V, false, Residual::none>
          <<<blocks, kMapThreads, 0, current_stream()>>>(x, residual, out, coefficients, nullptr, geometry);
  });
}

// The backward's grad_input pass (g masked as M says), from the finalized coefficients.
template <typename T, Mask M>
void launch_backward_passes_input(const T* grad_out, const T* relu_output, const T* x, T* grad_input,
                                  const ChannelLayout& layout, const Workspace& space) {
  const float4* mask_coefficients = M == Mask::recomputed ? space.second_coefficients : nullptr;
  if (layout.inner == 1) {
    launch_row_grad_input(grad_out, relu_output, x, grad_input, space.coefficients, mask_coefficients, layout.batch,
                          layout.channels);
    return;
  }
  with_width<kVectorWidth<T>>(map_width<T>(layout, {grad_out, relu_output, x, grad_input}), [&](auto width) {
    constexpr int V = decltype(width)::value;
    unsigned blocks = 0;
    const MapGeometry geometry = map_geometry<V>(layout, blocks);
    grad_input_kernel<T, V, M><<<blocks, kMapThreads, 0, current_stream()>>>(
        grad_out, relu_output, x, grad_input, space.coefficients, mask_coefficients, geometry);
  });
}

// The backward's partial sums, finalize and grad_input passes for one masking. With kStore the sums pass
// stores the masked gradient into masked_grad, and the grad_input pass reads that instead (unmasked).
template <typename T, Mask M, bool kStore>
void launch_backward_passes(const T* grad_out, const T* relu_output, const T* x, const NormalizeInputs& forward,
                            T* grad_input, float* grad_gamma, float* grad_beta, T* masked_grad, bool accumulate,
                            const ChannelLayout& layout, int64_t splits, const Workspace& space) {
  double2* partials = static_cast<double2*>(space.partials);
  if (layout.inner == 1) {
    launch_row_gradient_sums(grad_out, relu_output, x, forward, layout.batch, layout.channels, splits, partials,
                             masked_grad);
  } else {
    // A null relu_output (or masked_grad) passes the alignment tests.
    with_width<kVectorWidth<T>>(reduce_width<T>(layout, {grad_out, relu_output, x, masked_grad}), [&](auto width) {
      constexpr int V = decltype(width)::value;
      gradient_sums_kernel<T, V, M, kStore><<<split_grid(layout, splits), kReduceThreads, 0, current_stream()>>>(
          grad_out, relu_output, x, forward, split_geometry(layout, V, splits), partials, masked_grad);
    });
  }
  launch_backward_finalize(partials, splits, layout.channels, static_cast<double>(layout.batch * layout.inner), forward,
                           grad_gamma, grad_beta, accumulate, space.coefficients,
                           M == Mask::recomputed ? space.second_coefficients : nullptr);
  if constexpr (kStore)
    launch_backward_passes_input<T, Mask::none>(masked_grad, nullptr, x, grad_input, layout, space);
  else
    launch_backward_passes_input<T, M>(grad_out, relu_output, x, grad_input, layout, space);
}

}  // namespace

namespace norm {
void launch_backward_finalize(const double2* partials, int64_t splits, int64_t channels, double count,
                              const NormalizeInputs& forward, float* grad_gamma, float* grad_beta, bool accumulate,
                              float4* coefficients, float4* mask_coefficients) {
  finalize_backward_kernel<<<finalize_blocks(channels), kFinalizeThreads, 0, current_stream()>>>(
      partials, splits, channels, count, forward, grad_gamma, grad_beta, accumulate, coefficients, mask_coefficients);
}
}  // namespace norm

size_t batch_norm_workspace_bytes(const ChannelLayout& layout) {
  if (layout.channels == 0) return 0;
  const size_t partial_bytes = std::max(sizeof(Moments), sizeof(double2));
  return static_cast<size_t>(layout.channels) *
         (2 * sizeof(float4) + static_cast<size_t>(split_count(layout)) * partial_bytes);
}

template <typename T>
void launch_batch_norm_forward_train(const T* x, const float* gamma, const float* beta, float* running_mean,
                                     float* running_var, double momentum, double eps, bool relu, const T* residual,
                                     const NormalizeInputs* residual_norm, T* out, float* save_mean, float* save_invstd,
                                     const ChannelLayout& layout, void* workspace) {
  if (layout.channels == 0 || layout.batch * layout.inner == 0) return;
  const int64_t splits = split_count(layout);
  const Workspace space = carve(workspace, layout);
  Moments* partials = static_cast<Moments*>(space.partials);
  if (layout.inner == 1) {
    launch_row_moments(x, layout.batch, layout.channels, splits, partials);
  } else {
    with_width<kVectorWidth<T>>(reduce_width<T>(layout, {x}), [&](auto width) {
      constexpr int V = decltype(width)::value;
      moments_kernel<T, V><<<split_grid(layout, splits), kReduceThreads, 0, current_stream()>>>(
          x, split_geometry(layout, V, splits), partials);
    });
  }
  const bool normalized_residual = residual != nullptr && residual_norm != nullptr;
  finalize_forward_kernel<<<finalize_blocks(layout.channels), kFinalizeThreads, 0, current_stream()>>>(
      partials, splits, layout.channels, gamma, beta, running_mean, running_var, momentum, eps, save_mean, save_invstd,
      space.coefficients, normalized_residual ? *residual_norm : NormalizeInputs{},
      normalized_residual ? space.second_coefficients : nullptr);
  if (out != nullptr)
    launch_normalize(x, residual, normalized_residual ? space.second_coefficients : nullptr, out, space.coefficients,
                     layout, relu);
}

template <typename T>
void launch_batch_norm_forward_eval(const T* x, const float* gamma, const float* beta, const float* running_mean,
                                    const float* running_var, double eps, bool relu, const T* residual, T* out,
                                    const ChannelLayout& layout, void* workspace) {
  if (layout.channels == 0 || layout.batch * layout.inner == 0) return;
  const Workspace space = carve(workspace, layout);
  eval_coefficients_kernel<<<blocks_for(layout.channels), kThreadsPerBlock, 0, current_stream()>>>(
      gamma, beta, running_mean, running_var, eps, layout.channels, space.coefficients);
  launch_normalize(x, residual, static_cast<const float4*>(nullptr), out, space.coefficients, layout, relu);
}

template <typename T>
void launch_batch_norm_backward(const T* grad_out, const T* relu_output, const T* x, const float* gamma,
                                const float* beta, const float* save_mean, const float* save_invstd, T* grad_input,
                                float* grad_gamma, float* grad_beta, T* masked_grad, bool accumulate_parameter_grads,
                                const ChannelLayout& layout, void* workspace) {
  if (layout.channels == 0 || layout.batch * layout.inner == 0) return;
  const int64_t splits = split_count(layout);
  const Workspace space = carve(workspace, layout);
  const NormalizeInputs forward{save_mean, save_invstd, gamma, beta};
  const bool add = accumulate_parameter_grads;
  if (relu_output != nullptr && masked_grad != nullptr)
    launch_backward_passes<T, Mask::stored, true>(grad_out, relu_output, x, forward, grad_input, grad_gamma, grad_beta,
                                                  masked_grad, add, layout, splits, space);
  else if (relu_output != nullptr)
    launch_backward_passes<T, Mask::stored, false>(grad_out, relu_output, x, forward, grad_input, grad_gamma, grad_beta,
                                                   nullptr, add, layout, splits, space);
  else if (beta != nullptr)
    launch_backward_passes<T, Mask::recomputed, false>(grad_out, nullptr, x, forward, grad_input, grad_gamma, grad_beta,
                                                       nullptr, add, layout, splits, space);
  else
    launch_backward_passes<T, Mask::none, false>(grad_out, nullptr, x, forward, grad_input, grad_gamma, grad_beta,
                                                 nullptr, add, layout, splits, space);
}

#define OPSNN_INSTANTIATE_BATCH_NORM(T)                                                                                \
  template void launch_batch_norm_forward_train<T>(const T*, const float*, const float*, float*, float*, double,       \
                                                   double, bool, const T*, const NormalizeInputs*, T*, float*, float*, \
                                                   const ChannelLayout&, void*);                                       \
  template void launch_batch_norm_forward_eval<T>(const T*, const float*, const float*, const float*, const float*,    \
                                                  double, bool, const T*, T*, const ChannelLayout&, void*);            \
  template void launch_batch_norm_backward<T>(const T*, const T*, const T*, const float*, const float*, const float*,  \
                                              const float*, T*, float*, float*, T*, bool, const ChannelLayout&,        \
                                              void*);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_BATCH_NORM)

}  // namespace opsnn::cuda
