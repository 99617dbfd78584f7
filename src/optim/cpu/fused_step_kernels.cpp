// CPU fused-step kernels: one pass over the arena per phase, OpenMP across chunks (16K elements, never
// crossing a tensor), SIMD loops within a chunk calling the shared per-element rules (rules.h), templated
// on the storage type of the optimizer states. fp16 states are converted a block at a time (half_blocks.h)
// through L1-resident buffers, since half.h's branchy conversion would stop the update loop vectorizing;
// fp32 and bf16 (a shift) states are converted in the loop itself. Compiled once per CPU variant
// (core/cpu_variants.h): sums run over fixed lanes, so no variant's vector width changes a bit.
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "opsnn/core/error.h"
#include "opsnn/optim/step_kernels.h"
#include "optim/cpu/half_blocks.h"

#if defined(__AVX2__)
#include <immintrin.h>  // the AVX variants' sum of squares (add_squares)
#endif

#ifndef OPSNN_CPU_VARIANT
#error "compiled once per CPU variant (CMakeLists.txt: OPSNN_CPU_VARIANT_SOURCES)"
#endif

namespace opsnn::optim::cpu::OPSNN_CPU_VARIANT {
namespace {

// The loops below take their element bodies as lambdas; GCC does not always inline a lambda called from an
// `omp simd` loop, and a call per element stops the loop vectorising (4x slower), so they are forced inline.
#define OPSNN_ALWAYS_INLINE __attribute__((always_inline))

// fp16 states are staged through stack buffers of this many elements (3 x 2 KB, in L1).
constexpr int64_t kHalfBlock = 512;

template <typename Fn>
void with_state_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f16:
      fn(Half{});
      return;
    case DType::bf16:
      fn(BFloat16{});
      return;
    default:
      throw TypeError(
          detail::concat("optimizer states cannot be stored as ", dtype_name(dtype), " (accepted: f32, f16, bf16)"));
  }
}

template <typename State>
State* state_array(const ArenaView& arena, int index) {
  return static_cast<State*>(arena.states[index]);
}

// Runs body(chunk_index, chunk) over every chunk, in parallel when there are several and enough elements
// to pay for waking the threads (a small model's whole step takes microseconds). Each chunk writes its
// own partials, so the results are the same either way.
constexpr int64_t kParallelStepElements = int64_t{1} << 16;

template <typename Body>
void for_each_chunk(const ArenaView& arena, Body&& body) {
  const bool parallel =
      arena.chunk_count > 1 && arena.chunks[arena.chunk_count - 1].end - arena.chunks[0].begin >= kParallelStepElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t c = 0; c < arena.chunk_count; ++c) body(c, arena.chunks[c]);
}

// Runs fn(staged_states, offset, length) over [0, count): with State = Half the states are converted in
// blocks into fp32 stack buffers (and back when write_back), otherwise passed through in one span.
template <typename State, size_t StateCount, typename Fn>
void staged(const std::array<State*, StateCount>& states, int64_t count, bool write_back, Fn&& fn) {
  if constexpr (std::is_same_v<State, Half>) {
    alignas(64) float buffers[StateCount][kHalfBlock];
    std::array<float*, StateCount> staged_states{};
    for (size_t s = 0; s < StateCount; ++s) staged_states[s] = states[s] ? buffers[s] : nullptr;
    for (int64_t start = 0; start < count; start += kHalfBlock) {
      int64_t length = std::min(kHalfBlock, count - start);
      for (size_t s = 0; s < StateCount; ++s)
        if (states[s]) half_to_float_block(states[s] + start, buffers[s], length);
      fn(staged_states, start, length);
      if (write_back)
        for (size_t s = 0; s < StateCount; ++s)
          if (states[s]) float_to_half_block(buffers[s], states[s] + start, length);
    }
  } else {
    std::array<State*, StateCount> offset_states = states;
    fn(offset_states, int64_t{0}, count);
  }
}

