// Device and host helpers shared by the batch-norm kernels of norm.cu (channels at axis 1, [batch,
// channels, inner]) and norm_rows.cu (channels innermost, [rows, channels]): vector loads and stores of
// 16-bit and f32 data, the grouped float-then-double sums, Chan's moment merge, the per-value formulas of
// the elementwise passes, and launch helpers. Internal to src/ops/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/multiprocessors.h"
#include "ops/cuda/kernels.h"
#include "opsnn/core/half.h"

namespace opsnn::cuda::norm {

// Elements of T in one 16-byte vector: the widest vector any kernel loads.
template <typename T>
constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));
// Units (vectors of V values, or single values) each thread loads per loop iteration: enough loads in
// flight to cover memory latency, few enough registers for the 8-wide 16-bit vectors.
template <int V>
constexpr int kUnroll = V > 4 ? 2 : (V > 2 ? 4 : 8);

// ---- loads and stores of one unit: a vector of V values (V > 1: 4, 8 or 16 bytes, aligned to its size)
// or a single value (V == 1) ----

// The 32-bit words of unit `unit` of a vector type of kWords words.
template <int kWords>
__device__ __forceinline__ void load_words(const void* data, int64_t unit, uint32_t* words) {
  if constexpr (kWords == 4) {
    const uint4 raw = static_cast<const uint4*>(data)[unit];
    words[0] = raw.x, words[1] = raw.y, words[2] = raw.z, words[3] = raw.w;
  } else if constexpr (kWords == 2) {
    const uint2 raw = static_cast<const uint2*>(data)[unit];
    words[0] = raw.x, words[1] = raw.y;
  } else {
    words[0] = static_cast<const uint32_t*>(data)[unit];
  }
}

template <int kWords>
__device__ __forceinline__ void store_words(void* data, int64_t unit, const uint32_t* words) {
  if constexpr (kWords == 4)
    static_cast<uint4*>(data)[unit] = make_uint4(words[0], words[1], words[2], words[3]);
  else if constexpr (kWords == 2)
    static_cast<uint2*>(data)[unit] = make_uint2(words[0], words[1]);
  else
    static_cast<uint32_t*>(data)[unit] = words[0];
}

// The bits of one unit as loaded, before they become floats: a load in flight then holds only these
// registers (a 16-bit unit of 8 values, 4 words; not the 8 floats it becomes).
template <typename T, int V>
struct RawUnit {
  static constexpr int kWords = V == 1 ? 1 : V * static_cast<int>(sizeof(T)) / 4;
  uint32_t words[kWords];
};

template <typename T, int V>
__device__ __forceinline__ RawUnit<T, V> load_raw(const T* data, int64_t unit) {
  RawUnit<T, V> raw;
  if constexpr (V > 1)
    load_words<RawUnit<T, V>::kWords>(data, unit, raw.words);
  else if constexpr (sizeof(T) == 4)
    raw.words[0] = __float_as_uint(data[unit]);
  else
    raw.words[0] = data[unit].bits;
  return raw;
}

template <typename T, int V>
__device__ __forceinline__ void unpack(const RawUnit<T, V>& raw, float* values) {
  if constexpr (V == 1) {
    if constexpr (sizeof(T) == 4)
      values[0] = __uint_as_float(raw.words[0]);
    else
      values[0] = static_cast<float>(T::from_bits(static_cast<uint16_t>(raw.words[0])));
  } else {
#pragma unroll
    for (int w = 0; w < RawUnit<T, V>::kWords; ++w) {
      if constexpr (sizeof(T) == 4) {
        values[w] = __uint_as_float(raw.words[w]);
      } else {  // two 16-bit values per word, the lower address in the low half
        values[2 * w] = static_cast<float>(T::from_bits(static_cast<uint16_t>(raw.words[w] & 0xffffu)));
        values[2 * w + 1] = static_cast<float>(T::from_bits(static_cast<uint16_t>(raw.words[w] >> 16)));
      }
    }
  }
}

template <typename T, int V>
__device__ __forceinline__ void load_unit(const T* data, int64_t unit, float* values) {
  unpack<T, V>(load_raw<T, V>(data, unit), values);
}

