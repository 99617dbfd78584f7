// Monitor: flags, first-occurrence bookkeeping, spdlog warnings and the warn/skip/stop actions.
#include "opsnn/optim/monitor.h"

#include <spdlog/spdlog.h>

#include "opsnn/core/error.h"
#include "opsnn/optim/step_logic.h"

namespace opsnn::optim {
namespace {

// 1-based number of the step() call being made (applied and skipped steps both count).
int64_t call_number(const StepState& state) { return state.step + state.skipped_steps + 1; }

void record_first(StepState& state, int32_t segment) {
  if (state.first_nonfinite_step >= 0) return;
  state.first_nonfinite_step = call_number(state) - 1;
  state.first_nonfinite_segment = segment;
}

}  // namespace

Monitor::Monitor(MonitorOptions options) : options_(std::move(options)) { options_.validate(); }

bool Monitor::check_gradients(StepState& state, int32_t bad_segment, const std::string& bad_name,
                              bool loss_scaling_enabled) const {
  if (!state.found_inf) {
    if (state.grad_norm > options_.grad_norm_warn_threshold()) {
      state.monitor_flags |= kGradNormAboveThreshold;
      spdlog::warn("optimizer step {}: gradient norm {:.4g} exceeds the monitor threshold {:.4g}", call_number(state),
                   state.grad_norm, options_.grad_norm_warn_threshold());
    }
    return false;
  }
  state.monitor_flags |= kNonFiniteGrad;
  record_first(state, bad_segment);
  std::string what = fmt::format("optimizer step {}: non-finite (inf/NaN) gradient in tensor '{}'", call_number(state),
                                 bad_name);
  switch (options_.on_nonfinite()) {
    case NonFiniteAction::stop:
      throw RuntimeFailure(what + " (monitor.on_nonfinite = stop; the first non-finite values appeared at step " +
                           std::to_string(state.first_nonfinite_step + 1) + ")");
    case NonFiniteAction::skip:
      if (loss_scaling_enabled) spdlog::info("{}: step skipped, loss scale backs off", what);
      else spdlog::warn("{}: step skipped", what);
      return true;
    case NonFiniteAction::warn:
      if (loss_scaling_enabled) {
        spdlog::warn("{}: step skipped, loss scale backs off", what);
        return true;
      }
      spdlog::warn("{}: applied anyway (monitor.on_nonfinite = warn)", what);
      return false;
  }
  return true;
}

void Monitor::check_parameters(StepState& state, int32_t bad_segment, const std::string& bad_name) const {
  if (bad_segment < 0) return;
  state.monitor_flags |= kNonFiniteParam;
  record_first(state, bad_segment);
  std::string what = fmt::format("optimizer step {}: parameter '{}' became non-finite (inf/NaN) after the update",
                                 call_number(state), bad_name);
  if (options_.on_nonfinite() == NonFiniteAction::stop)
    throw RuntimeFailure(what + " (monitor.on_nonfinite = stop)");
  spdlog::warn("{}", what);
}

}  // namespace opsnn::optim