// ---- sums in a fixed order ----
// Lane l of a sum takes elements l, l + Lanes, ...; the lanes are then added pairwise. A vector of any
// width computes the same lanes, so every variant gives the same bits. The gradients' sum of squares runs
// over kGradSumLanes = 32 lanes: four 8-double accumulators, so the adds of one lane do not wait on each
// other's latency (with 8 lanes that sum ran at 2 elements per cycle and cost a 1e8-parameter step about
// 10 ms on 2 cores). LAMB's per-tensor sums keep kSumLanes = 8: three of them share one loop.
constexpr int64_t kSumLanes = 8;
constexpr int64_t kGradSumLanes = 32;

template <int64_t Lanes>
double fold_sum_lanes(const double (&lanes)[Lanes]) {
  static_assert(Lanes >= 2 && (Lanes & (Lanes - 1)) == 0, "a power of two lanes, added pairwise");
  double level[Lanes];
  for (int64_t l = 0; l < Lanes; ++l) level[l] = lanes[l];
  for (int64_t width = Lanes / 2; width >= 1; width /= 2)
    for (int64_t l = 0; l < width; ++l) level[l] = level[2 * l] + level[2 * l + 1];
  return level[0];
}

// Runs element(i, lane) for i in [0, count) with lane = i % kSumLanes, vectorised across the lanes: the loop
// shape of LAMB's sums.
template <typename Element>
OPSNN_ALWAYS_INLINE inline void for_each_lane(int64_t count, Element&& element) {
  int64_t i = 0;
  for (; i + kSumLanes <= count; i += kSumLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kSumLanes; ++l) element(i + l, l);
  }
  for (int64_t l = 0; i + l < count; ++l) element(i + l, l);
}

// One vector of double lanes per variant, for add_squares: load/store lanes, and fold in the squares of
// kWidth floats. The square of a float is exact in double, so g * g + sum and fma(g, g, sum) are the same
// bits: the AVX variants fuse them (one instruction per vector: in a step bound by memory the instruction
// count still matters, since it limits how far ahead of its loads a core runs), the portable one cannot.
#if defined(__AVX512F__)
struct SquareLanes {
  using Vector = __m512d;
  static constexpr int kWidth = 8;
  static void load(Vector& v, const double* lanes) { v = _mm512_loadu_pd(lanes); }
  static void store(double* lanes, const Vector& v) { _mm512_storeu_pd(lanes, v); }
  static void add_squares(Vector& sums, const float* grads) {
    const Vector g = _mm512_cvtps_pd(_mm256_loadu_ps(grads));
    sums = _mm512_fmadd_pd(g, g, sums);
  }
};
#elif defined(__AVX2__) && defined(__FMA__)
struct SquareLanes {
  using Vector = __m256d;
  static constexpr int kWidth = 4;
  static void load(Vector& v, const double* lanes) { v = _mm256_loadu_pd(lanes); }
  static void store(double* lanes, const Vector& v) { _mm256_storeu_pd(lanes, v); }
  static void add_squares(Vector& sums, const float* grads) {
    const Vector g = _mm256_cvtps_pd(_mm_loadu_ps(grads));
    sums = _mm256_fmadd_pd(g, g, sums);
  }
};
#else
struct SquareLanes {
  using Vector = double __attribute__((vector_size(8 * sizeof(double))));
  using Floats = float __attribute__((vector_size(8 * sizeof(float))));
  static constexpr int kWidth = 8;
  static void load(Vector& v, const double* lanes) { std::memcpy(&v, lanes, sizeof v); }
  static void store(double* lanes, const Vector& v) { std::memcpy(lanes, &v, sizeof v); }
  static void add_squares(Vector& sums, const float* grads) {
    Floats values;
    std::memcpy(&values, grads, sizeof values);
    const Vector g = __builtin_convertvector(values, Vector);
    sums += g * g;
  }
};
#endif

// Adds g^2 of grads[0, count) into the kGradSumLanes lanes, lane l taking elements l, l + kGradSumLanes, ...
// The lanes are held in SquareLanes vectors: left to itself the compiler kept the 32 accumulators on the stack.
OPSNN_ALWAYS_INLINE inline void add_squares(const float* __restrict grads, int64_t count, double* lanes) {
  constexpr int kVectors = kGradSumLanes / SquareLanes::kWidth;
  static_assert(kVectors * SquareLanes::kWidth == kGradSumLanes);
  SquareLanes::Vector sums[kVectors];
  for (int k = 0; k < kVectors; ++k) SquareLanes::load(sums[k], lanes + SquareLanes::kWidth * k);
  int64_t i = 0;
  for (; i + kGradSumLanes <= count; i += kGradSumLanes)
    for (int k = 0; k < kVectors; ++k) SquareLanes::add_squares(sums[k], grads + i + SquareLanes::kWidth * k);
  for (int k = 0; k < kVectors; ++k) SquareLanes::store(lanes + SquareLanes::kWidth * k, sums[k]);
  for (int64_t l = 0; i + l < count; ++l) {
    const double g = grads[i + l];
    lanes[l] += g * g;
  }
}

