// Dynamic loss scaling with torch GradScaler semantics, as a small class of its own (flashlight's
// DynamicScaler style) whose state - scale, growth tracker, found_inf - lives in the StepState, so a fused
// step (and later a CUDA kernel) updates it in place. Disabled, the scale is 1 and never changes.
#pragma once

#include "opsnn/core/tensor.h"
#include "opsnn/optim/options.h"
#include "opsnn/optim/step_state.h"

namespace opsnn::optim {

class LossScaler {
 public:
  explicit LossScaler(LossScalingOptions options = {});  // validates the options (ConfigError)

  bool enabled() const { return options_.enabled(); }
  const LossScalingOptions& options() const { return options_; }

  // Sets the scale to initial_scale (1 when disabled) and the growth tracker to 0.
  void initialize(StepState& state) const;
  float scale(const StepState& state) const { return enabled() ? state.loss_scale : 1.0f; }
  float inverse_scale(const StepState& state) const;
  // loss * scale, recorded for autograd: call backward() on the result.
  Tensor scale_loss(const Tensor& loss, const StepState& state) const;
  // After a step's gradients were checked (state.found_inf): back off, or count and maybe grow.
  void update(StepState& state) const;

 private:
  LossScalingOptions options_;
};

}  // namespace opsnn::optim
