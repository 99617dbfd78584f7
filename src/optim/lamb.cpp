// LAMB: phase 1 updates the moments and reduces ||r||^2 and ||p||^2 per chunk; the per-segment sums (in
// chunk order, deterministic) give each tensor's clamped trust ratio; phase 2 applies p -= lr*trust*r.
#include "opsnn/optim/lamb.h"

#include <cmath>

namespace opsnn::optim {
namespace {

std::vector<std::string> lamb_states(const OptimizerOptions&) { return {"exp_avg", "exp_avg_sq"}; }

}  // namespace

const OptimizerDescriptor& lamb_descriptor() {
  static const OptimizerDescriptor descriptor = [] {
    OptimizerDescriptor d;
    d.name = "lamb";
    d.factory = [](std::vector<ParamGroup> groups, const OptimizerOptions& options) -> std::unique_ptr<Optimizer> {
      return std::make_unique<LAMB>(std::move(groups), options);
    };
    d.state_names = lamb_states;
    d.builtin = true;
    d.rule = UpdateRule::lamb;
    d.per_tensor_norms = true;
    return d;
  }();
  return descriptor;
}

LAMB::LAMB(NamedParameters parameters, const LambOptions& options)
    : LAMB(default_group(std::move(parameters)), options) {}
LAMB::LAMB(std::vector<ParamGroup> groups, const LambOptions& options) : LAMB(std::move(groups), options.options()) {}
LAMB::LAMB(NamedParameters parameters, const OptimizerOptions& options)
    : LAMB(default_group(std::move(parameters)), options) {}
LAMB::LAMB(std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Optimizer(lamb_descriptor(), lamb_descriptor().name, std::move(groups), options, lamb_states(options)) {}

void LAMB::apply_update(UpdateContext& context) {
  double* update_sums = scratch(0);
  double* param_sums = scratch(1);
  context.kernels.lamb_phase1(context.arena, context.adam, context.segments.data(), context.grad_multiplier,
                              update_sums, param_sums, context.chunk_grad_sums);
  // Per segment: sum of r^2 at [i], of p^2 at [n + i] (one exchange when the states are sharded).
  const size_t n = context.segments.size();
  std::vector<double> sums(2 * n, 0.0);
  for (int64_t c = 0; c < context.arena.chunk_count; ++c) {
    size_t segment = static_cast<size_t>(context.arena.chunks[c].segment);
    sums[segment] += update_sums[c];
    sums[n + segment] += param_sums[c];
  }
  sum_over_shards(sums);
  float lower = static_cast<float>(options().trust_clamp_lower());
  float upper = static_cast<float>(options().trust_clamp_upper());
  for (size_t i = 0; i < n; ++i)
    context.segments[i].trust_ratio = lamb_trust_ratio(static_cast<float>(std::sqrt(sums[n + i])),
                                                       static_cast<float>(std::sqrt(sums[i])), lower, upper);
  context.kernels.lamb_phase2(context.arena, context.adam, context.segments.data(), context.chunk_param_check.data());
}

}  // namespace opsnn::optim
