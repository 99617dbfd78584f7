// The scalar ("tiny kernel") parts of a fused step that read and write the StepState: clip factor, the
// skip decision and the monitor's flags and first-non-finite record, dynamic loss-scale update and the
// advance after an applied step. OPSNN_HD and free of third-party includes: the CPU step (optimizer.cpp,
// monitor.cpp) and the GPU's one-thread kernels (fused_step_kernels.cu) run this same code.
#pragma once

#include <cmath>
#include <cstdint>

#include "opsnn/core/macros.h"
#include "opsnn/optim/step_state.h"

namespace opsnn::optim {

OPSNN_HD bool is_finite_value(double x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

// torch.nn.utils.clip_grad_norm_: factor = max_norm / (norm + 1e-6), clamped to 1; 1 when clipping is off
// (max_norm <= 0) or the norm is not finite (such a step is skipped or reported by the monitor).
OPSNN_HD float gradient_clip_factor(double grad_norm, double max_norm) {
  if (!(max_norm > 0.0) || !is_finite_value(grad_norm)) return 1.0f;
  double factor = max_norm / (grad_norm + 1e-6);
  return factor < 1.0 ? static_cast<float>(factor) : 1.0f;
}

// Reciprocal of the loss scale as GradScaler computes it: in double, then rounded to float.
OPSNN_HD float inverse_loss_scale(float loss_scale) {
  return static_cast<float>(1.0 / static_cast<double>(loss_scale));
}

// GradScaler.update (torch._amp_update_scale_): on inf/NaN the scale backs off and the tracker restarts;
// otherwise the tracker counts finite steps and at growth_interval the scale grows (only if the grown
// scale is finite) and the tracker restarts.
OPSNN_HD void update_loss_scale(StepState& state, double growth_factor, double backoff_factor,
                                int64_t growth_interval) {
  if (state.found_inf) {
    state.loss_scale = static_cast<float>(static_cast<double>(state.loss_scale) * backoff_factor);
    state.growth_tracker = 0;
    return;
  }
  int64_t successful = static_cast<int64_t>(state.growth_tracker) + 1;
  if (successful == growth_interval) {
    float grown = static_cast<float>(static_cast<double>(state.loss_scale) * growth_factor);
    if (is_finite_value(grown)) state.loss_scale = grown;
    state.growth_tracker = 0;
  } else {
    state.growth_tracker = static_cast<int32_t>(successful);
  }
}

// After an applied (not skipped) step: count it and advance the bias-correction products by one multiply.
OPSNN_HD void advance_applied_step(StepState& state, double beta1, double beta2, double lr) {
  state.step += 1;
  state.beta1_power *= beta1;
  state.beta2_power *= beta2;
  state.lr = lr;
}

// 1 / (1 - beta^t) from the running product beta^t of the step being applied (never pow per step).
OPSNN_HD float inverse_bias_correction(double beta_power) { return static_cast<float>(1.0 / (1.0 - beta_power)); }

// ---- the monitor's bookkeeping, the same on the host (monitor.cpp) and in the GPU's tiny kernels ----
// call_index: the zero-based index of the step() call (applied and skipped steps both count).

// The first step and tensor where inf/NaN appeared; later occurrences leave it.
OPSNN_HD void record_first_nonfinite(StepState& state, int64_t call_index, int32_t segment) {
  if (state.first_nonfinite_step >= 0) return;
  state.first_nonfinite_step = call_index;
  state.first_nonfinite_segment = segment;
}

// The gradient statistics of a step: found_inf (bad_segment >= 0 names the first tensor with inf/NaN) and
// the norm into the state, with their monitor flags. Returns whether the step is skipped: always on
// inf/NaN with loss scaling, otherwise unless the action is warn (stop skips too; the host then throws).
OPSNN_HD bool gradient_verdict(StepState& state, int32_t bad_segment, double grad_norm, int64_t call_index,
                               bool loss_scaling, bool warn_only, double grad_norm_warn_threshold) {
  state.found_inf = bad_segment >= 0 ? 1 : 0;
  state.grad_norm = static_cast<float>(grad_norm);
  if (state.found_inf) {
    state.monitor_flags |= kNonFiniteGrad;
    record_first_nonfinite(state, call_index, bad_segment);
    return loss_scaling || !warn_only;
  }
  if (state.grad_norm > grad_norm_warn_threshold) state.monitor_flags |= kGradNormAboveThreshold;
  return false;
}

// A skipped step: counted, flagged; nothing else advances.
OPSNN_HD void mark_skipped(StepState& state) {
  state.skipped_steps += 1;
  state.monitor_flags |= kStepSkipped;
}

// A parameter of `segment` became inf/NaN in the update of call call_index.
OPSNN_HD void mark_nonfinite_parameter(StepState& state, int64_t call_index, int32_t segment) {
  state.monitor_flags |= kNonFiniteParam;
  record_first_nonfinite(state, call_index, segment);
}

}  // namespace opsnn::optim