template <typename T, int V>
__device__ __forceinline__ void store_unit(T* data, int64_t unit, const float* values) {
  if constexpr (V == 1) {
    data[unit] = T(values[0]);
  } else {
    constexpr int kWords = V * static_cast<int>(sizeof(T)) / 4;
    uint32_t words[kWords];
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      if constexpr (sizeof(T) == 4) {
        words[w] = __float_as_uint(values[w]);
      } else {
        words[w] =
            static_cast<uint32_t>(T(values[2 * w]).bits) | (static_cast<uint32_t>(T(values[2 * w + 1]).bits) << 16);
      }
    }
    store_words<kWords>(data, unit, words);
  }
}

template <int N>
__device__ __forceinline__ float pairwise_sum(const float* terms) {
  if constexpr (N == 1)
    return terms[0];
  else
    return pairwise_sum<N / 2>(terms) + pairwise_sum<N - N / 2>(terms + N / 2);
}

// Sums N float terms: float sums of groups of at most 8 (short enough to lose nothing that matters at
// f32 precision), added in double.
template <int N>
__device__ __forceinline__ double grouped_sum(const float* terms) {
  constexpr int kGroup = N < 8 ? N : 8;
  double total = 0.0;
#pragma unroll
  for (int g = 0; g < N; g += kGroup) total += static_cast<double>(pairwise_sum<kGroup>(terms + g));
  return total;
}

// Count, mean and sum of squared deviations from the mean of a set of values.
struct Moments {
  double count, mean, m2;
};

// Chan et al.'s pairwise combination: with delta = mean_b - mean_a and n = n_a + n_b,
// mean = mean_a + delta * n_b / n and M2 = M2_a + M2_b + delta^2 * n_a * n_b / n.
__device__ __forceinline__ Moments merge(const Moments& a, const Moments& b) {
  if (b.count == 0.0) return a;
  if (a.count == 0.0) return b;
  const double count = a.count + b.count, delta = b.mean - a.mean;
  return {count, a.mean + delta * (b.count / count), a.m2 + b.m2 + delta * delta * (a.count * b.count / count)};
}

// Where the backward's relu mask comes from, after a fused relu: none (a plain batch norm); `stored`, the
// relu output, read as a third stream; `recomputed`, from x and the forward's coefficients (the same
// arithmetic as the normalizing pass, so the same mask bit for bit, without reading the relu output).
enum class Mask { none, stored, recomputed };

// Zero where the fused relu's output is not positive: relu's backward, applied as the gradient is read.
template <int V>
__device__ __forceinline__ void mask_by_relu(float* grads, const float* relu_output) {
#pragma unroll
  for (int k = 0; k < V; ++k) grads[k] = relu_output[k] > 0.0f ? grads[k] : 0.0f;
}

// What the backward passes read at one unit, as raw bits: the upstream gradient, the relu output (with
// Mask::stored) and x; kStreams tensors.
template <typename T, int V, Mask M>
struct RawGradientUnit {
  static constexpr int kStreams = M == Mask::stored ? 3 : 2;
  RawUnit<T, V> grad, mask, x;
};

template <typename T, int V, Mask M>
__device__ __forceinline__ RawGradientUnit<T, V, M> load_raw_gradient(const T* grad_out, const T* relu_output,
                                                                      const T* x, int64_t unit) {
  RawGradientUnit<T, V, M> raw;
  raw.grad = load_raw<T, V>(grad_out, unit);
  if constexpr (M == Mask::stored) raw.mask = load_raw<T, V>(relu_output, unit);
  raw.x = load_raw<T, V>(x, unit);
  return raw;
}

// out = (x - center) * scale + shift with k = {center, scale, shift, unused}.
__device__ __forceinline__ float normalize_value(float x, const float4& k) { return (x - k.x) * k.y + k.z; }

// The normalizing pass's last step on a normalized value v: with kResidual, relu(T(v) + residual), the
// value rounded to T first as batch norm followed by add_relu stores it; else with kRelu, relu(v) in f32
// (before the rounding to T: the same value as relu of the rounded result, up to the sign of a zero).
// NaN propagates through the relu, as relu's does.
template <typename T, bool kRelu, bool kResidual>
__device__ __forceinline__ float finish_normalized(float v, float residual) {
  if constexpr (kResidual) v = static_cast<float>(T(v)) + residual;
  if constexpr (kRelu || kResidual) v = v < 0.0f ? 0.0f : v;
  return v;
}

// What the normalizing pass adds before its relu: nothing, the residual as given, or the residual
// normalized by another batch norm's coefficients first (a downsampling shortcut's batch norm).
enum class Residual { none, given, normalized };

