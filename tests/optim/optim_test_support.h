// Helpers shared by the optimizer tests: random named parameters, writing gradients into the arena, and
// running an opsnn optimizer side by side with the double-precision reference over many steps.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "opsnn/optim/optimizer.h"
#include "optim/reference_optim.h"
#include "support/catch.h"

namespace opsnn::optim::testing {

inline NamedParameters random_parameters(const std::vector<Shape>& shapes, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, static_cast<float>(scale));
  NamedParameters parameters;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::vector<float> values(static_cast<size_t>(shape_numel(shapes[i])));
    for (float& x : values) x = normal(rng);
    Tensor t = Tensor::from_vector(values, shapes[i]);
    t.set_requires_grad(true);
    parameters.emplace_back("layer" + std::to_string(i) + (shapes[i].size() <= 1 ? ".bias" : ".weight"), t);
  }
  return parameters;
}

inline std::vector<std::vector<double>> values_of(const NamedParameters& parameters) {
  std::vector<std::vector<double>> values;
  for (const auto& entry : parameters) values.push_back(entry.second.to_vector<double>());
  return values;
}

// Gradient patterns over steps: normal noise; mixed: normal with some steps all zero, huge or tiny (per
// tensor); bounded: |g| in [0.5, 1.5] with a random sign (keeps fp16 second moments out of subnormals,
// where one rounding flip changes a state by a large fraction).
enum class GradPattern { normal, mixed, bounded };

inline std::vector<std::vector<double>> make_grads(const NamedParameters& parameters, int step, uint32_t seed,
                                                   GradPattern pattern, double scale = 1.0) {
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(step));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<double>> grads;
  for (size_t t = 0; t < parameters.size(); ++t) {
    double factor = scale;
    if (pattern == GradPattern::mixed) {
      int kind = (step + static_cast<int>(t)) % 10;
      if (kind == 3) factor = 0.0;
      if (kind == 5) factor *= 1e8;    // huge: g^2 still finite in fp32
      if (kind == 7) factor *= 1e-18;  // tiny: g^2 underflows in fp32
    }
    std::vector<double> g(static_cast<size_t>(parameters[t].second.numel()));
    for (double& x : g) {
      float z = normal(rng);
      if (pattern == GradPattern::bounded) z = (z < 0 ? -1.0f : 1.0f) * (0.5f + std::fmod(std::fabs(z), 1.0f));
      x = static_cast<float>(z * factor);  // representable in fp32
    }
    grads.push_back(std::move(g));
  }
  return grads;
}

// Writes the gradients (as fp32) into each parameter's .grad, on whatever device the parameters live.
inline void write_grads(const NamedParameters& parameters, const std::vector<std::vector<double>>& grads) {
  for (size_t t = 0; t < parameters.size(); ++t) {
    Tensor grad = parameters[t].second.grad();
    REQUIRE(grad.defined());
    std::vector<float> values(grads[t].begin(), grads[t].end());
    grad.copy_(Tensor::from_vector(values, grad.shape()));
  }
}

// |actual - expected| <= atol + rtol * scale for every element, scale = max(|expected|, scales[tensor]):
// with scales = the largest magnitude a tensor passed through, this bounds fp32 rounding (ulp of that
// magnitude per step) after cancellation. Reports the worst element.
inline void require_close(const NamedParameters& parameters, const std::vector<std::vector<double>>& expected,
                          double atol, double rtol, const std::string& what, const std::vector<double>& scales = {}) {
  for (size_t t = 0; t < parameters.size(); ++t) {
    std::vector<double> actual = parameters[t].second.to_vector<double>();
    double worst = 0.0;
    size_t worst_index = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      double scale = std::max(std::fabs(expected[t][i]), scales.empty() ? 0.0 : scales[t]);
      double excess = std::fabs(actual[i] - expected[t][i]) - (atol + rtol * scale);
      if (!(excess <= worst)) {
        worst = std::isnan(excess) ? INFINITY : excess;
        worst_index = i;
      }
    }
    INFO(what << ": tensor " << parameters[t].first << " element " << worst_index << " actual " << actual[worst_index]
              << " expected " << expected[t][worst_index]);
    REQUIRE(worst <= 0.0);
  }
}

// The reference configuration matching options for the named optimizer.
inline ReferenceConfig reference_config(const std::string& name, const OptimizerOptions& options) {
  ReferenceConfig c;
  c.name = name;
  c.lr = options.effective_lr(name);
  c.beta1 = options.effective_betas(name).first;
  c.beta2 = options.effective_betas(name).second;
  c.eps = options.effective_eps(optimizer_descriptor(name));
  c.initial_accumulator = options.initial_accumulator_value();
  c.eps_relative = options.eps_relative();
  c.weight_decay = options.effective_weight_decay(name);
  c.amsgrad = options.amsgrad();
  c.momentum = options.momentum();
  c.dampening = options.dampening();
  c.nesterov = options.nesterov();
  c.trust_lower = options.trust_clamp_lower();
  c.trust_upper = options.trust_clamp_upper();
  c.state_dtype = options.state_dtype();
  c.max_grad_norm = options.max_grad_norm();
  const ScheduleParams& s = options.schedule();
  c.kind = static_cast<int>(s.kind);
  c.min_lr = s.min_lr;
  c.gamma = s.gamma;
  c.warmup = s.warmup_steps;
  c.total = s.total_steps;
  c.step_size = s.step_size;
  c.scaling = options.loss_scaling().enabled();
  c.initial_scale = options.loss_scaling().initial_scale();
  c.growth_factor = options.loss_scaling().growth_factor();
  c.backoff_factor = options.loss_scaling().backoff_factor();
  c.growth_interval = options.loss_scaling().growth_interval();
  return c;
}

}  // namespace opsnn::optim::testing
