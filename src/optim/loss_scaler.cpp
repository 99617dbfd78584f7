// LossScaler: initial scale, scaling the loss through the differentiable ops, and the GradScaler update
// (the update itself is step_logic.h's update_loss_scale, shared with device code).
#include "opsnn/optim/loss_scaler.h"

#include "opsnn/ops/ops.h"
#include "opsnn/optim/step_logic.h"

namespace opsnn::optim {

LossScaler::LossScaler(LossScalingOptions options) : options_(std::move(options)) { options_.validate(); }

void LossScaler::initialize(StepState& state) const {
  state.loss_scale = enabled() ? static_cast<float>(options_.initial_scale()) : 1.0f;
  state.growth_tracker = 0;
}

float LossScaler::inverse_scale(const StepState& state) const {
  return enabled() ? inverse_loss_scale(state.loss_scale) : 1.0f;
}

Tensor LossScaler::scale_loss(const Tensor& loss, const StepState& state) const {
  if (!enabled()) return loss;
  return ops::scale(loss, static_cast<double>(state.loss_scale));
}

void LossScaler::update(StepState& state) const {
  if (!enabled()) return;
  update_loss_scale(state, options_.growth_factor(), options_.backoff_factor(), options_.growth_interval());
}

}  // namespace opsnn::optim