// The residual value r to add, as R says: with Residual::normalized, another batch norm's output at r with
// its coefficients k, rounded to T as that batch norm's own normalizing pass stores it.
template <typename T, Residual R>
__device__ __forceinline__ float residual_value(float r, const float4& k) {
  if constexpr (R == Residual::normalized) return static_cast<float>(T(normalize_value(r, k)));
  return r;
}

// The forward's coefficients {center, scale, shift, unused} of channel c from the saved statistics, gamma
// and beta (NormalizeInputs, kernels.h): the training forward normalizes with these, so the backward can
// recompute its values and a residual's batch norm can be applied inside another's pass.
__device__ __forceinline__ float4 normalize_coefficients(float mean, float invstd, float gamma, float beta) {
  return make_float4(mean, static_cast<float>(static_cast<double>(gamma) * static_cast<double>(invstd)), beta, 0.0f);
}

__device__ __forceinline__ float4 normalize_coefficients(const NormalizeInputs& in, int64_t channel) {
  return normalize_coefficients(in.mean[channel], in.invstd[channel], in.gamma[channel], in.beta[channel]);
}

// Whether batch_norm_relu's output is positive at a value x of coefficients k: the normalizing pass's
// arithmetic and rounding to T, repeated (a NaN fails, as relu_output > 0 does).
template <typename T>
__device__ __forceinline__ bool relu_output_positive(float x, const float4& k) {
  return static_cast<float>(T(finish_normalized<T, true, false>(normalize_value(x, k), 0.0f))) > 0.0f;
}

// The masked gradient into `grads` and x into `values`; forward(k) gives value k's forward coefficients
// (read with Mask::recomputed only).
template <typename T, int V, Mask M, typename Forward>
__device__ __forceinline__ void unpack_gradient(const RawGradientUnit<T, V, M>& raw, float* grads, float* values,
                                                Forward forward) {
  unpack<T, V>(raw.grad, grads);
  unpack<T, V>(raw.x, values);
  if constexpr (M == Mask::stored) {
    float mask[V];
    unpack<T, V>(raw.mask, mask);
    mask_by_relu<V>(grads, mask);
  } else if constexpr (M == Mask::recomputed) {
#pragma unroll
    for (int k = 0; k < V; ++k) grads[k] = relu_output_positive<T>(values[k], forward(k)) ? grads[k] : 0.0f;
  }
}

// grad_input = k * (g - mean_grad) - slope * (x - mean) with k = {k, mean_grad, slope, mean}.
__device__ __forceinline__ float grad_input_value(float grad, float x, const float4& k) {
  return k.x * (grad - k.y) - k.z * (x - k.w);
}

// ---- host side ----

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// True when every pointer is a multiple of `bytes` (a null one is).
inline bool aligned(std::initializer_list<const void*> pointers, int64_t bytes) {
  return std::all_of(pointers.begin(), pointers.end(),
                     [bytes](const void* p) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; });
}

// Calls launch(std::integral_constant<int, V>) for V == width, one of kWidest, kWidest / 2, ..., 1.
template <int kWidest, typename Launch>
void with_width(int width, Launch&& launch) {
  if constexpr (kWidest == 1)
    launch(std::integral_constant<int, 1>{});
  else if (width == kWidest)
    launch(std::integral_constant<int, kWidest>{});
  else
    with_width<kWidest / 2>(width, launch);
}

// ---- norm.cu's passes that other files build on (norm_pool.cu) ----

// The backward's finalize over per-(split, channel) sums {sum g, sum g * (x - mean)} at
// partials[split * channels + channel], count values per channel: writes (with accumulate: adds into)
// grad_gamma / grad_beta (either may be null) and the grad_input pass's coefficients {k, mean_grad, slope,
// mean} (grad_input_value), and with a non-null mask_coefficients the forward's coefficients (forward.beta
// given) for a recomputed relu mask.
void launch_backward_finalize(const double2* partials, int64_t splits, int64_t channels, double count,
                              const NormalizeInputs& forward, float* grad_gamma, float* grad_beta, bool accumulate,
                              float4* coefficients, float4* mask_coefficients);

// After launch_batch_norm_forward_train, the start of its workspace holds each channel's forward
// coefficients {center, scale, shift, unused} (normalize_value), computed from the saved statistics, gamma
// and beta.
inline const float4* forward_coefficients(const void* workspace) { return static_cast<const float4*>(workspace); }

}  // namespace opsnn::cuda::norm