// check + p * 0: stays 0 while every p is finite, NaN from the first that is not. One fused instruction where
// the variant has FMA (same result: the product is 0 or NaN either way); not with clang, whose vectorizer
// (14) takes an fmaf reduction in an `omp simd` loop for no reduction and leaves the loop scalar.
OPSNN_ALWAYS_INLINE inline float add_check(float check, float p) {
#if defined(__FMA__) && !defined(__clang__)
  return fmaf(p, 0.0f, check);
#else
  return check + p * 0.0f;
#endif
}

// Gradients a single-pass step updates before summing their squares from L1 (4 KB).
constexpr int64_t kUpdateBlock = 1024;
// A chunk's sums continue over its update blocks and fp16 blocks: both are whole numbers of lanes.
static_assert(kUpdateBlock % kGradSumLanes == 0 && kHalfBlock % kGradSumLanes == 0);
static_assert(kGradSumLanes % kSumLanes == 0);

// How an update pass reads the gradients. `scaled`: times the step's multiplier (1 / loss scale, clip
// factor); `unit`: as they are, the multiplier being 1 (g * 1 is g, so the multiply is left out: every
// instruction less in these memory-bound loops lets a core run further ahead of its loads); `summing`: as
// they are, also summing their squares (the single-pass step, whose multiplier is always 1).
enum class Pass { scaled, unit, summing };

template <Pass P>
OPSNN_ALWAYS_INLINE inline float gradient(const float* __restrict grads, int64_t i, float multiplier) {
  if constexpr (P == Pass::scaled) return grads[i] * multiplier;
  (void)multiplier;
  return grads[i];
}

// Calls body.template operator()<P>() with the pass that reads the gradients this way (chunk_grad_sums
// non-null: the single-pass step).
template <typename Body>
void with_pass(float grad_multiplier, const double* chunk_grad_sums, Body&& body) {
  if (chunk_grad_sums) {
    OPSNN_CHECK(grad_multiplier == 1.0f, "a single-pass step reads the gradients unscaled");
    body.template operator()<Pass::summing>();
  } else if (grad_multiplier == 1.0f) {
    body.template operator()<Pass::unit>();
  } else {
    body.template operator()<Pass::scaled>();
  }
}

// Calls body.template operator()<Flags...>() with the runtime flags as compile-time ones, so each case's
// loop holds only its own arithmetic.
template <bool... Fixed, typename Body>
void with_flags(Body&& body) {
  body.template operator()<Fixed...>();
}
template <bool... Fixed, typename Body, typename... Flags>
void with_flags(Body&& body, bool flag, Flags... flags) {
  if (flag)
    with_flags<Fixed..., true>(body, flags...);
  else
    with_flags<Fixed..., false>(body, flags...);
}

// The update loop of a span: check = add_check(check, update(i)) over [0, count), update(i) returning the new
// parameter, so check stays 0 while every new parameter is finite.
// In a summing pass the gradients' squares are summed into grad_lanes as grad_sum_of_squares sums them (the
// same lanes, the same bits) in the same pass over memory: the single-pass step. Each block of gradients is
// summed right after its update, from L1; one loop doing both vectorises worse (not at all for bf16 states).
template <Pass P, typename Update>
OPSNN_ALWAYS_INLINE inline float update_loop(const float* __restrict grads, int64_t count, double* grad_lanes,
                                             Update&& update) {
  constexpr bool SumSquares = P == Pass::summing;
  float check = 0.0f;
  for (int64_t start = 0; start < count; start += SumSquares ? kUpdateBlock : count) {
    const int64_t end = SumSquares ? std::min(count, start + kUpdateBlock) : count;
#pragma omp simd reduction(+ : check)
    for (int64_t i = start; i < end; ++i) check = add_check(check, update(i));
    if constexpr (SumSquares) add_squares(grads + start, end - start, grad_lanes);
  }
  (void)grads, (void)grad_lanes;
  return check;
}

