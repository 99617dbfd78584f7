// Validation of optimizer options (ConfigError naming the setting, its value and what is accepted), the
// optimizers' default weight decay, the fp16-momentum warning (beta1 <= 0.9) and enum name parsing.
#include "opsnn/optim/options.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>

#include "opsnn/core/error.h"
#include "opsnn/optim/descriptor.h"

namespace opsnn::optim {
namespace {

template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw ConfigError(detail::concat("invalid optimizer setting: ", std::forward<Parts>(parts)...));
}

// "adam and adamw", "sgd": the built-ins with a trait, for messages.
template <typename Trait>
std::string builtins_with(Trait trait) {
  std::vector<std::string> names;
  for (const OptimizerDescriptor* descriptor : builtin_optimizer_descriptors())
    if (trait(*descriptor)) names.push_back(descriptor->name);
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return text;
}

}  // namespace

NonFiniteAction parse_nonfinite_action(std::string_view text) {
  if (text == "warn") return NonFiniteAction::warn;
  if (text == "skip") return NonFiniteAction::skip;
  if (text == "stop") return NonFiniteAction::stop;
  throw ConfigError(detail::concat("unknown monitor action '", text, "' (accepted: warn, skip, stop)"));
}

std::string_view nonfinite_action_name(NonFiniteAction action) {
  switch (action) {
    case NonFiniteAction::warn:
      return "warn";
    case NonFiniteAction::skip:
      return "skip";
    case NonFiniteAction::stop:
      return "stop";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(std::string_view text) {
  if (text == "constant") return ScheduleKind::constant;
  if (text == "warmup_cosine" || text == "cosine") return ScheduleKind::warmup_cosine;
  if (text == "step_decay" || text == "step") return ScheduleKind::step_decay;
  if (text == "linear_decay" || text == "linear") return ScheduleKind::linear_decay;
  throw ConfigError(
      detail::concat("unknown schedule '", text, "' (accepted: constant, warmup_cosine, step_decay, linear_decay)"));
}

std::string_view schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::constant:
      return "constant";
    case ScheduleKind::warmup_cosine:
      return "warmup_cosine";
    case ScheduleKind::step_decay:
      return "step_decay";
    case ScheduleKind::linear_decay:
      return "linear_decay";
  }
  return "?";
}

void LossScalingOptions::validate() const {
  // The scale lives in a float: 1e300 would be inf there (every step skipped, the scale stuck at inf),
  // and a subnormal one backs off to exactly 0.
  if (!(initial_scale_ >= std::numeric_limits<float>::min() && initial_scale_ <= std::numeric_limits<float>::max()))
    fail("loss_scaling.initial_scale = ", initial_scale_, " must be a normal float: in [",
         std::numeric_limits<float>::min(), ", ", std::numeric_limits<float>::max(), "]");
  if (!(growth_factor_ > 1.0) || !std::isfinite(growth_factor_))
    fail("loss_scaling.growth_factor = ", growth_factor_, " must be > 1");
  if (!(backoff_factor_ > 0.0 && backoff_factor_ < 1.0))
    fail("loss_scaling.backoff_factor = ", backoff_factor_, " must be in (0, 1)");
  if (growth_interval_ < 1 || growth_interval_ > INT32_MAX)
    fail("loss_scaling.growth_interval = ", growth_interval_, " must be an integer >= 1");
}

void MonitorOptions::validate() const {
  if (!(grad_norm_warn_threshold_ > 0.0))
    fail("monitor.grad_norm_warn_threshold = ", grad_norm_warn_threshold_, " must be > 0");
}

double OptimizerOptions::effective_lr(std::string_view optimizer) const {
  return effective_lr(optimizer_descriptor(optimizer));
}
double OptimizerOptions::effective_lr(const OptimizerDescriptor& descriptor) const {
  return lr_.value_or(descriptor.default_lr);
}

Betas OptimizerOptions::effective_betas(std::string_view optimizer) const {
  return effective_betas(optimizer_descriptor(optimizer));
}
Betas OptimizerOptions::effective_betas(const OptimizerDescriptor& descriptor) const {
  return betas_.value_or(descriptor.default_betas);
}

double OptimizerOptions::effective_eps(const OptimizerDescriptor& descriptor) const {
  return eps_.value_or(descriptor.default_eps);
}

double OptimizerOptions::effective_weight_decay(std::string_view optimizer) const {
  return effective_weight_decay(optimizer_descriptor(optimizer));
}
double OptimizerOptions::effective_weight_decay(const OptimizerDescriptor& descriptor) const {
  if (fp32_weight_decay_ != 0.0) return fp32_weight_decay_;
  if (weight_decay_) return *weight_decay_;
  return descriptor.default_weight_decay;
}

void OptimizerOptions::validate(std::string_view optimizer) const {
  validate(optimizer_descriptor(optimizer), optimizer);
}

