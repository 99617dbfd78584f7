// The device-resident step state (src/optim/README.md): everything a fused step reads and writes that is
// not per-element, in one plain struct living on the parameters' device. Kernels update it; the host
// reads a copy back for logging, so a step never needs a host synchronisation.
#pragma once

#include <cstdint>

namespace opsnn::optim {

// Monitor flags (bit set in StepState::monitor_flags by the step that saw the condition).
enum MonitorFlag : uint32_t {
  kNonFiniteGrad = 1u << 0,   // an unscaled gradient was inf/NaN (the step was skipped)
  kNonFiniteParam = 1u << 1,  // a parameter became inf/NaN
  kGradNormAboveThreshold = 1u << 2,
  kStepSkipped = 1u << 3,
};

struct StepState {
  int64_t step = 0;  // applied (not skipped) steps so far; t of the next step is step + 1
  int64_t skipped_steps = 0;
  double lr = 0.0;           // lr used by the most recent step (schedule applied)
  double beta1_power = 1.0;  // beta1^step, advanced by one multiply per applied step (never pow)
  double beta2_power = 1.0;
  float loss_scale = 1.0f;               // dynamic loss scale (1 and frozen when scaling is off)
  int32_t growth_tracker = 0;            // consecutive finite steps since the last scale change
  int32_t found_inf = 0;                 // this step's gradients held inf/NaN
  float grad_norm = 0.0f;                // global L2 norm of the unscaled gradients of this step (before clipping)
  float clip_factor = 1.0f;              // min(1, max_norm / (grad_norm + 1e-6)) applied this step
  uint32_t monitor_flags = 0;            // MonitorFlag bits of this step
  int64_t first_nonfinite_step = -1;     // step index at which non-finite values were first seen (-1: never)
  int32_t first_nonfinite_segment = -1;  // which segment (tensor) held them
};

}  // namespace opsnn::optim
