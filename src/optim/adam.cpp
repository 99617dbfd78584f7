// Adam and AdamW: exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad) per parameter; one fused pass.
#include "opsnn/optim/adam.h"

namespace opsnn::optim {
namespace {

std::vector<std::string> adam_states(const OptimizerOptions& options) {
  if (options.amsgrad()) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

std::vector<ParamGroup> single_group(NamedParameters parameters) {
  return {ParamGroup{"default", std::move(parameters), 1.0, std::nullopt}};
}

}  // namespace

Adam::Adam(NamedParameters parameters, const OptimizerOptions& options)
    : Adam("adam", single_group(std::move(parameters)), options) {}

Adam::Adam(std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Adam("adam", std::move(groups), options) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Optimizer(std::move(name), std::move(groups), options, adam_states(options)) {}

void Adam::apply_update(UpdateContext& context) {
  context.kernels.adam_update(context.arena, context.adam, context.segments.data(), context.grad_multiplier,
                              context.chunk_param_check.data());
}

AdamW::AdamW(NamedParameters parameters, const OptimizerOptions& options)
    : Adam("adamw", single_group(std::move(parameters)), options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Adam("adamw", std::move(groups), options) {}

}  // namespace opsnn::optim
