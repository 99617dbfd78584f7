// Adagrad (Duchi et al. 2011; rules.h's AdagradRule): one state, sum, and one fused pass per step, the
// generic element-wise pass on the CPU and the GPU alike; row-sparse tables through the row-sparse updater.
#include "opsnn/optim/adagrad.h"

namespace opsnn::optim {
namespace {

std::vector<std::string> adagrad_states(const OptimizerOptions&) { return {"sum"}; }

}  // namespace

const OptimizerDescriptor& adagrad_descriptor() {
  static const OptimizerDescriptor descriptor = [] {
    OptimizerDescriptor d;
    d.name = "adagrad";
    d.factory = [](std::vector<ParamGroup> groups, const OptimizerOptions& options) -> std::unique_ptr<Optimizer> {
      return std::make_unique<Adagrad>(std::move(groups), options);
    };
    d.state_names = adagrad_states;
    d.builtin = true;
    d.rule = UpdateRule::adagrad;
    // torch.optim.Adagrad's defaults.
    d.default_lr = 1e-2;
    d.default_eps = 1e-10;
    d.sparse_capable = true;
    return d;
  }();
  return descriptor;
}

Adagrad::Adagrad(NamedParameters parameters, const AdagradOptions& options)
    : Adagrad(default_group(std::move(parameters)), options) {}
Adagrad::Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& options)
    : Adagrad(std::move(groups), options.options()) {}
Adagrad::Adagrad(NamedParameters parameters, const OptimizerOptions& options)
    : Adagrad(default_group(std::move(parameters)), options) {}
Adagrad::Adagrad(std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Optimizer(adagrad_descriptor(), adagrad_descriptor().name, std::move(groups), options, adagrad_states(options)) {
  // The accumulator's start value over every tensor (the arena's padding stays 0).
  const double initial = options.initial_accumulator_value();
  if (initial != 0.0)
    for (size_t segment = 0; segment < arena().segments().size(); ++segment)
      arena().state_view(0, segment).fill_(initial);
}

void Adagrad::apply_update(UpdateContext& context) {
  context.kernels.elementwise_update(context.arena, UpdateRule::adagrad, context.adam, context.segments.data(),
                                     context.grad_multiplier, context.chunk_param_check.data(),
                                     context.chunk_grad_sums);
}

}  // namespace opsnn::optim