void OptimizerOptions::validate(const OptimizerDescriptor& descriptor, std::string_view optimizer) const {
  const double lr = effective_lr(descriptor);
  if (!(lr >= 0.0) || !std::isfinite(lr)) fail("lr = ", lr, " must be a finite number >= 0");
  auto [beta1, beta2] = effective_betas(descriptor);
  if (!(beta1 >= 0.0 && beta1 < 1.0)) fail("betas[0] = ", beta1, " must be in [0, 1)");
  if (!(beta2 >= 0.0 && beta2 < 1.0)) fail("betas[1] = ", beta2, " must be in [0, 1)");
  const double eps = effective_eps(descriptor);
  if (!(eps > 0.0) || !std::isfinite(eps)) fail("eps = ", eps, " must be a finite number > 0");
  if (!(eps_relative_ >= 0.0) || !std::isfinite(eps_relative_))
    fail("eps_relative = ", eps_relative_, " must be a finite number >= 0");
  if (weight_decay_ && (!(*weight_decay_ >= 0.0) || !std::isfinite(*weight_decay_)))
    fail("weight_decay = ", *weight_decay_, " must be a finite number >= 0");
  if (!(fp32_weight_decay_ >= 0.0) || !std::isfinite(fp32_weight_decay_))
    fail("fp32_weight_decay = ", fp32_weight_decay_, " must be a finite number >= 0");
  if (fp32_weight_decay_ != 0.0 && weight_decay_ && *weight_decay_ != 0.0 && *weight_decay_ != fp32_weight_decay_)
    fail("weight_decay = ", *weight_decay_, " and fp32_weight_decay = ", fp32_weight_decay_,
         " disagree: both name the one weight decay coefficient (decay is always computed in fp32 from the"
         " master weight); set only one");
  if (!(initial_accumulator_value_ >= 0.0) || !std::isfinite(initial_accumulator_value_))
    fail("initial_accumulator_value = ", initial_accumulator_value_, " must be a finite number >= 0");
  if (initial_accumulator_value_ != 0.0 && descriptor.rule != UpdateRule::adagrad)
    fail("initial_accumulator_value = ", initial_accumulator_value_, " applies to adagrad only, not ", optimizer);
  if (!(momentum_ >= 0.0 && momentum_ < 1.0)) fail("momentum = ", momentum_, " must be in [0, 1)");
  if (!(dampening_ >= 0.0 && dampening_ <= 1.0)) fail("dampening = ", dampening_, " must be in [0, 1]");
  auto amsgrad_names = [] { return builtins_with([](const OptimizerDescriptor& d) { return d.supports_amsgrad; }); };
  if (descriptor.has_momentum_option) {
    if (nesterov_ && momentum_ == 0.0) fail("nesterov = true needs momentum > 0 (momentum = 0)");
    if (nesterov_ && dampening_ != 0.0) fail("nesterov = true needs dampening = 0 (dampening = ", dampening_, ")");
  } else if (momentum_ != 0.0 || nesterov_ || dampening_ != 0.0) {
    fail("momentum, dampening and nesterov apply to ",
         builtins_with([](const OptimizerDescriptor& d) { return d.has_momentum_option; }), " only, not ", optimizer,
         " (whose momentum is betas[0])");
  }
  if (amsgrad_ && !descriptor.supports_amsgrad) fail("amsgrad applies to ", amsgrad_names(), ", not ", optimizer);
  if (!(trust_clamp_lower_ >= 0.0) || !(trust_clamp_upper_ > 0.0) || !(trust_clamp_lower_ <= trust_clamp_upper_))
    fail("trust_clamp_lower = ", trust_clamp_lower_, " and trust_clamp_upper = ", trust_clamp_upper_,
         " must satisfy 0 <= lower <= upper, upper > 0");
  if (state_dtype_ != DType::f32 && state_dtype_ != DType::f16 && state_dtype_ != DType::bf16)
    fail("state_dtype = ", dtype_name(state_dtype_), " (accepted: f32, f16, bf16)");
  if (!(max_grad_norm_ >= 0.0) || !std::isfinite(max_grad_norm_))
    fail("max_grad_norm = ", max_grad_norm_, " must be a finite number >= 0 (0 turns clipping off)");

  const ScheduleParams& s = schedule_;
  if (s.warmup_steps < 0) fail("schedule.warmup_steps = ", s.warmup_steps, " must be >= 0");
  if (!(s.min_lr >= 0.0) || !(s.min_lr <= lr)) fail("schedule.min_lr = ", s.min_lr, " must be in [0, lr = ", lr, "]");
  if ((s.kind == ScheduleKind::warmup_cosine || s.kind == ScheduleKind::linear_decay) &&
      s.total_steps <= s.warmup_steps)
    fail("schedule.total_steps = ", s.total_steps, " must exceed schedule.warmup_steps = ", s.warmup_steps, " for ",
         schedule_kind_name(s.kind));
  if (s.kind == ScheduleKind::step_decay && s.step_size < 1)
    fail("schedule.step_size = ", s.step_size, " must be >= 1");
  if (s.kind == ScheduleKind::step_decay && !(s.gamma > 0.0 && s.gamma <= 1.0))
    fail("schedule.gamma = ", s.gamma, " must be in (0, 1]");
  loss_scaling_.validate();
  monitor_.validate();

  // fp16 momentum storage needs beta1 > 0.9 to avoid underflow (src/optim/README.md). Accepted, with a warning.
  if (state_dtype_ == DType::f16 && descriptor.rule == UpdateRule::adagrad) {
    spdlog::warn(
        "{}: fp16 optimizer states hold the running sum of squared gradients, which passes fp16's largest "
        "value (65504) in long runs and then stops the updates; bf16 states (state_dtype: bf16) have fp32's range",
        optimizer);
  } else if (state_dtype_ == DType::f16) {
    const bool uses_betas = !descriptor.has_momentum_option;
    double momentum_factor = uses_betas ? beta1 : momentum_;
    const char* name = uses_betas ? "betas[0]" : "momentum";
    if (momentum_factor <= 0.9 && (uses_betas || momentum_ != 0.0))
      spdlog::warn(
          "{}: fp16 optimizer states (fp16_momentum) with {} = {}: fp16 momentum needs beta1 > 0.9 "
          "to avoid underflow; consider {} = 0.95 or bf16 states (state_dtype: bf16)",
          optimizer, name, momentum_factor, name);
  }
}

}  // namespace opsnn::optim
