// A double-precision reference of the whole optimizer step (src/optim/README.md written out plainly, one tensor
// at a time): loss-scale unscaling, global-norm clipping, skip on inf/NaN, GradScaler update, schedules,
// groups (lr multiplier, decay on/off), SGD/Nesterov, Adam/amsgrad, AdamW, LAMB, Lion, eps auto-scaling, and
// optional rounding of the states to fp16/bf16 after each step (as their storage would).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "opsnn/core/dtype.h"
#include "opsnn/core/half.h"

namespace opsnn::optim::testing {

struct ReferenceConfig {
  std::string name = "adam";  // sgd, adam, adamw, lamb, lion, adagrad
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, eps_relative = 0.0, weight_decay = 0.0;
  bool amsgrad = false;
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  double trust_lower = 1e-3, trust_upper = 10.0;
  DType state_dtype = DType::f32;
  double initial_accumulator = 0.0;  // adagrad
  double max_grad_norm = 0.0;
  // schedule: lr(s) with s = applied steps so far
  int kind = 0;  // 0 constant, 1 warmup_cosine, 2 step_decay, 3 linear_decay
  double min_lr = 0.0, gamma = 0.1;
  long long warmup = 0, total = 0, step_size = 1;
  // loss scaling
  bool scaling = false;
  double initial_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5;
  long long growth_interval = 2000;
};

inline double reference_schedule(const ReferenceConfig& c, long long s) {
  if (s < c.warmup) return c.lr * static_cast<double>(s + 1) / static_cast<double>(c.warmup);
  long long after = s - c.warmup, span = c.total - c.warmup;
  if (c.kind == 1) {
    if (after >= span) return c.min_lr;
    return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(after) / span));
  }
  if (c.kind == 2) return std::max(c.min_lr, c.lr * std::pow(c.gamma, static_cast<double>(after / c.step_size)));
  if (c.kind == 3) {
    if (after >= span) return c.min_lr;
    return c.lr + (c.min_lr - c.lr) * static_cast<double>(after) / span;
  }
  return c.lr;
}

class ReferenceOptimizer {
 public:
  using Tensors = std::vector<std::vector<double>>;

  ReferenceConfig config;
  Tensors params, m, v, v_max;
  std::vector<double> lr_multiplier;
  std::vector<bool> decays;
  long long step = 0, skipped = 0;
  double beta1_power = 1.0, beta2_power = 1.0;
  double scale = 1.0;
  long long tracker = 0;
  double last_grad_norm = 0.0;
  std::vector<double> peak;  // per tensor: the largest |p| seen so far (the scale of fp32 rounding errors)

  ReferenceOptimizer(ReferenceConfig c, Tensors initial, std::vector<double> multipliers, std::vector<bool> decay)
      : config(std::move(c)),
        params(std::move(initial)),
        lr_multiplier(std::move(multipliers)),
        decays(std::move(decay)) {
    for (const auto& p : params) {
      m.emplace_back(p.size(), config.name == "adagrad" ? stored(config.initial_accumulator) : 0.0);
      v.emplace_back(p.size(), 0.0);
      v_max.emplace_back(p.size(), 0.0);
      peak.push_back(0.0);
      for (double x : p) peak.back() = std::max(peak.back(), std::fabs(x));
    }
    scale = config.scaling ? config.initial_scale : 1.0;
  }

