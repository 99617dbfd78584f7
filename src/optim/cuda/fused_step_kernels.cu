// The fused-step kernels over a device arena. Each pass is one grid-stride kernel over the arena's tiles
// (2048 elements, never crossing a tensor): a block takes tile c, c + gridDim.x, ...; a thread moves 8
// elements per tile with 16-byte loads and stores (two float4 for fp32 arrays, one uint4 of eight
// fp16/bf16), then a scalar tail. The per-element math is rules.h (the CPU kernels' code), compiled with
// --fmad=false, so for the same inputs an fp32 update gives the CPU's bits. Reductions are per chunk in a
// fixed order (double), then per segment in a fixed order: the same sums on every run.
#include <cuda_fp16.h>

#include <climits>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "opsnn/optim/step_logic.h"
#include "optim/cuda/fused_step_kernels.h"

namespace opsnn::optim::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVector = 8;

struct NoCopy {};  // no low-precision parameter copy

// ---- element conversions: hardware conversions for fp16, rules.h's bit manipulation for bf16 ----
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(Half x) { return __half2float(__ushort_as_half(x.bits)); }
__device__ __forceinline__ float to_float(BFloat16 x) { return bf16_bits_to_float(x.bits); }
__device__ __forceinline__ uint16_t to_bits(Half, float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ uint16_t to_bits(BFloat16, float x) { return float_to_bf16_bits(x); }

template <typename T>
__device__ __forceinline__ float load1(const T* p, int64_t i) {
  return to_float(p[i]);
}
template <typename T>
__device__ __forceinline__ float load1_l2(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, float>)
    return __ldcg(p + i);
  else
    return to_float(T::from_bits(__ldcg(reinterpret_cast<const unsigned short*>(p) + i)));
}
template <typename T>
__device__ __forceinline__ void store1(T* p, int64_t i, float x) {
  if constexpr (std::is_same_v<T, float>)
    p[i] = x;
  else
    p[i] = T::from_bits(to_bits(T{}, x));
}

// Eight consecutive elements at a 16-byte aligned address. L2Only: ld.global.cg, bypassing the SM's L1
// (for data other blocks of the same kernel wrote: L1 is not coherent across SMs).
template <bool L2Only = false, typename T>
__device__ __forceinline__ void load8(const T* __restrict__ p, float (&x)[kVector]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4* q = reinterpret_cast<const float4*>(p);
    const float4 a = L2Only ? __ldcg(q) : q[0];
    const float4 b = L2Only ? __ldcg(q + 1) : q[1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  } else {
    const uint4* q = reinterpret_cast<const uint4*>(p);
    const uint4 u = L2Only ? __ldcg(q) : q[0];
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x[2 * k] = to_float(T::from_bits(static_cast<uint16_t>(words[k] & 0xffffu)));
      x[2 * k + 1] = to_float(T::from_bits(static_cast<uint16_t>(words[k] >> 16)));
    }
  }
}