// ---- gradient statistics ----
void grad_sum_of_squares(const ArenaView& arena, double* chunk_sums) {
  for_each_chunk(arena, [&](int64_t c, const ArenaChunk& chunk) {
    double lanes[kGradSumLanes] = {};
    add_squares(arena.grads + chunk.begin, chunk.end - chunk.begin, lanes);
    chunk_sums[c] = fold_sum_lanes(lanes);
  });
}

// chunk_checks[c] = the sum of g * 0 over chunk c: 0 while every gradient is finite, NaN from the first that
// is not: the check-first step's first pass, one instruction per vector. The chunk's quarters are read side by
// side: a core reading one stream keeps the hardware prefetcher on one page at a time and reads at a
// fraction of the rate several streams get (1.2-1.3x faster with four on the development machine's Xeon).
void grad_finite_check(const ArenaView& arena, float* chunk_checks) {
  for_each_chunk(arena, [&](int64_t c, const ArenaChunk& chunk) {
    const float* __restrict grads = arena.grads + chunk.begin;
    const int64_t count = chunk.end - chunk.begin, quarter = count / 4;
    const float* __restrict second = grads + quarter;
    const float* __restrict third = grads + 2 * quarter;
    const float* __restrict fourth = grads + 3 * quarter;
    float check0 = 0.0f, check1 = 0.0f, check2 = 0.0f, check3 = 0.0f;
#pragma omp simd reduction(+ : check0, check1, check2, check3)
    for (int64_t i = 0; i < quarter; ++i) {
      check0 = add_check(check0, grads[i]);
      check1 = add_check(check1, second[i]);
      check2 = add_check(check2, third[i]);
      check3 = add_check(check3, fourth[i]);
    }
    for (int64_t i = 4 * quarter; i < count; ++i) check0 = add_check(check0, grads[i]);
    chunk_checks[c] = (check0 + check1) + (check2 + check3);
  });
}

// ---- Adam / AdamW ----
// Compile-time forms of adam_element: Decoupled (AdamW), Amsgrad, EpsScaled (eps_relative != 0) for the
// whole step, Decayed (weight decay != 0) per chunk, as the tensor's group says. The rule skips what a form
// leaves out (rules.h), so every form gives the general loop's bits.
template <typename State, bool Decoupled, bool Amsgrad, bool EpsScaled, bool Decayed, Pass P>
float adam_span(float* __restrict params, const float* __restrict grads, State* __restrict exp_avg,
                State* __restrict exp_avg_sq, State* __restrict max_exp_avg_sq, int64_t count, float grad_multiplier,
                const AdamScalars& scalars, double* grad_lanes) {
  AdamScalars s = scalars;  // constant fields let the compiler drop the untaken branches of adam_element
  s.decoupled = Decoupled;
  s.amsgrad = Amsgrad;
  if constexpr (!EpsScaled) s.eps_relative = 0.0f;
  if constexpr (!Decayed) s.weight_decay = 0.0f;
  return update_loop<P>(grads, count, grad_lanes, [&](int64_t i) OPSNN_ALWAYS_INLINE {
    float p = params[i];
    float m = load_value(exp_avg[i]);
    float v = load_value(exp_avg_sq[i]);
    float v_max = 0.0f;
    if constexpr (Amsgrad) v_max = load_value(max_exp_avg_sq[i]);
    adam_element(p, m, v, v_max, gradient<P>(grads, i, grad_multiplier), s);
    params[i] = p;
    store_value(exp_avg[i], m);
    store_value(exp_avg_sq[i], v);
    if constexpr (Amsgrad) store_value(max_exp_avg_sq[i], v_max);
    return p;
  });
}

