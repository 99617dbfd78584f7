// Optimizer options in the libtorch style (chained setters, getters of the same name). OptimizerOptions
// holds every setting of every optimizer (learning rate, betas, eps, weight decay, momentum, LAMB trust
// clamp, state dtype, clipping, schedule, loss scaling, monitor): what configs and make_optimizer(name, ...)
// hand over, validated against the named optimizer (a ConfigError naming the setting). CommonOptions is
// the part every optimizer shares; each built-in's header adds its own struct over it with only its own
// settings and its own defaults (AdamOptions, AdamWOptions, SgdOptions, LambOptions, LionOptions), which its
// class takes. No third-party includes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "opsnn/core/dtype.h"
#include "opsnn/optim/rules.h"
#include "opsnn/optim/topk.h"

// Declares `name(value)` (chained setter) and `name()` (getter) over a member `name##_`.
#define OPSNN_OPTION(Type, name, default_value) \
 public:                                        \
  auto& name(Type value) {                      \
    name##_ = std::move(value);                 \
    return *this;                               \
  }                                             \
  const Type& name() const { return name##_; }  \
                                                \
 private:                                       \
  Type name##_ = default_value

namespace opsnn::optim {

// Dynamic loss scaling with torch.cuda.amp.GradScaler semantics (Micikevicius et al. 2018, "Mixed Precision
// Training"; src/optim/README.md).
struct LossScalingOptions {
  OPSNN_OPTION(bool, enabled, false);
  OPSNN_OPTION(double, initial_scale, 65536.0);
  OPSNN_OPTION(double, growth_factor, 2.0);
  OPSNN_OPTION(double, backoff_factor, 0.5);
  OPSNN_OPTION(int64_t, growth_interval, 2000);

 public:
  void validate() const;  // ConfigError naming loss_scaling.<setting>
};

// What the monitor does when gradients (before the update) or parameters (after it) hold inf/NaN.
//   warn: log a warning; without loss scaling the step is still applied (PyTorch's behaviour).
//   skip: skip the step (nothing advances); a non-finite parameter can only be reported.
//   stop: throw opsnn::RuntimeFailure naming the step and the tensor.
// With loss scaling on, non-finite gradients always skip the step and back the scale off (GradScaler).
enum class NonFiniteAction : uint8_t { warn, skip, stop };
NonFiniteAction parse_nonfinite_action(std::string_view text);  // ConfigError listing warn, skip, stop
std::string_view nonfinite_action_name(NonFiniteAction action);

struct MonitorOptions {
  OPSNN_OPTION(double, grad_norm_warn_threshold, 1e6);  // warn when the global grad norm exceeds it
  OPSNN_OPTION(NonFiniteAction, on_nonfinite, NonFiniteAction::skip);

 public:
  void validate() const;
};

ScheduleKind parse_schedule_kind(std::string_view text);  // constant, warmup_cosine, step_decay, linear_decay
std::string_view schedule_kind_name(ScheduleKind kind);

using Betas = std::pair<double, double>;
struct OptimizerDescriptor;

struct OptimizerOptions {
  // No lr: the optimizer's default (its descriptor's default_lr, 1e-3 but for lion's 1e-4).
  OptimizerOptions() = default;
  explicit OptimizerOptions(double lr) : lr_(lr) {}

  // eps auto-scaling: eps_t = max(eps, |p| * eps_relative) per element; 0 is plain Adam.
  OPSNN_OPTION(double, eps_relative, 0.0);
  // The weight decay coefficient, computed in fp32 from the fp32 master weight (the config's
  // `settings.fp32_weight_decay: 0.01`). opsnn always decays in fp32 from the master copy, so this is another
  // name for weight_decay kept for that settings block; setting both to different non-zero values is an error.
  OPSNN_OPTION(double, fp32_weight_decay, 0.0);
  OPSNN_OPTION(bool, amsgrad, false);
  OPSNN_OPTION(double, momentum, 0.0);
  OPSNN_OPTION(double, dampening, 0.0);
  OPSNN_OPTION(bool, nesterov, false);
  // LAMB: the trust ratio's phi clamps ||p|| to [lower, upper].
  OPSNN_OPTION(double, trust_clamp_lower, 1e-3);
  OPSNN_OPTION(double, trust_clamp_upper, 10.0);
  // Storage of the optimizer states (momentum, second moment): f32, f16 or bf16; the math is fp32.
  OPSNN_OPTION(DType, state_dtype, DType::f32);
  // Clip gradients by their global L2 norm (torch.nn.utils.clip_grad_norm_); 0 turns clipping off.
  OPSNN_OPTION(double, max_grad_norm, 0.0);
  // By default parameters with dim() <= 1 (biases, BatchNorm gamma/beta) get no weight decay.
  OPSNN_OPTION(bool, decay_1d_params, false);
  // Adagrad: the value its running sum of squared gradients starts at (PyTorch's initial_accumulator_value).
  OPSNN_OPTION(double, initial_accumulator_value, 0.0);
  // Row-sparse gradients on a GPU: sum duplicate rows with float atomics instead of sorting them (faster
  // with many duplicates, but the order of the additions, so the bits, vary from run to run).
  OPSNN_OPTION(bool, row_sparse_atomics, false);
  OPSNN_OPTION(ScheduleParams, schedule, ScheduleParams{});
  OPSNN_OPTION(LossScalingOptions, loss_scaling, LossScalingOptions{});
  OPSNN_OPTION(MonitorOptions, monitor, MonitorOptions{});
  // Top-k sparsification of the dense gradients before each step (Lin et al. 2018, "Deep Gradient
  // Compression"; step_extensions.h); unset: off.
  OPSNN_OPTION(std::optional<TopKOptions>, sparsification, std::nullopt);

 public:
  // Base learning rate (the schedule's base; ScheduleParams::base_lr is ignored in favour of it). Unset:
  // the getter gives 1e-3, the optimizer uses effective_lr (its own default).
  OptimizerOptions& lr(double value) {
    lr_ = value;
    return *this;
  }
  double lr() const { return lr_.value_or(1e-3); }
  // Unset: the getter gives Adam's (0.9, 0.999), the optimizer uses effective_betas (lion: (0.9, 0.99)).
  OptimizerOptions& betas(Betas value) {
    betas_ = value;
    return *this;
  }
  Betas betas() const { return betas_.value_or(Betas(0.9, 0.999)); }
  // The denominator's eps. Unset: the getter gives 1e-8, the optimizer uses effective_eps (adagrad: 1e-10,
  // PyTorch's).
  OptimizerOptions& eps(double value) {
    eps_ = value;
    return *this;
  }
  double eps() const { return eps_.value_or(1e-8); }
  // Unset: the optimizer's default (1e-2 for adamw as in PyTorch, 0 otherwise).
  OptimizerOptions& weight_decay(double value) {
    weight_decay_ = value;
    return *this;
  }
  const std::optional<double>& weight_decay() const { return weight_decay_; }
  // The settings block's `fp16_momentum: true`: optimizer states stored as fp16.
  OptimizerOptions& fp16_momentum(bool value) {
    state_dtype_ = value ? DType::f16 : DType::f32;
    return *this;
  }

  // What the named optimizer uses: the value set, else its descriptor's default (descriptor.h). The
  // weight decay is fp32_weight_decay or weight_decay or the default.
  double effective_lr(std::string_view optimizer) const;
  Betas effective_betas(std::string_view optimizer) const;
  double effective_weight_decay(std::string_view optimizer) const;
  double effective_eps(const OptimizerDescriptor& descriptor) const;
  double effective_lr(const OptimizerDescriptor& descriptor) const;
  Betas effective_betas(const OptimizerDescriptor& descriptor) const;
  double effective_weight_decay(const OptimizerDescriptor& descriptor) const;
  // Throws ConfigError naming the setting, its value and what is accepted; logs (spdlog) a
  // warning for fp16 states with beta1 (or SGD momentum) <= 0.9 (fp16 momentum wants beta1 > 0.9).
  void validate(std::string_view optimizer) const;
  // The same for an optimizer's own descriptor (named `optimizer` in the messages).
  void validate(const OptimizerDescriptor& descriptor, std::string_view optimizer) const;

 private:
  std::optional<double> lr_;
  std::optional<Betas> betas_;
  std::optional<double> eps_;
  std::optional<double> weight_decay_;
};

// The settings every optimizer shares, for the per-optimizer options structs: Self is the struct (its
// setters chain). Each struct wraps an OptimizerOptions with its optimizer's defaults filled in, so the
// getters give the values the optimizer uses; options() hands it to the optimizer.
template <typename Self>
class CommonOptions {
 public:
#define OPSNN_FORWARD_OPTION(Type, name) \
  Self& name(Type value) {               \
    options_.name(std::move(value));     \
    return static_cast<Self&>(*this);    \
  }                                      \
  decltype(auto) name() const { return options_.name(); }
  OPSNN_FORWARD_OPTION(double, lr)
  OPSNN_FORWARD_OPTION(DType, state_dtype)
  OPSNN_FORWARD_OPTION(double, max_grad_norm)
  OPSNN_FORWARD_OPTION(bool, decay_1d_params)
  OPSNN_FORWARD_OPTION(ScheduleParams, schedule)
  OPSNN_FORWARD_OPTION(LossScalingOptions, loss_scaling)
  OPSNN_FORWARD_OPTION(MonitorOptions, monitor)
  OPSNN_FORWARD_OPTION(std::optional<TopKOptions>, sparsification)
  Self& weight_decay(double value) {
    options_.weight_decay(value);
    return static_cast<Self&>(*this);
  }
  double weight_decay() const { return options_.weight_decay().value_or(0.0); }

  const OptimizerOptions& options() const { return options_; }

 protected:
  CommonOptions(double lr, double weight_decay) { options_.lr(lr).weight_decay(weight_decay); }
  OptimizerOptions options_;
};

// Adam-style moments: betas, eps, eps auto-scaling (AdamOptions, AdamWOptions, LambOptions).
template <typename Self>
class MomentOptions : public CommonOptions<Self> {
 public:
  OPSNN_FORWARD_OPTION(Betas, betas)
  OPSNN_FORWARD_OPTION(double, eps)
  OPSNN_FORWARD_OPTION(double, eps_relative)

 protected:
  using CommonOptions<Self>::options_;
  MomentOptions(double lr, double weight_decay) : CommonOptions<Self>(lr, weight_decay) {
    options_.betas(Betas(0.9, 0.999));
  }
};

}  // namespace opsnn::optim