template <typename T>
__device__ __forceinline__ void store8(T* __restrict__ p, const float (&x)[kVector]) {
  if constexpr (std::is_same_v<T, float>) {
    reinterpret_cast<float4*>(p)[0] = make_float4(x[0], x[1], x[2], x[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(x[4], x[5], x[6], x[7]);
  } else {
    uint32_t words[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      words[k] =
          static_cast<uint32_t>(to_bits(T{}, x[2 * k])) | (static_cast<uint32_t>(to_bits(T{}, x[2 * k + 1])) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// Sums N values over the block at once (one pair of barriers for all), each in a fixed order (warp
// shuffles, then the warps' partials); valid in thread 0. shared holds 32 * N doubles.
template <int N>
__device__ void block_sums(double (&values)[N], double* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) values[n] += __shfl_down_sync(0xffffffffu, values[n], offset);
  __syncthreads();  // a previous call may still read shared
  if (lane == 0)
#pragma unroll
    for (int n = 0; n < N; ++n) shared[n * 32 + warp] = values[n];
  __syncthreads();
  if (warp == 0)
#pragma unroll
    for (int n = 0; n < N; ++n) {
      double total = lane < static_cast<int>(blockDim.x >> 5) ? shared[n * 32 + lane] : 0.0;
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_down_sync(0xffffffffu, total, offset);
      values[n] = total;
    }
}

// One value summed over the block as block_sums does; valid in thread 0. shared holds 32 doubles.
__device__ double block_sum(double value, double* shared) {
  double values[1] = {value};
  block_sums(values, shared);
  return values[0];
}

// Marks chunk c when some updated parameter in it is inf/NaN (check = sum of p*0 is then NaN).
__device__ __forceinline__ void report_parameter_check(const FusedBuffers& b, float check, int c) {
  if (__syncthreads_or(!(check == 0.0f)) && threadIdx.x == 0) atomicMin(&b.report->bad_param_chunk, c);
}

// The end of an update pass's chunk c: the parameter check and, with stats, the chunk's g^2 sum.
__device__ __forceinline__ void finish_chunk(const FusedBuffers& b, int c, float check, double sum, int with_stats,
                                             double* shared) {
  report_parameter_check(b, check, c);
  if (with_stats) {
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) b.chunk_sums[0][c] = sum;
  }
}

// A tile's group settings into the step's scalars (lr x multiplier, weight decay); returns how many of
// its elements the 8-wide vector loop covers (the rest is the scalar tail).
template <typename Scalars>
__device__ __forceinline__ int64_t apply_segment(const FusedBuffers& b, const StepScalars& step,
                                                 const ArenaChunk& chunk, Scalars& s) {
  const DeviceSegment segment = b.segments[chunk.segment];
  s.lr = static_cast<float>(step.lr * segment.lr_multiplier);
  s.weight_decay = segment.weight_decay;
  return (chunk.end - chunk.begin) & ~int64_t{kVector - 1};
}

__device__ __forceinline__ AdamScalars adam_scalars(const StepConstants& k, const StepScalars& step) {
  AdamScalars s{};
  s.beta1 = static_cast<float>(k.beta1);
  s.beta2 = static_cast<float>(k.beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - k.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - k.beta2);
  s.inv_bias_correction1 = step.inv_bias_correction1;
  s.inv_bias_correction2 = step.inv_bias_correction2;
  s.eps = k.eps;
  s.eps_relative = k.eps_relative;
  s.decoupled = k.decoupled != 0;
  s.amsgrad = k.amsgrad != 0;
  return s;
}

// ---- pass 1: gradient statistics ----
template <typename G>
__global__ void __launch_bounds__(kThreads) grad_sum_of_squares_kernel(FusedBuffers b) {
  __shared__ double shared[32];
  const G* grads = static_cast<const G*>(b.arena.grads);
  for (int c = blockIdx.x; c < b.chunk_count; c += gridDim.x) {
    const ArenaChunk chunk = b.chunks[c];
    const int64_t count = chunk.end - chunk.begin, vector_count = count & ~int64_t{kVector - 1};
    const G* g = grads + chunk.begin;
    double sum = 0.0;
    for (int64_t i = threadIdx.x * kVector; i < vector_count; i += kThreads * kVector) {
      float x[kVector];
      load8(g + i, x);
#pragma unroll
      for (int j = 0; j < kVector; ++j) sum += static_cast<double>(x[j]) * x[j];
    }
    const int64_t tail = vector_count + threadIdx.x;
    if (tail < count) {
      double x = load1(g, tail);
      sum += x * x;
    }
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) b.chunk_sums[0][c] = sum;
  }
}

__global__ void __launch_bounds__(kThreads) segment_sums_kernel(FusedBuffers b, int arrays) {
  __shared__ double shared[32];
  const DeviceSegment segment = b.segments[blockIdx.x];
  for (int a = 0; a < arrays; ++a) {
    double sum = 0.0;
    for (int i = threadIdx.x; i < segment.chunk_count; i += kThreads) sum += b.chunk_sums[a][segment.first_chunk + i];
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) b.segment_sums[a][blockIdx.x] = sum;
  }
}

// A sparse segment's sum of squares: from the device's coalescing, the host's sums, or 0 (no rows).
__device__ __forceinline__ double sparse_sum_of_squares(const FusedBuffers& b, int s) {
  if (b.sparse_stats != nullptr)
    return b.sparse_stats[s].sum_of_squares != nullptr ? *b.sparse_stats[s].sum_of_squares : 0.0;
  return b.sparse_sums != nullptr ? b.sparse_sums[s] : 0.0;
}

// True when a row-sparse gradient coalesced on the device held an index outside its table.
__device__ bool sparse_index_error(const FusedBuffers& b) {
  if (b.sparse_stats == nullptr) return false;
  for (int s = 0; s < b.segment_count; ++s) {
    const unsigned long long* first_bad = b.sparse_stats[s].first_bad;
    if (b.segments[s].sparse && first_bad != nullptr && *first_bad != kNoBadSparseIndex) return true;
  }
  return false;
}

// Sums the per-segment gradient statistics (segment_sums[0] * inverse_squared for dense segments, the
// host's sums for sparse ones) into segment_grad_sums, their total and the first non-finite segment.
// Every thread of the (single) block must call it; the results are valid in thread 0.
__device__ void gradient_totals(const FusedBuffers& b, double inverse_squared, double& total, int& bad) {
  __shared__ double shared[32];
  __shared__ int bad_shared;
  double sum = 0.0;
  int first_bad = INT_MAX;
  for (int s = threadIdx.x; s < b.segment_count; s += blockDim.x) {
    double value = b.segments[s].sparse ? sparse_sum_of_squares(b, s) : b.segment_sums[0][s] * inverse_squared;
    b.segment_grad_sums[s] = value;
    sum += value;
    if (!is_finite_value(value) && s < first_bad) first_bad = s;
  }
  if (threadIdx.x == 0) bad_shared = INT_MAX;
  __syncthreads();
  if (first_bad != INT_MAX) atomicMin(&bad_shared, first_bad);
  total = block_sum(sum, shared);  // synchronizes, so bad_shared is complete
  bad = bad_shared == INT_MAX ? -1 : bad_shared;
}

// ---- the tiny step ----
__global__ void step_prologue_kernel(FusedBuffers b, StepConstants k, int two_pass) {
  StepState& state = *b.state;
  if (sparse_index_error(b)) {  // nothing of this step happens; the host throws once it reads the index
    if (threadIdx.x == 0) {
      StepScalars out{};
      out.aborted = 1;
      *b.scalars = out;
    }
    return;
  }
  const float inverse_scale = k.scaling ? inverse_loss_scale(state.loss_scale) : 1.0f;
  double total = 0.0;
  int bad = -1;
  if (two_pass) gradient_totals(b, static_cast<double>(inverse_scale) * static_cast<double>(inverse_scale), total, bad);
  if (b.lamb.next_item != nullptr) {  // LAMB's work queue and segment flags start over
    for (int i = threadIdx.x; i < b.segment_count; i += blockDim.x)
      b.lamb.segment_done[i] = b.lamb.segment_ready[i] = 0;
    if (threadIdx.x == 0) *b.lamb.next_item = 0;
  }
  if (threadIdx.x != 0) return;

  state.monitor_flags = 0;
  state.found_inf = 0;
  StepScalars out{};
  out.apply = 1;
  b.report->bad_grad_segment = -1;
  b.report->bad_param_segment = -1;
  b.report->bad_param_chunk = INT_MAX;
  if (two_pass) {
    const double norm = sqrt(total);
    state.clip_factor = gradient_clip_factor(norm, k.max_grad_norm);
    b.report->bad_grad_segment = bad;
    // step_logic.h, as the host's monitor: flags, first non-finite, skip (stop: the host throws after).
    const bool skip = gradient_verdict(state, bad, norm, state.step + state.skipped_steps, k.scaling != 0,
                                       k.on_nonfinite == DeviceNonFiniteAction::warn, k.grad_norm_warn_threshold);
    if (skip) {
      mark_skipped(state);
      out.apply = 0;
    }
  } else {
    state.grad_norm = 0.0f;
    state.clip_factor = 1.0f;
  }
  if (out.apply) {
    const double lr = schedule_lr(k.schedule, state.step);
    out.lr = lr;
    out.first_step = state.step == 0 ? 1 : 0;
    out.inv_bias_correction1 = inverse_bias_correction(state.beta1_power * k.beta1);
    out.inv_bias_correction2 = inverse_bias_correction(state.beta2_power * k.beta2);
    out.grad_multiplier = inverse_scale * state.clip_factor;
    advance_applied_step(state, k.beta1, k.beta2, lr);
  }
  if (k.scaling) update_loss_scale(state, k.growth_factor, k.backoff_factor, k.growth_interval);
  *b.scalars = out;
}

__global__ void step_epilogue_kernel(FusedBuffers b, StepConstants k, int single_pass) {
  if (b.scalars->aborted) return;
  double total = 0.0;
  int bad = -1;
  if (single_pass) gradient_totals(b, 1.0, total, bad);
  if (threadIdx.x != 0) return;
  StepState& state = *b.state;
  const int64_t call_index = state.step + state.skipped_steps - 1;  // the step just made, zero-based
  if (single_pass) {
    b.report->bad_grad_segment = bad;
    // The step was applied already (single pass means warn without scaling): only the flags and record.
    gradient_verdict(state, bad, sqrt(total), call_index, false, true, k.grad_norm_warn_threshold);
  }
  const int chunk = b.report->bad_param_chunk;
  if (chunk != INT_MAX) {
    const int segment = b.chunks[chunk].segment;
    b.report->bad_param_segment = segment;
    mark_nonfinite_parameter(state, call_index, segment);
  }
}

// ---- update passes ----
template <typename G, typename S, typename C>
__global__ void __launch_bounds__(kThreads) adam_kernel(FusedBuffers b, StepConstants k, int with_stats) {
  __shared__ double shared[32];
  const StepScalars step = *b.scalars;
  if (!step.apply) return;
  float* __restrict__ params = b.arena.params;
  const G* __restrict__ grads = static_cast<const G*>(b.arena.grads);
  S* __restrict__ exp_avg = static_cast<S*>(b.arena.states[0]);
  S* __restrict__ exp_avg_sq = static_cast<S*>(b.arena.states[1]);
  S* __restrict__ max_exp_avg_sq = static_cast<S*>(b.arena.states[2]);
  C* __restrict__ copy = static_cast<C*>(b.arena.param_copy);
  AdamScalars s = adam_scalars(k, step);
  const float multiplier = step.grad_multiplier;
  for (int c = blockIdx.x; c < b.chunk_count; c += gridDim.x) {
    const ArenaChunk chunk = b.chunks[c];
    const int64_t vector_count = apply_segment(b, step, chunk, s);
    float check = 0.0f;
    double sum = 0.0;
    for (int64_t i = chunk.begin + threadIdx.x * kVector; i < chunk.begin + vector_count; i += kThreads * kVector) {
      float p[kVector], g[kVector], m[kVector], v[kVector], v_max[kVector];
      load8(params + i, p);
      load8(grads + i, g);
      load8(exp_avg + i, m);
      load8(exp_avg_sq + i, v);
      if (s.amsgrad) load8(max_exp_avg_sq + i, v_max);
#pragma unroll
      for (int j = 0; j < kVector; ++j) {
        if (with_stats) sum += static_cast<double>(g[j]) * g[j];
        if (!s.amsgrad) v_max[j] = 0.0f;
        adam_element(p[j], m[j], v[j], v_max[j], g[j] * multiplier, s);
        check += p[j] * 0.0f;
      }
      store8(params + i, p);
      store8(exp_avg + i, m);
      store8(exp_avg_sq + i, v);
      if (s.amsgrad) store8(max_exp_avg_sq + i, v_max);
      if constexpr (!std::is_same_v<C, NoCopy>) store8(copy + i, p);
    }
    const int64_t i = chunk.begin + vector_count + threadIdx.x;
    if (i < chunk.end) {
      float p = params[i], g = load1(grads, i), m = load1(exp_avg, i), v = load1(exp_avg_sq, i);
      float v_max = s.amsgrad ? load1(max_exp_avg_sq, i) : 0.0f;
      if (with_stats) sum += static_cast<double>(g) * g;
      adam_element(p, m, v, v_max, g * multiplier, s);
      check += p * 0.0f;
      params[i] = p;
      store1(exp_avg, i, m);
      store1(exp_avg_sq, i, v);
      if (s.amsgrad) store1(max_exp_avg_sq, i, v_max);
      if constexpr (!std::is_same_v<C, NoCopy>) store1(copy, i, p);
    }
    finish_chunk(b, c, check, sum, with_stats, shared);
  }
}

template <typename G, typename S, typename C>
__global__ void __launch_bounds__(kThreads) sgd_kernel(FusedBuffers b, StepConstants k, int with_stats) {
  __shared__ double shared[32];
  const StepScalars step = *b.scalars;
  if (!step.apply) return;
  float* __restrict__ params = b.arena.params;
  const G* __restrict__ grads = static_cast<const G*>(b.arena.grads);
  S* __restrict__ buffers = static_cast<S*>(b.arena.states[0]);
  C* __restrict__ copy = static_cast<C*>(b.arena.param_copy);
  SgdScalars s{};
  s.momentum = k.momentum;
  s.dampening = k.dampening;
  s.nesterov = k.nesterov != 0;
  s.first_step = step.first_step != 0;
  const bool read_buffer = s.momentum != 0.0f && !s.first_step;
  const bool write_buffer = s.momentum != 0.0f;
  const float multiplier = step.grad_multiplier;
  for (int c = blockIdx.x; c < b.chunk_count; c += gridDim.x) {
    const ArenaChunk chunk = b.chunks[c];
    const int64_t vector_count = apply_segment(b, step, chunk, s);
    float check = 0.0f;
    double sum = 0.0;
    for (int64_t i = chunk.begin + threadIdx.x * kVector; i < chunk.begin + vector_count; i += kThreads * kVector) {
      float p[kVector], g[kVector], buffer[kVector];
      load8(params + i, p);
      load8(grads + i, g);
      if (read_buffer) load8(buffers + i, buffer);
#pragma unroll
      for (int j = 0; j < kVector; ++j) {
        if (with_stats) sum += static_cast<double>(g[j]) * g[j];
        if (!read_buffer) buffer[j] = 0.0f;
        sgd_element(p[j], buffer[j], g[j] * multiplier, s);
        check += p[j] * 0.0f;
      }
      store8(params + i, p);
      if (write_buffer) store8(buffers + i, buffer);
      if constexpr (!std::is_same_v<C, NoCopy>) store8(copy + i, p);
    }
    const int64_t i = chunk.begin + vector_count + threadIdx.x;
    if (i < chunk.end) {
      float p = params[i], g = load1(grads, i);
      float buffer = read_buffer ? load1(buffers, i) : 0.0f;
      if (with_stats) sum += static_cast<double>(g) * g;
      sgd_element(p, buffer, g * multiplier, s);
      check += p * 0.0f;
      params[i] = p;
      if (write_buffer) store1(buffers, i, buffer);
      if constexpr (!std::is_same_v<C, NoCopy>) store1(copy, i, p);
    }
    finish_chunk(b, c, check, sum, with_stats, shared);
  }
}

// ---- element-wise rules (builtin_list.h): the adam_kernel's loop with the rule's element function ----
template <typename Rule, typename G, typename S, typename C>
__global__ void __launch_bounds__(kThreads) rule_kernel(FusedBuffers b, StepConstants k, int with_stats) {
  constexpr int kStates = Rule::kStates;
  __shared__ double shared[32];
  const StepScalars step = *b.scalars;
  if (!step.apply) return;
  float* __restrict__ params = b.arena.params;
  const G* __restrict__ grads = static_cast<const G*>(b.arena.grads);
  S* states[kStates];
#pragma unroll
  for (int n = 0; n < kStates; ++n) states[n] = static_cast<S*>(b.arena.states[n]);
  C* __restrict__ copy = static_cast<C*>(b.arena.param_copy);
  AdamScalars s = adam_scalars(k, step);
  const float multiplier = step.grad_multiplier;
  for (int c = blockIdx.x; c < b.chunk_count; c += gridDim.x) {
    const ArenaChunk chunk = b.chunks[c];
    const int64_t vector_count = apply_segment(b, step, chunk, s);
    float check = 0.0f;
    double sum = 0.0;
    for (int64_t i = chunk.begin + threadIdx.x * kVector; i < chunk.begin + vector_count; i += kThreads * kVector) {
      float p[kVector], g[kVector], values[kStates][kVector];
      load8(params + i, p);
      load8(grads + i, g);
#pragma unroll
      for (int n = 0; n < kStates; ++n) load8(states[n] + i, values[n]);
#pragma unroll
      for (int j = 0; j < kVector; ++j) {
        if (with_stats) sum += static_cast<double>(g[j]) * g[j];
        float element[kStates];
#pragma unroll
        for (int n = 0; n < kStates; ++n) element[n] = values[n][j];
        Rule::element(p[j], element, g[j] * multiplier, s);
#pragma unroll
        for (int n = 0; n < kStates; ++n) values[n][j] = element[n];
        check += p[j] * 0.0f;
      }
      store8(params + i, p);
#pragma unroll
      for (int n = 0; n < kStates; ++n) store8(states[n] + i, values[n]);
      if constexpr (!std::is_same_v<C, NoCopy>) store8(copy + i, p);
    }
    const int64_t i = chunk.begin + vector_count + threadIdx.x;
    if (i < chunk.end) {
      float p = params[i], g = load1(grads, i), element[kStates];
#pragma unroll
      for (int n = 0; n < kStates; ++n) element[n] = load1(states[n], i);
      if (with_stats) sum += static_cast<double>(g) * g;
      Rule::element(p, element, g * multiplier, s);
      check += p * 0.0f;
      params[i] = p;
#pragma unroll
      for (int n = 0; n < kStates; ++n) store1(states[n], i, element[n]);
      if constexpr (!std::is_same_v<C, NoCopy>) store1(copy, i, p);
    }
    finish_chunk(b, c, check, sum, with_stats, shared);
  }
}

// ---- LAMB: one kernel, phase 1 and phase 2 of each tile as separate work items ----
// Blocks take work items in the order of b.lamb.items (an atomic ticket each): phase 1 of a window of
// segments, then phase 1 of the next window, then phase 2 of the first, ... The block that finishes the
// last phase-1 tile of a segment sums the segment's chunk sums (fixed order, as segment_sums_kernel) and
// publishes its trust ratio; a phase-2 tile waits for that. Phase 2 of a window follows its phase 1
// closely, so the moments it rereads are still in L2 when a window fits there. No deadlock: an item
// only waits for items with smaller tickets, held by running blocks, and phase-1 items never wait.

// Phase 1 of tile c: moments, and the tile's sums of r^2 (chunk_sums[1]), p^2 (chunk_sums[2]) and, with
// stats, g^2 (chunk_sums[0]). Returns (in every thread) whether this was the segment's last phase-1 tile.
template <typename G, typename S>
__device__ bool lamb_phase1_tile(const FusedBuffers& b, const ArenaChunk& chunk, int c, int64_t vector_count,
                                 const AdamScalars& s, float multiplier, int with_stats, double* shared,
                                 int* last_shared) {
  const float* __restrict__ params = b.arena.params;
  const G* __restrict__ grads = static_cast<const G*>(b.arena.grads);
  S* __restrict__ exp_avg = static_cast<S*>(b.arena.states[0]);
  S* __restrict__ exp_avg_sq = static_cast<S*>(b.arena.states[1]);
  double update_sum = 0.0, param_sum = 0.0, grad_sum = 0.0;
  for (int64_t i = chunk.begin + threadIdx.x * kVector; i < chunk.begin + vector_count; i += kThreads * kVector) {
    float p[kVector], g[kVector], m[kVector], v[kVector];
    load8(params + i, p);
    load8(grads + i, g);
    load8(exp_avg + i, m);
    load8(exp_avg_sq + i, v);
#pragma unroll
    for (int j = 0; j < kVector; ++j) {
      if (with_stats) grad_sum += static_cast<double>(g[j]) * g[j];
      const double r = lamb_phase1_element(p[j], m[j], v[j], g[j] * multiplier, s);
      update_sum += r * r;
      param_sum += static_cast<double>(p[j]) * p[j];
    }
    store8(exp_avg + i, m);
    store8(exp_avg_sq + i, v);
  }
  const int64_t i = chunk.begin + vector_count + threadIdx.x;
  if (i < chunk.end) {
    const float p = params[i], g = load1(grads, i);
    float m = load1(exp_avg, i), v = load1(exp_avg_sq, i);
    if (with_stats) grad_sum += static_cast<double>(g) * g;
    const double r = lamb_phase1_element(p, m, v, g * multiplier, s);
    update_sum += r * r;
    param_sum += static_cast<double>(p) * p;
    store1(exp_avg, i, m);
    store1(exp_avg_sq, i, v);
  }
  // The barriers in block_sums order the block's moment stores before thread 0's fence (cumulative)
  // and count, so whoever sees the count complete sees the moments.
  double sums[3] = {update_sum, param_sum, grad_sum};
  block_sums(sums, shared);
  if (threadIdx.x == 0) {
    b.chunk_sums[1][c] = sums[0];
    b.chunk_sums[2][c] = sums[1];
    if (with_stats) b.chunk_sums[0][c] = sums[2];
    __threadfence();
    *last_shared = atomicAdd(&b.lamb.segment_done[chunk.segment], 1) == b.segments[chunk.segment].chunk_count - 1;
  }
  __syncthreads();
  return *last_shared != 0;
}

// The last phase-1 block of segment `segment`: its r^2 and p^2 sums (segment_sums[1], [2]) and trust ratio.
__device__ void lamb_publish_trust(const FusedBuffers& b, const StepConstants& k, int segment, double* shared) {
  __threadfence();
  const DeviceSegment seg = b.segments[segment];
  double sums[2] = {0.0, 0.0};
  for (int i = threadIdx.x; i < seg.chunk_count; i += kThreads)
    for (int a = 0; a < 2; ++a) sums[a] += __ldcg(&b.chunk_sums[1 + a][seg.first_chunk + i]);
  block_sums(sums, shared);
  if (threadIdx.x == 0) {
    b.segment_sums[1][segment] = sums[0];
    b.segment_sums[2][segment] = sums[1];
    b.lamb.trust[segment] = lamb_trust_ratio(static_cast<float>(sqrt(sums[1])), static_cast<float>(sqrt(sums[0])),
                                             k.trust_lower, k.trust_upper);
    __threadfence();
    atomicExch(&b.lamb.segment_ready[segment], 1);
  }
}

// known_segment / known_trust (thread 0's registers): the last segment this block saw ready and its
// ratio, so consecutive tiles of one segment skip the flag check.
template <typename S, typename C>
__device__ void lamb_phase2_tile(const FusedBuffers& b, const ArenaChunk& chunk, int c, int64_t vector_count,
                                 const AdamScalars& s, float* trust_shared, int& known_segment, float& known_trust) {
  float* __restrict__ params = b.arena.params;
  const S* __restrict__ exp_avg = static_cast<const S*>(b.arena.states[0]);
  const S* __restrict__ exp_avg_sq = static_cast<const S*>(b.arena.states[1]);
  C* __restrict__ copy = static_cast<C*>(b.arena.param_copy);
  if (threadIdx.x == 0) {
    if (known_segment != chunk.segment) {
      const volatile int* ready = b.lamb.segment_ready + chunk.segment;
      while (*ready == 0) __nanosleep(64);
      __threadfence();
      known_segment = chunk.segment;
      known_trust = __ldcg(b.lamb.trust + chunk.segment);
    }
    *trust_shared = known_trust;
  }
  __syncthreads();
  const float trust = *trust_shared;
  float check = 0.0f;
  for (int64_t i = chunk.begin + threadIdx.x * kVector; i < chunk.begin + vector_count; i += kThreads * kVector) {
    float p[kVector], m[kVector], v[kVector];
    load8(params + i, p);
    load8<true>(exp_avg + i, m);
    load8<true>(exp_avg_sq + i, v);
#pragma unroll
    for (int j = 0; j < kVector; ++j) {
      lamb_phase2_element(p[j], m[j], v[j], trust, s);
      check += p[j] * 0.0f;
    }
    store8(params + i, p);
    if constexpr (!std::is_same_v<C, NoCopy>) store8(copy + i, p);
  }
  const int64_t i = chunk.begin + vector_count + threadIdx.x;
  if (i < chunk.end) {
    float p = params[i];
    lamb_phase2_element(p, load1_l2(exp_avg, i), load1_l2(exp_avg_sq, i), trust, s);
    check += p * 0.0f;
    params[i] = p;
    if constexpr (!std::is_same_v<C, NoCopy>) store1(copy, i, p);
  }
  report_parameter_check(b, check, c);
}

// Thread 0 takes the next ticket while the block works on the current one (hiding the atomic's latency).
// Still no deadlock: the smallest unfinished ticket is always some block's current item, and it waits
// on nothing unfinished.
template <typename G, typename S, typename C>
__global__ void __launch_bounds__(kThreads) lamb_kernel(FusedBuffers b, StepConstants k, int with_stats) {
  __shared__ double shared[3 * 32];
  __shared__ int tickets[2], last_shared;
  __shared__ float trust_shared;
  const StepScalars step = *b.scalars;
  if (!step.apply) return;
  AdamScalars s = adam_scalars(k, step);
  const float multiplier = step.grad_multiplier;
  int known_segment = -1;
  float known_trust = 1.0f;
  if (threadIdx.x == 0) tickets[0] = atomicAdd(b.lamb.next_item, 1);
  __syncthreads();
  for (int current = 0;; current ^= 1) {
    const int ticket = tickets[current];
    if (ticket >= b.lamb.item_count) break;
    if (threadIdx.x == 0) tickets[current ^ 1] = atomicAdd(b.lamb.next_item, 1);
    const int item = b.lamb.items[ticket];
    const int c = item >> 1;
    const ArenaChunk chunk = b.chunks[c];
    const int64_t vector_count = apply_segment(b, step, chunk, s);
    if ((item & 1) == 0) {
      if (lamb_phase1_tile<G, S>(b, chunk, c, vector_count, s, multiplier, with_stats, shared, &last_shared))
        lamb_publish_trust(b, k, chunk.segment, shared);
    } else {
      lamb_phase2_tile<S, C>(b, chunk, c, vector_count, s, &trust_shared, known_segment, known_trust);
    }
    __syncthreads();  // the next ticket is visible; everyone is done with this one and the scratch
  }
}

// ---- dtype dispatch: grads G, states S, parameter copy C ----
// Pass tags: a type each, so an element-wise rule's pass carries its rule.
namespace pass {
struct Adam {};
struct Sgd {};
struct Lamb {};
struct GradSumOfSquares {};
template <typename R>
struct Elementwise {
  using Rule = R;
};
template <typename P>
inline constexpr bool is_elementwise = false;
template <typename R>
inline constexpr bool is_elementwise<Elementwise<R>> = true;
}  // namespace pass

struct LaunchArgs {
  const FusedBuffers* buffers;
  const StepConstants* constants;
  int with_stats;
  cudaStream_t stream;
};

// Every SM full and no block waiting for a slot: SMs x the kernel's resident blocks per SM (registers
// decide), at most one block per tile.
template <typename Kernel>
int blocks_per_multiprocessor(Kernel kernel) {
  int blocks = 0;
  OPSNN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, 0));
  return blocks > 0 ? blocks : 1;
}