template <typename State, bool Decoupled, bool Amsgrad, bool EpsScaled, Pass P>
void adam_update_typed(const ArenaView& arena, const AdamScalars& base, const SegmentStepScalars* segments,
                       float grad_multiplier, float* chunk_param_check, double* chunk_grad_sums) {
  for_each_chunk(arena, [&](int64_t c, const ArenaChunk& chunk) {
    AdamScalars s = base;
    s.lr = segments[chunk.segment].lr;
    s.weight_decay = segments[chunk.segment].weight_decay;
    int64_t count = chunk.end - chunk.begin;
    std::array<State*, 3> states = {state_array<State>(arena, 0) + chunk.begin,
                                    state_array<State>(arena, 1) + chunk.begin,
                                    Amsgrad ? state_array<State>(arena, 2) + chunk.begin : nullptr};
    float* params = arena.params + chunk.begin;
    const float* grads = arena.grads + chunk.begin;
    float check = 0.0f;
    double grad_lanes[kGradSumLanes] = {};
    with_flags(
        [&]<bool Decayed>() {
          staged(states, count, true, [&](const auto& staged_states, int64_t start, int64_t length) {
            using Staged = std::remove_pointer_t<typename std::remove_cvref_t<decltype(staged_states)>::value_type>;
            check += adam_span<Staged, Decoupled, Amsgrad, EpsScaled, Decayed, P>(
                params + start, grads + start, staged_states[0], staged_states[1], staged_states[2], length,
                grad_multiplier, s, grad_lanes);
          });
        },
        s.weight_decay != 0.0f);
    chunk_param_check[c] = check;
    if constexpr (P == Pass::summing) chunk_grad_sums[c] = fold_sum_lanes(grad_lanes);
  });
}

void adam_update(const ArenaView& arena, const AdamScalars& base, const SegmentStepScalars* segments,
                 float grad_multiplier, float* chunk_param_check, double* chunk_grad_sums) {
  with_state_type(arena.state_dtype, [&](auto tag) {
    using State = decltype(tag);
    with_pass(grad_multiplier, chunk_grad_sums, [&]<Pass P>() {
      with_flags(
          [&]<bool Decoupled, bool Amsgrad, bool EpsScaled>() {
            adam_update_typed<State, Decoupled, Amsgrad, EpsScaled, P>(arena, base, segments, grad_multiplier,
                                                                       chunk_param_check, chunk_grad_sums);
          },
          base.decoupled, base.amsgrad, base.eps_relative != 0.0f);
    });
  });
}

// ---- SGD ----
// The forms of sgd_element's momentum, fixed at compile time so each loop holds only its own arithmetic.
// Dampening d scales the gradient by 1 - d, which is 1 (no multiply) unless d is set; PyTorch's first
// step copies g into the buffer whatever d is, and Nesterov needs d = 0 (options.cpp).
enum class SgdMode { plain, first_step, heavy_ball, damped, nesterov_first_step, nesterov };

template <typename State, SgdMode Mode, bool Decayed, Pass P>
float sgd_span(float* __restrict params, const float* __restrict grads, State* __restrict buffers, int64_t count,
               float grad_multiplier, const SgdScalars& scalars, double* grad_lanes) {
  constexpr bool Momentum = Mode != SgdMode::plain;
  constexpr bool FirstStep = Mode == SgdMode::first_step || Mode == SgdMode::nesterov_first_step;
  SgdScalars s = scalars;
  s.nesterov = Mode == SgdMode::nesterov || Mode == SgdMode::nesterov_first_step;
  s.first_step = FirstStep;
  if constexpr (!Momentum) s.momentum = 0.0f;
  if constexpr (Mode != SgdMode::damped) s.dampening = 0.0f;  // (1 - 0) * g folds to g
  if constexpr (!Decayed) s.weight_decay = 0.0f;              // the rule skips decay 0
  return update_loop<P>(grads, count, grad_lanes, [&](int64_t i) OPSNN_ALWAYS_INLINE {
    float p = params[i];
    float buffer = 0.0f;
    if constexpr (Momentum && !FirstStep) buffer = load_value(buffers[i]);
    sgd_element(p, buffer, gradient<P>(grads, i, grad_multiplier), s);
    params[i] = p;
    if constexpr (Momentum) store_value(buffers[i], buffer);
    return p;
  });
}

