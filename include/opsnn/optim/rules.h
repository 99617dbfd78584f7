// The per-element optimizer update rules, shared by the CPU kernels (OpenMP + SIMD) and the CUDA kernels:
// one source of truth for the math (src/optim/README.md). Header-only, no third-party includes, every
// function OPSNN_HD (__host__ __device__ under nvcc). Gradients reaching these rules are already unscaled
// (1/loss_scale) and clipped; all arithmetic is fp32 whatever the storage type of states and parameters.
// Formulas: src/optim/README.md. Adam: Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization"
// (Alg. 1); AdamW: Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization" (Alg. 2); LAMB: You
// et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes" (Alg. 2);
// SGD/Nesterov: PyTorch's torch.optim.SGD (Sutskever et al. 2013, "On the importance of initialization
// and momentum in deep learning"); Lion: Chen et al. 2023 (below); Adagrad: Duchi et al. 2011 (below).
#pragma once

#include <cmath>

#include "opsnn/core/half.h"
#include "opsnn/core/macros.h"

namespace opsnn::optim {

// ---- storage of states: fp32 math, fp32/fp16/bf16 storage ----
OPSNN_HD float load_value(float x) { return x; }
OPSNN_HD float load_value(Half x) { return half_bits_to_float(x.bits); }
OPSNN_HD float load_value(BFloat16 x) { return bf16_bits_to_float(x.bits); }
OPSNN_HD void store_value(float& out, float x) { out = x; }
OPSNN_HD void store_value(Half& out, float x) { out.bits = float_to_half_bits(x); }
OPSNN_HD void store_value(BFloat16& out, float x) { out.bits = float_to_bf16_bits(x); }

// ---- safe arithmetic ----
// fmaxf(x, floor) for a floor that is never NaN, with fmaxf's result also for a NaN x (the floor). On the
// host it is a compare-select because GCC does not vectorize fmaxf on x86 (no single IEEE max instruction),
// and these rules run in the CPU kernels' SIMD loops.
OPSNN_HD float max_with_floor(float x, float floor) {
#if defined(__CUDA_ARCH__)
  return fmaxf(x, floor);
#else
  return x > floor ? x : floor;
#endif
}
// eps auto-scaling (src/optim/README.md): eps_t = max(eps, |p| * eps_relative); eps_relative = 0 is plain eps.
OPSNN_HD float scaled_eps(float eps, float eps_relative, float param) {
  return max_with_floor(fabsf(param) * eps_relative, eps);
}
// sqrt of a non-negative clamp, plus eps: never below eps, never NaN from a tiny negative rounding error.
OPSNN_HD float safe_denominator(float second_moment_hat, float eps) {
  return sqrtf(max_with_floor(second_moment_hat, 0.0f)) + eps;
}

// ---- scalars of one step, computed once per step from the step state (never pow per element) ----
struct AdamScalars {
  float lr;  // learning rate of this step (schedule and group multiplier applied)
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2;
  float inv_bias_correction1;  // 1 / (1 - beta1^t), from the running product beta1^t
  float inv_bias_correction2;  // 1 / (1 - beta2^t)
  float eps, eps_relative;
  float weight_decay;  // 0 when the parameter's group has decay off
  bool decoupled;      // AdamW: p *= 1 - lr*wd; Adam: g += wd*p (L2)
  bool amsgrad;
};

// One Adam/AdamW element. p is the fp32 master weight; m, v, v_max are fp32 values of the states.
// eps_relative 0 is plain eps (scaled_eps gives eps then for every p, NaN and inf included) and decay 0 is
// none (as in PyTorch, which skips g += 0 * p too): the CPU kernels compile those cases without that
// arithmetic, since every instruction counts in a loop bound by memory.
OPSNN_HD void adam_element(float& p, float& m, float& v, float& v_max, float g, const AdamScalars& s) {
  float eps = s.eps_relative != 0.0f ? scaled_eps(s.eps, s.eps_relative, p) : s.eps;
  if (s.weight_decay != 0.0f) {
    if (s.decoupled) {
      p *= 1.0f - s.lr * s.weight_decay;
    } else {
      g = fmaf(s.weight_decay, p, g);
    }
  }
  m = fmaf(s.beta1, m, s.one_minus_beta1 * g);
  v = fmaf(s.beta2, v, s.one_minus_beta2 * g * g);
  float v_used = v;
  if (s.amsgrad) {
    v_max = max_with_floor(v, v_max);
    v_used = v_max;
  }
  float m_hat = m * s.inv_bias_correction1;
  float v_hat = v_used * s.inv_bias_correction2;
  p -= s.lr * m_hat / safe_denominator(v_hat, eps);
}

struct SgdScalars {
  float lr;
  float momentum;  // 0: plain SGD, no buffer
  float dampening;
  float weight_decay;  // L2: g += wd * p
  bool nesterov;
  bool first_step;  // the momentum buffer starts as g (PyTorch semantics)
};

OPSNN_HD void sgd_element(float& p, float& buffer, float g, const SgdScalars& s) {
  if (s.weight_decay != 0.0f) g = fmaf(s.weight_decay, p, g);  // decay 0 is none, as in PyTorch
  float direction = g;
  if (s.momentum != 0.0f) {
    buffer = s.first_step ? g : fmaf(s.momentum, buffer, (1.0f - s.dampening) * g);
    direction = s.nesterov ? fmaf(s.momentum, buffer, g) : buffer;
  }
  p -= s.lr * direction;
}

// LAMB, phase 1: update the moments and return the raw update r = m_hat/(sqrt(v_hat)+eps) + wd*p; the
// caller accumulates ||r||^2 and ||p||^2 per tensor (segment) for the trust ratio.
OPSNN_HD float lamb_phase1_element(float p, float& m, float& v, float g, const AdamScalars& s) {
  float eps = scaled_eps(s.eps, s.eps_relative, p);
  m = fmaf(s.beta1, m, s.one_minus_beta1 * g);
  v = fmaf(s.beta2, v, s.one_minus_beta2 * g * g);
  float m_hat = m * s.inv_bias_correction1;
  float v_hat = v * s.inv_bias_correction2;
  return m_hat / safe_denominator(v_hat, eps) + s.weight_decay * p;
}

// LAMB trust ratio of one tensor: phi(||p||)/||r|| with phi clamping to [lower, upper]; 1 if a norm is 0.
OPSNN_HD float lamb_trust_ratio(float param_norm, float update_norm, float lower, float upper) {
  if (!(param_norm > 0.0f) || !(update_norm > 0.0f)) return 1.0f;
  float clamped = fminf(fmaxf(param_norm, lower), upper);
  return clamped / update_norm;
}

// LAMB, phase 2: recompute r from the updated moments (no extra buffer) and apply p -= lr * trust * r.
OPSNN_HD void lamb_phase2_element(float& p, float m, float v, float trust, const AdamScalars& s) {
  float eps = scaled_eps(s.eps, s.eps_relative, p);
  float r = m * s.inv_bias_correction1 / safe_denominator(v * s.inv_bias_correction2, eps) + s.weight_decay * p;
  p -= s.lr * trust * r;
}

// ---- element-wise rules run by the generic passes (builtin_list.h's OPSNN_ELEMENTWISE_RULES) ----
// A rule is a type with kStates (its states, in the optimizer's state order) and a static element
// function over the fp32 master weight, the fp32 values of its states, the unscaled clipped gradient and
// the step's scalars (AdamScalars: lr and weight decay per segment, betas, bias corrections).

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Alg. 2): the update is the
// sign of an interpolation of momentum and gradient, with decoupled weight decay folded into the step:
// c = b1*m + (1-b1)*g; p -= lr*(sign(c) + wd*p); m = b2*m + (1-b2)*g. sign(0) = 0; a NaN c stays NaN
// (as torch.sign), so the parameter check sees a NaN gradient that warn mode applies.
struct LionRule {
  static constexpr int kStates = 1;  // exp_avg
  static OPSNN_HD void element(float& p, float (&state)[1], float g, const AdamScalars& s) {
    float& m = state[0];
    const float c = fmaf(s.beta1, m, s.one_minus_beta1 * g);
    // sign(c), with +-0 and NaN passed through as they are, from a bit operation and selects of values at
    // hand: arithmetic in a select (c * 0) made GCC branch and leave the CPU loop scalar (5x slower).
    float sign = copysignf(1.0f, c);
    sign = c == 0.0f ? c : sign;
    sign = c != c ? c : sign;
    p -= s.lr * (sign + s.weight_decay * p);
    m = fmaf(s.beta2, m, s.one_minus_beta2 * g);
  }
};

