// SGD: one momentum buffer per parameter (none without momentum); the update is one fused pass.
#include "opsnn/optim/sgd.h"

namespace opsnn::optim {
namespace {

std::vector<std::string> sgd_states(const OptimizerOptions& options) {
  if (options.momentum() == 0.0) return {};
  return {"momentum_buffer"};
}

}  // namespace

const OptimizerDescriptor& sgd_descriptor() {
  static const OptimizerDescriptor descriptor = [] {
    OptimizerDescriptor d;
    d.name = "sgd";
    d.factory = [](std::vector<ParamGroup> groups, const OptimizerOptions& options) -> std::unique_ptr<Optimizer> {
      return std::make_unique<SGD>(std::move(groups), options);
    };
    d.state_names = sgd_states;
    d.builtin = true;
    d.rule = UpdateRule::sgd;
    d.has_momentum_option = true;
    d.sparse_capable = true;
    return d;
  }();
  return descriptor;
}

SGD::SGD(NamedParameters parameters, const SgdOptions& options) : SGD(default_group(std::move(parameters)), options) {}
SGD::SGD(std::vector<ParamGroup> groups, const SgdOptions& options) : SGD(std::move(groups), options.options()) {}
SGD::SGD(NamedParameters parameters, const OptimizerOptions& options)
    : SGD(default_group(std::move(parameters)), options) {}
SGD::SGD(std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Optimizer(sgd_descriptor(), sgd_descriptor().name, std::move(groups), options, sgd_states(options)) {}

void SGD::apply_update(UpdateContext& context) {
  context.kernels.sgd_update(context.arena, context.sgd, context.segments.data(), context.grad_multiplier,
                             context.chunk_param_check.data(), context.chunk_grad_sums);
}

}  // namespace opsnn::optim