template <typename State, SgdMode Mode, Pass P>
void sgd_update_typed(const ArenaView& arena, const SgdScalars& base, const SegmentStepScalars* segments,
                      float grad_multiplier, float* chunk_param_check, double* chunk_grad_sums) {
  constexpr bool Momentum = Mode != SgdMode::plain;
  for_each_chunk(arena, [&](int64_t c, const ArenaChunk& chunk) {
    SgdScalars s = base;
    s.lr = segments[chunk.segment].lr;
    s.weight_decay = segments[chunk.segment].weight_decay;
    int64_t count = chunk.end - chunk.begin;
    std::array<State*, 1> states = {Momentum ? state_array<State>(arena, 0) + chunk.begin : nullptr};
    float* params = arena.params + chunk.begin;
    const float* grads = arena.grads + chunk.begin;
    float check = 0.0f;
    double grad_lanes[kGradSumLanes] = {};
    with_flags(
        [&]<bool Decayed>() {
          staged(states, count, Momentum, [&](const auto& staged_states, int64_t start, int64_t length) {
            using Staged = std::remove_pointer_t<typename std::remove_cvref_t<decltype(staged_states)>::value_type>;
            check += sgd_span<Staged, Mode, Decayed, P>(params + start, grads + start, staged_states[0], length,
                                                        grad_multiplier, s, grad_lanes);
          });
        },
        s.weight_decay != 0.0f);
    chunk_param_check[c] = check;
    if constexpr (P == Pass::summing) chunk_grad_sums[c] = fold_sum_lanes(grad_lanes);
  });
}

SgdMode sgd_mode(const SgdScalars& s) {
  if (s.momentum == 0.0f) return SgdMode::plain;
  if (s.nesterov) return s.first_step ? SgdMode::nesterov_first_step : SgdMode::nesterov;
  if (s.first_step) return SgdMode::first_step;
  return s.dampening == 0.0f ? SgdMode::heavy_ball : SgdMode::damped;
}

void sgd_update(const ArenaView& arena, const SgdScalars& base, const SegmentStepScalars* segments,
                float grad_multiplier, float* chunk_param_check, double* chunk_grad_sums) {
  with_state_type(arena.state_dtype, [&](auto tag) {
    using State = decltype(tag);
    with_pass(grad_multiplier, chunk_grad_sums, [&]<Pass P>() {
      auto run = [&]<SgdMode Mode>() {
        sgd_update_typed<State, Mode, P>(arena, base, segments, grad_multiplier, chunk_param_check, chunk_grad_sums);
      };
      switch (sgd_mode(base)) {
        case SgdMode::plain:
          return run.template operator()<SgdMode::plain>();
        case SgdMode::first_step:
          return run.template operator()<SgdMode::first_step>();
        case SgdMode::heavy_ball:
          return run.template operator()<SgdMode::heavy_ball>();
        case SgdMode::damped:
          return run.template operator()<SgdMode::damped>();
        case SgdMode::nesterov_first_step:
          return run.template operator()<SgdMode::nesterov_first_step>();
        case SgdMode::nesterov:
          return run.template operator()<SgdMode::nesterov>();
      }
    });
  });
}

// ---- LAMB ----
template <typename State, Pass P>
void lamb_phase1_span(const float* __restrict params, const float* __restrict grads, State* __restrict exp_avg,
                      State* __restrict exp_avg_sq, int64_t count, float grad_multiplier, const AdamScalars& s,
                      double (&update_lanes)[kSumLanes], double (&param_lanes)[kSumLanes],
                      double (&grad_lanes)[kGradSumLanes]) {
  // In a summing pass the gradients' squares are summed block by block after their update, from L1, in the
  // lanes of grad_sum_of_squares (as update_loop does).
  constexpr bool SumSquares = P == Pass::summing;
  for (int64_t start = 0; start < count; start += SumSquares ? kUpdateBlock : count) {
    const int64_t end = SumSquares ? std::min(count, start + kUpdateBlock) : count;
    for_each_lane(end - start, [&](int64_t j, int64_t lane) OPSNN_ALWAYS_INLINE {
      const int64_t i = start + j;
      float m = load_value(exp_avg[i]);
      float v = load_value(exp_avg_sq[i]);
      const double r = lamb_phase1_element(params[i], m, v, gradient<P>(grads, i, grad_multiplier), s);
      store_value(exp_avg[i], m);
      store_value(exp_avg_sq[i], v);
      const double p = params[i];
      update_lanes[lane] += r * r;
      param_lanes[lane] += p * p;
    });
    if constexpr (SumSquares) add_squares(grads + start, end - start, grad_lanes);
  }
  (void)grad_lanes;
}