// Adagrad (Duchi, Hazan & Singer 2011, "Adaptive Subgradient Methods for Online Learning and Stochastic
// Optimization"; diagonal form as torch.optim.Adagrad): one state, the running sum of squared gradients,
// and L2 weight decay folded into the gradient: g += wd*p; sum += g*g; p -= lr*g/(sqrt(sum) + eps). No
// betas, no bias correction. The sum starts at initial_accumulator_value (0 by default, as PyTorch).
struct AdagradRule {
  static constexpr int kStates = 1;  // sum
  static OPSNN_HD void element(float& p, float (&state)[1], float g, const AdamScalars& s) {
    float& sum = state[0];
    g = fmaf(s.weight_decay, p, g);
    sum = fmaf(g, g, sum);
    p -= s.lr * (g / safe_denominator(sum, s.eps));
  }
};

// ---- the order of one reduction, shared by the CPU and CUDA row-sparse coalescing ----
// The sum of squares of a coalesced row-sparse gradient, in double, in three levels of the same "lane
// sum": 32 partial sums, partial l taking items l, l + 32, l + 64, ... in order, then folded as a warp's
// shuffle-down does (p[l] += p[l + 16] for l < 16, then 8, 4, 2, 1; p[0] is the sum). Level one sums a
// row's squared values, level two the row sums of each block of kCoalesceSquaresBlockRows consecutive
// rows, level three the block sums. A fixed shape that a GPU runs one warp per row or block, and the CPU
// repeats, so both get the same bits.
inline constexpr long long kCoalesceSquaresBlockRows = 256;
// A row-sparse gradient row that occurs more often than this in one step (a Zipf head: thousands of times)
// is summed in 32 lanes instead of one chain: lane l sums occurrences l, l + 32, ... in order, starting
// from occurrence l, and the lanes fold as above (in fp32). Rows that occur at most this often are summed
// in occurrence order, as a dense gradient accumulates them.
inline constexpr long long kCoalesceHotRowOccurrences = 32;
inline constexpr int kCoalesceSquaresLanes = 32;
OPSNN_HD double fold_lane_sums(double (&partial)[kCoalesceSquaresLanes]) {
  for (int offset = kCoalesceSquaresLanes / 2; offset > 0; offset /= 2)
    for (int lane = 0; lane < offset; ++lane) partial[lane] += partial[lane + offset];
  return partial[0];
}

