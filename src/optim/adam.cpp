// Adam and AdamW: exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad) per parameter; one fused pass.
#include "opsnn/optim/adam.h"

namespace opsnn::optim {
namespace {

std::vector<std::string> adam_states(const OptimizerOptions& options) {
  if (options.amsgrad()) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

// Adam and AdamW share the rule and the kernels; AdamW differs only in these traits.
OptimizerDescriptor adam_family(std::string name, bool decoupled) {
  OptimizerDescriptor d;
  d.name = std::move(name);
  d.state_names = adam_states;
  d.builtin = true;
  d.rule = UpdateRule::adam;
  d.decoupled_weight_decay = decoupled;
  d.default_weight_decay = decoupled ? 1e-2 : 0.0;  // PyTorch's AdamW default
  d.supports_amsgrad = true;
  d.sparse_capable = true;
  return d;
}

}  // namespace

const OptimizerDescriptor& adam_descriptor() {
  static const OptimizerDescriptor descriptor = [] {
    OptimizerDescriptor d = adam_family("adam", false);
    d.factory = [](std::vector<ParamGroup> groups, const OptimizerOptions& options) -> std::unique_ptr<Optimizer> {
      return std::make_unique<Adam>(std::move(groups), options);
    };
    return d;
  }();
  return descriptor;
}

const OptimizerDescriptor& adamw_descriptor() {
  static const OptimizerDescriptor descriptor = [] {
    OptimizerDescriptor d = adam_family("adamw", true);
    d.factory = [](std::vector<ParamGroup> groups, const OptimizerOptions& options) -> std::unique_ptr<Optimizer> {
      return std::make_unique<AdamW>(std::move(groups), options);
    };
    return d;
  }();
  return descriptor;
}

Adam::Adam(NamedParameters parameters, const AdamOptions& options)
    : Adam(default_group(std::move(parameters)), options) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options) : Adam(std::move(groups), options.options()) {}
Adam::Adam(NamedParameters parameters, const OptimizerOptions& options)
    : Adam(default_group(std::move(parameters)), options) {}
Adam::Adam(std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Adam(adam_descriptor(), std::move(groups), options) {}
Adam::Adam(const OptimizerDescriptor& descriptor, std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Optimizer(descriptor, descriptor.name, std::move(groups), options, adam_states(options)) {}

void Adam::apply_update(UpdateContext& context) {
  context.kernels.adam_update(context.arena, context.adam, context.segments.data(), context.grad_multiplier,
                              context.chunk_param_check.data(), context.chunk_grad_sums);
}

AdamW::AdamW(NamedParameters parameters, const AdamWOptions& options)
    : AdamW(default_group(std::move(parameters)), options) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : AdamW(std::move(groups), options.options()) {}
AdamW::AdamW(NamedParameters parameters, const OptimizerOptions& options)
    : AdamW(default_group(std::move(parameters)), options) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Adam(adamw_descriptor(), std::move(groups), options) {}

}  // namespace opsnn::optim