int grid_size(int per_multiprocessor, const FusedBuffers& b) {
  const int64_t grid = static_cast<int64_t>(per_multiprocessor) * b.multiprocessors;
  return static_cast<int>(grid < b.chunk_count ? grid : b.chunk_count);
}

// One instantiation per pass and dtype combination, so each caches its own kernel's occupancy.
template <typename P, typename G, typename S, typename C>
void launch_typed(const LaunchArgs& a) {
  const FusedBuffers& b = *a.buffers;
  if constexpr (pass::is_elementwise<P>) {
    using Rule = typename P::Rule;
    static const int per_sm = blocks_per_multiprocessor(rule_kernel<Rule, G, S, C>);
    rule_kernel<Rule, G, S, C><<<grid_size(per_sm, b), kThreads, 0, a.stream>>>(b, *a.constants, a.with_stats);
  } else if constexpr (std::is_same_v<P, pass::Adam>) {
    static const int per_sm = blocks_per_multiprocessor(adam_kernel<G, S, C>);
    adam_kernel<G, S, C><<<grid_size(per_sm, b), kThreads, 0, a.stream>>>(b, *a.constants, a.with_stats);
  } else if constexpr (std::is_same_v<P, pass::Sgd>) {
    static const int per_sm = blocks_per_multiprocessor(sgd_kernel<G, S, C>);
    sgd_kernel<G, S, C><<<grid_size(per_sm, b), kThreads, 0, a.stream>>>(b, *a.constants, a.with_stats);
  } else if constexpr (std::is_same_v<P, pass::Lamb>) {
    static const int per_sm = blocks_per_multiprocessor(lamb_kernel<G, S, C>);
    lamb_kernel<G, S, C><<<grid_size(per_sm, b), kThreads, 0, a.stream>>>(b, *a.constants, a.with_stats);
  } else {
    static const int per_sm = blocks_per_multiprocessor(grad_sum_of_squares_kernel<G>);
    grad_sum_of_squares_kernel<G><<<grid_size(per_sm, b), kThreads, 0, a.stream>>>(b);
  }
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

[[noreturn]] void unsupported(const char* what, DType dtype) {
  throw TypeError(detail::concat("the fused CUDA step does not support ", what, " of dtype ", dtype_name(dtype),
                                 " (accepted: f32, f16, bf16)"));
}

template <typename P, typename G, typename S>
void dispatch_copy(const LaunchArgs& a) {
  const DeviceArena& arena = a.buffers->arena;
  if (arena.param_copy == nullptr) return launch_typed<P, G, S, NoCopy>(a);
  switch (arena.param_copy_dtype) {
    case DType::f16:
      return launch_typed<P, G, S, Half>(a);
    case DType::bf16:
      return launch_typed<P, G, S, BFloat16>(a);
    default:
      throw TypeError(detail::concat("the low-precision parameter copy must be f16 or bf16, got ",
                                     dtype_name(arena.param_copy_dtype)));
  }
}

template <typename P, typename G>
void dispatch_state(const LaunchArgs& a) {
  switch (a.buffers->arena.state_dtype) {
    case DType::f32:
      return dispatch_copy<P, G, float>(a);
    case DType::f16:
      return dispatch_copy<P, G, Half>(a);
    case DType::bf16:
      return dispatch_copy<P, G, BFloat16>(a);
    default:
      unsupported("optimizer states", a.buffers->arena.state_dtype);
  }
}

template <typename P>
void dispatch(const LaunchArgs& a) {
  switch (a.buffers->arena.grad_dtype) {
    case DType::f32:
      return dispatch_state<P, float>(a);
    case DType::f16:
      return dispatch_state<P, Half>(a);
    case DType::bf16:
      return dispatch_state<P, BFloat16>(a);
    default:
      unsupported("gradients", a.buffers->arena.grad_dtype);
  }
}

}  // namespace