// ---- learning-rate schedules, evaluated from the count of applied steps ----
enum class ScheduleKind : int { constant = 0, warmup_cosine = 1, step_decay = 2, linear_decay = 3 };

struct ScheduleParams {
  ScheduleKind kind = ScheduleKind::constant;
  double base_lr = 1e-3;
  double min_lr = 0.0;
  long long warmup_steps = 0;  // linear warmup lr*(s+1)/W for s < W (all schedules)
  long long total_steps = 0;   // cosine and linear decay reach min_lr here
  long long step_size = 1;     // step decay: multiply by gamma every step_size steps after warmup
  double gamma = 0.1;
};

// cos(pi * x) for x in [0, 1] from sin's Taylor series in double (to y^23, error below 1e-19) with plain
// multiplies, adds and divides only: the same bits on the host and the GPU, where libm's cos and CUDA's
// may differ in the last place, so a cosine schedule gives every device the same lr.
OPSNN_HD double cos_pi(double x) {
  const double y = 3.14159265358979323846 * (x - 0.5);  // cos(pi*x) = -sin(y), |y| <= pi/2
  const double y2 = y * y;
  double series = 1.0;
  for (int k = 11; k >= 1; --k) series = 1.0 - y2 / static_cast<double>((2 * k) * (2 * k + 1)) * series;
  return -(y * series);
}

// lr for the step with zero-based index s (s = number of steps applied before it). Goyal et al. 2017
// gradual warmup; cosine as SGDR (Loshchilov & Hutter 2017) without restarts.
OPSNN_HD double schedule_lr(const ScheduleParams& p, long long s) {
  if (s < p.warmup_steps) return p.base_lr * static_cast<double>(s + 1) / static_cast<double>(p.warmup_steps);
  long long after = s - p.warmup_steps;
  long long span = p.total_steps - p.warmup_steps;
  switch (p.kind) {
    case ScheduleKind::constant:
      return p.base_lr;
    case ScheduleKind::warmup_cosine: {
      if (span <= 0 || after >= span) return p.min_lr;
      double progress = static_cast<double>(after) / static_cast<double>(span);
      return p.min_lr + (p.base_lr - p.min_lr) * 0.5 * (1.0 + cos_pi(progress));
    }
    case ScheduleKind::step_decay: {
      // gamma^drops by squaring: O(log drops) products, the same on host and device (a loop of one
      // product per drop ran for seconds at large step counts, in the GPU's one-thread prologue too).
      long long drops = p.step_size > 0 ? after / p.step_size : 0;
      double factor = 1.0, power = p.gamma;
      for (; drops > 0; drops >>= 1) {
        if (drops & 1) factor *= power;
        power *= power;
      }
      const double lr = p.base_lr * factor;
      return lr > p.min_lr ? lr : p.min_lr;
    }
    case ScheduleKind::linear_decay: {
      if (span <= 0 || after >= span) return p.min_lr;
      double progress = static_cast<double>(after) / static_cast<double>(span);
      return p.base_lr + (p.min_lr - p.base_lr) * progress;
    }
  }
  return p.base_lr;
}

}  // namespace opsnn::optim