  double stored(double x) const {
    if (config.state_dtype == DType::f16) return half_bits_to_float(float_to_half_bits(static_cast<float>(x)));
    if (config.state_dtype == DType::bf16) return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(x)));
    return x;
  }

  // raw_grads: the gradients as backward left them (multiplied by the loss scale). Returns true if applied.
  bool apply(const Tensors& raw_grads) {
    const ReferenceConfig& c = config;
    double inverse = 1.0 / scale;
    double sum = 0.0;
    for (const auto& g : raw_grads)
      for (double x : g) sum += (x * inverse) * (x * inverse);
    last_grad_norm = std::sqrt(sum);
    bool found_inf = !std::isfinite(sum);
    if (found_inf) {
      ++skipped;
      update_scale(true);
      return false;
    }
    double clip = 1.0;
    if (c.max_grad_norm > 0) clip = std::min(1.0, c.max_grad_norm / (last_grad_norm + 1e-6));
    double base_lr = reference_schedule(c, step);
    double b1p = beta1_power * c.beta1, b2p = beta2_power * c.beta2;
    for (size_t t = 0; t < params.size(); ++t) {
      double lr = base_lr * lr_multiplier[t];
      double wd = decays[t] ? c.weight_decay : 0.0;
      std::vector<double>& p = params[t];
      std::vector<double> r(p.size());
      for (size_t i = 0; i < p.size(); ++i) {
        double g = raw_grads[t][i] * inverse * clip;
        if (c.name == "sgd") {
          g += wd * p[i];
          double d = g;
          if (c.momentum != 0) {
            m[t][i] = stored(step == 0 ? g : c.momentum * m[t][i] + (1 - c.dampening) * g);
            d = c.nesterov ? g + c.momentum * m[t][i] : m[t][i];
          }
          p[i] -= lr * d;
          continue;
        }
        if (c.name == "lion") {  // Chen et al. 2023: sign of the interpolation, decoupled decay
          double interpolation = c.beta1 * m[t][i] + (1 - c.beta1) * g;
          double sign = interpolation > 0 ? 1.0 : interpolation < 0 ? -1.0 : 0.0;
          p[i] -= lr * (sign + wd * p[i]);
          m[t][i] = stored(c.beta2 * m[t][i] + (1 - c.beta2) * g);
          continue;
        }
        if (c.name == "adagrad") {  // Duchi et al. 2011, as torch.optim.Adagrad: L2 decay, sum of g^2
          g += wd * p[i];
          m[t][i] = stored(m[t][i] + g * g);
          p[i] -= lr * g / (std::sqrt(m[t][i]) + c.eps);
          continue;
        }
        double eps = std::max(c.eps, std::fabs(p[i]) * c.eps_relative);
        if (c.name == "adam") g += wd * p[i];
        if (c.name == "adamw") p[i] *= 1 - lr * wd;
        double m_new = c.beta1 * m[t][i] + (1 - c.beta1) * g;
        double v_new = c.beta2 * v[t][i] + (1 - c.beta2) * g * g;
        m[t][i] = stored(m_new);
        v[t][i] = stored(v_new);
        double v_used = v_new;
        if (c.amsgrad) {
          v_max[t][i] = stored(std::max(v_max[t][i], v_new));
          v_used = std::max(v_max[t][i], v_new);
        }
        double update = (m_new / (1 - b1p)) / (std::sqrt(v_used / (1 - b2p)) + eps);
        if (c.name == "lamb")
          r[i] = update + wd * p[i];
        else
          p[i] -= lr * update;
      }
      if (c.name == "lamb") {
        double p_norm = 0, r_norm = 0;
        for (size_t i = 0; i < p.size(); ++i) p_norm += p[i] * p[i], r_norm += r[i] * r[i];
        p_norm = std::sqrt(p_norm);
        r_norm = std::sqrt(r_norm);
        double trust = (p_norm > 0 && r_norm > 0) ? std::clamp(p_norm, c.trust_lower, c.trust_upper) / r_norm : 1.0;
        for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * trust * r[i];
      }
      for (double x : p) peak[t] = std::max(peak[t], std::fabs(x));
    }
    ++step;
    beta1_power = b1p;
    beta2_power = b2p;
    update_scale(false);
    return true;
  }

  void update_scale(bool found_inf) {
    if (!config.scaling) return;
    if (found_inf) {
      scale *= config.backoff_factor;
      tracker = 0;
    } else if (++tracker == config.growth_interval) {
      if (std::isfinite(scale * config.growth_factor)) scale *= config.growth_factor;
      tracker = 0;
    }
  }
};

}  // namespace opsnn::optim::testing