void launch_grad_sum_of_squares(const FusedBuffers& b, cudaStream_t stream) {
  if (b.chunk_count == 0) return;
  dispatch<pass::GradSumOfSquares>(LaunchArgs{&b, nullptr, 0, stream});
}

void launch_segment_sums(const FusedBuffers& b, int arrays, cudaStream_t stream) {
  if (b.chunk_count == 0) return;  // no dense tile: the sums keep the zeros they were allocated with
  segment_sums_kernel<<<b.segment_count, kThreads, 0, stream>>>(b, arrays);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_step_prologue(const FusedBuffers& b, const StepConstants& k, bool two_pass, cudaStream_t stream) {
  step_prologue_kernel<<<1, kThreads, 0, stream>>>(b, k, two_pass ? 1 : 0);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_update(const FusedBuffers& b, const StepConstants& k, bool with_stats, cudaStream_t stream) {
  if (b.chunk_count == 0) return;
  LaunchArgs args{&b, &k, with_stats ? 1 : 0, stream};
  switch (k.rule) {
#define OPSNN_RULE_CASE(name, Rule) \
  case UpdateRule::name:            \
    return dispatch<pass::Elementwise<Rule>>(args);
    OPSNN_ELEMENTWISE_RULES(OPSNN_RULE_CASE)
#undef OPSNN_RULE_CASE
    case UpdateRule::sgd:
      return dispatch<pass::Sgd>(args);
    default:
      return dispatch<pass::Adam>(args);
  }
}

__global__ void lamb_trust_ratios_kernel(FusedBuffers b, StepConstants k) {
  for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < b.segment_count; s += gridDim.x * blockDim.x) {
    b.lamb.trust[s] = lamb_trust_ratio(static_cast<float>(sqrt(b.segment_sums[2][s])),
                                       static_cast<float>(sqrt(b.segment_sums[1][s])), k.trust_lower, k.trust_upper);
    b.lamb.segment_ready[s] = 1;
  }
}

void launch_lamb_trust_ratios(const FusedBuffers& b, const StepConstants& k, cudaStream_t stream) {
  if (b.segment_count == 0) return;
  const int blocks = b.segment_count / 256 + 1;
  lamb_trust_ratios_kernel<<<blocks, 256, 0, stream>>>(b, k);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_lamb(const FusedBuffers& b, const StepConstants& k, bool with_stats, cudaStream_t stream) {
  if (b.chunk_count == 0) return;
  dispatch<pass::Lamb>(LaunchArgs{&b, &k, with_stats ? 1 : 0, stream});
}

void launch_step_epilogue(const FusedBuffers& b, const StepConstants& k, bool single_pass, cudaStream_t stream) {
  step_epilogue_kernel<<<1, kThreads, 0, stream>>>(b, k, single_pass ? 1 : 0);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace opsnn::optim::cuda
