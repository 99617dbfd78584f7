// Monitor: flags, first-occurrence bookkeeping, spdlog warnings and the warn/skip/stop actions.
#include "opsnn/optim/monitor.h"

#include <spdlog/spdlog.h>

#include "opsnn/core/error.h"
#include "opsnn/optim/step_logic.h"

namespace opsnn::optim {
namespace {

// 1-based number of the step() call being made (applied and skipped steps both count).
int64_t call_number(const StepState& state) { return state.step + state.skipped_steps + 1; }

}  // namespace

Monitor::Monitor(MonitorOptions options) : options_(std::move(options)) { options_.validate(); }

bool Monitor::check_gradients(StepState& state, int32_t bad_segment, const std::string& bad_name,
                              bool loss_scaling_enabled) const {
  // The flags, the first-non-finite record and the skip decision as the GPU's tiny step makes them;
  // here only the messages and the stop action are added.
  const bool skip =
      gradient_verdict(state, bad_segment, state.grad_norm, call_number(state) - 1, loss_scaling_enabled,
                       options_.on_nonfinite() == NonFiniteAction::warn, options_.grad_norm_warn_threshold());
  if (!state.found_inf) {
    if (state.grad_norm > options_.grad_norm_warn_threshold()) {
      spdlog::warn("optimizer step {}: gradient norm {:.4g} exceeds the monitor threshold {:.4g}", call_number(state),
                   state.grad_norm, options_.grad_norm_warn_threshold());
    }
    return false;
  }
  std::string what =
      fmt::format("optimizer step {}: non-finite (inf/NaN) gradient in tensor '{}'", call_number(state), bad_name);
  switch (options_.on_nonfinite()) {
    case NonFiniteAction::stop:
      throw RuntimeFailure(what + " (monitor.on_nonfinite = stop; the first non-finite values appeared at step " +
                           std::to_string(state.first_nonfinite_step + 1) + ")");
    case NonFiniteAction::skip:
      if (loss_scaling_enabled)
        spdlog::info("{}: step skipped, loss scale backs off", what);
      else
        spdlog::warn("{}: step skipped", what);
      break;
    case NonFiniteAction::warn:
      if (skip)
        spdlog::warn("{}: step skipped, loss scale backs off", what);
      else
        spdlog::warn("{}: applied anyway (monitor.on_nonfinite = warn)", what);
      break;
  }
  return skip;
}

void Monitor::check_parameters(StepState& state, int32_t bad_segment, const std::string& bad_name) const {
  if (bad_segment < 0) return;
  mark_nonfinite_parameter(state, call_number(state) - 1, bad_segment);
  std::string what = fmt::format("optimizer step {}: parameter '{}' became non-finite (inf/NaN) after the update",
                                 call_number(state), bad_name);
  if (options_.on_nonfinite() == NonFiniteAction::stop) throw RuntimeFailure(what + " (monitor.on_nonfinite = stop)");
  spdlog::warn("{}", what);
}

}  // namespace opsnn::optim