void lamb_phase1(const ArenaView& arena, const AdamScalars& base, const SegmentStepScalars* segments,
                 float grad_multiplier, double* chunk_update_sum_squares, double* chunk_param_sum_squares,
                 double* chunk_grad_sums) {
  with_state_type(arena.state_dtype, [&](auto tag) {
    using State = decltype(tag);
    with_pass(grad_multiplier, chunk_grad_sums, [&]<Pass P>() {
      for_each_chunk(arena, [&](int64_t c, const ArenaChunk& chunk) {
        AdamScalars s = base;
        s.lr = segments[chunk.segment].lr;
        s.weight_decay = segments[chunk.segment].weight_decay;
        std::array<State*, 2> states = {state_array<State>(arena, 0) + chunk.begin,
                                        state_array<State>(arena, 1) + chunk.begin};
        const float* params = arena.params + chunk.begin;
        const float* grads = arena.grads + chunk.begin;
        // Lanes over the whole chunk: fp16 blocks and update blocks continue them.
        double update_lanes[kSumLanes] = {}, param_lanes[kSumLanes] = {}, grad_lanes[kGradSumLanes] = {};
        staged(states, chunk.end - chunk.begin, true, [&](const auto& staged_states, int64_t start, int64_t length) {
          using Staged = std::remove_pointer_t<typename std::remove_cvref_t<decltype(staged_states)>::value_type>;
          lamb_phase1_span<Staged, P>(params + start, grads + start, staged_states[0], staged_states[1], length,
                                      grad_multiplier, s, update_lanes, param_lanes, grad_lanes);
        });
        chunk_update_sum_squares[c] = fold_sum_lanes(update_lanes);
        chunk_param_sum_squares[c] = fold_sum_lanes(param_lanes);
        if constexpr (P == Pass::summing) chunk_grad_sums[c] = fold_sum_lanes(grad_lanes);
      });
    });
  });
}

template <typename State>
float lamb_phase2_span(float* __restrict params, const State* __restrict exp_avg, const State* __restrict exp_avg_sq,
                       int64_t count, float trust_ratio, const AdamScalars& s) {
  float check = 0.0f;
#pragma omp simd reduction(+ : check)
  for (int64_t i = 0; i < count; ++i) {
    float p = params[i];
    lamb_phase2_element(p, load_value(exp_avg[i]), load_value(exp_avg_sq[i]), trust_ratio, s);
    params[i] = p;
    check = add_check(check, p);
  }
  return check;
}

void lamb_phase2(const ArenaView& arena, const AdamScalars& base, const SegmentStepScalars* segments,
                 float* chunk_param_check) {
  with_state_type(arena.state_dtype, [&](auto tag) {
    using State = decltype(tag);
    for_each_chunk(arena, [&](int64_t c, const ArenaChunk& chunk) {
      const SegmentStepScalars& segment = segments[chunk.segment];
      AdamScalars s = base;
      s.lr = segment.lr;
      s.weight_decay = segment.weight_decay;
      std::array<State*, 2> states = {state_array<State>(arena, 0) + chunk.begin,
                                      state_array<State>(arena, 1) + chunk.begin};
      float* params = arena.params + chunk.begin;
      float check = 0.0f;
      staged(states, chunk.end - chunk.begin, false, [&](const auto& staged_states, int64_t start, int64_t length) {
        check += lamb_phase2_span(params + start, staged_states[0], staged_states[1], length, segment.trust_ratio, s);
      });
      chunk_param_check[c] = check;
    });
  });
}

