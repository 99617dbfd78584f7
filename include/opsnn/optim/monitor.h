// The NaN / explosion monitor (src/optim/README.md): flags non-finite gradients (before an update) and
// parameters (after it) with the first step and tensor where they appeared, warns when the global
// gradient norm exceeds a threshold, and acts per MonitorOptions::on_nonfinite (warn, skip, stop).
#pragma once

#include <cstdint>
#include <string>

#include "opsnn/optim/options.h"
#include "opsnn/optim/step_state.h"

namespace opsnn::optim {

class Monitor {
 public:
  explicit Monitor(MonitorOptions options = {});  // validates (ConfigError)
  const MonitorOptions& options() const { return options_; }

  // After the gradient pass: state.grad_norm is set; bad_segment/bad_name name the first segment holding
  // inf/NaN (-1 when none; it sets state.found_inf). Sets monitor flags and the first-non-finite record
  // (step_logic.h's gradient_verdict, the GPU tiny step's code), logs, and returns whether the step must
  // be skipped (always on inf/NaN with loss scaling; per on_nonfinite without). Throws RuntimeFailure for
  // on_nonfinite = stop.
  bool check_gradients(StepState& state, int32_t bad_segment, const std::string& bad_name,
                       bool loss_scaling_enabled) const;
  // After the update: bad_segment/bad_name name the first segment whose parameters became inf/NaN.
  // Flags and logs; throws RuntimeFailure for on_nonfinite = stop (skip cannot undo an applied update).
  void check_parameters(StepState& state, int32_t bad_segment, const std::string& bad_name) const;

 private:
  MonitorOptions options_;
};

}  // namespace opsnn::optim