// ---- element-wise rules (builtin_list.h): one generic pass, the rule's element function per element ----
// The states as separate __restrict pointers (up to kMaxOptimizerStates; unused ones null): with the
// pointers in an array the compiler cannot rule out aliasing and the fp32 loop ran 7x slower.
template <typename Rule, typename State, Pass P>
float rule_span(float* __restrict params, const float* __restrict grads, State* __restrict s0, State* __restrict s1,
                State* __restrict s2, int64_t count, float grad_multiplier, const AdamScalars& scalars,
                double* grad_lanes) {
  static_assert(Rule::kStates >= 1 && Rule::kStates <= kMaxOptimizerStates, "a rule has 1 to 3 states");
  const AdamScalars s = scalars;  // a local copy: through the reference every store might change it
  return update_loop<P>(grads, count, grad_lanes, [&](int64_t i) OPSNN_ALWAYS_INLINE {
    float p = params[i];
    float values[Rule::kStates];
    values[0] = load_value(s0[i]);
    if constexpr (Rule::kStates > 1) values[1] = load_value(s1[i]);
    if constexpr (Rule::kStates > 2) values[2] = load_value(s2[i]);
    Rule::element(p, values, gradient<P>(grads, i, grad_multiplier), s);
    params[i] = p;
    store_value(s0[i], values[0]);
    if constexpr (Rule::kStates > 1) store_value(s1[i], values[1]);
    if constexpr (Rule::kStates > 2) store_value(s2[i], values[2]);
    return p;
  });
}

template <typename Rule, Pass P>
void rule_update(const ArenaView& arena, const AdamScalars& base, const SegmentStepScalars* segments,
                 float grad_multiplier, float* chunk_param_check, double* chunk_grad_sums) {
  with_state_type(arena.state_dtype, [&](auto tag) {
    using State = decltype(tag);
    for_each_chunk(arena, [&](int64_t c, const ArenaChunk& chunk) {
      AdamScalars s = base;
      s.lr = segments[chunk.segment].lr;
      s.weight_decay = segments[chunk.segment].weight_decay;
      std::array<State*, Rule::kStates> states{};
      for (int k = 0; k < Rule::kStates; ++k) states[k] = state_array<State>(arena, k) + chunk.begin;
      float* params = arena.params + chunk.begin;
      const float* grads = arena.grads + chunk.begin;
      float check = 0.0f;
      double grad_lanes[kGradSumLanes] = {};
      staged(states, chunk.end - chunk.begin, true, [&](const auto& staged_states, int64_t start, int64_t length) {
        // Half: block buffers indexed from 0; other types: one span, start = 0.
        using Staged = std::remove_pointer_t<typename std::remove_cvref_t<decltype(staged_states)>::value_type>;
        auto at = [&](int k) { return k < Rule::kStates ? staged_states[static_cast<size_t>(k)] : nullptr; };
        check += rule_span<Rule, Staged, P>(params + start, grads + start, at(0), at(1), at(2), length, grad_multiplier,
                                            s, grad_lanes);
      });
      chunk_param_check[c] = check;
      if constexpr (P == Pass::summing) chunk_grad_sums[c] = fold_sum_lanes(grad_lanes);
    });
  });
}

void elementwise_update(const ArenaView& arena, UpdateRule rule, const AdamScalars& base,
                        const SegmentStepScalars* segments, float grad_multiplier, float* chunk_param_check,
                        double* chunk_grad_sums) {
  switch (rule) {
#define OPSNN_RULE_CASE(name, Rule)                                                                     \
  case UpdateRule::name:                                                                                \
    return with_pass(grad_multiplier, chunk_grad_sums, [&]<Pass P>() {                                  \
      rule_update<Rule, P>(arena, base, segments, grad_multiplier, chunk_param_check, chunk_grad_sums); \
    });
    OPSNN_ELEMENTWISE_RULES(OPSNN_RULE_CASE)
#undef OPSNN_RULE_CASE
    default:
      break;
  }
  (void)arena, (void)base, (void)segments, (void)grad_multiplier, (void)chunk_param_check, (void)chunk_grad_sums;
  throw Error(detail::concat("no element-wise CPU kernel for update rule ", static_cast<int>(rule)));
}

}  // namespace

const FusedStepKernels& fused_step_kernels() {
  static const FusedStepKernels kernels{grad_sum_of_squares, grad_finite_check, adam_update,       sgd_update,
                                        lamb_phase1,         lamb_phase2,       elementwise_update};
  return kernels;
}

}  // namespace opsnn::optim::cpu::OPSNN_CPU_VARIANT
