// Lion (Chen et al. 2023; rules.h's LionRule): one state, exp_avg, and one fused pass per step, the generic
// element-wise pass on the CPU and the GPU alike. Weight decay is decoupled (p -= lr*wd*p inside the step).
#include "opsnn/optim/lion.h"

namespace opsnn::optim {
namespace {

std::vector<std::string> lion_states(const OptimizerOptions&) { return {"exp_avg"}; }

}  // namespace

const OptimizerDescriptor& lion_descriptor() {
  static const OptimizerDescriptor descriptor = [] {
    OptimizerDescriptor d;
    d.name = "lion";
    d.factory = [](std::vector<ParamGroup> groups, const OptimizerOptions& options) -> std::unique_ptr<Optimizer> {
      return std::make_unique<Lion>(std::move(groups), options);
    };
    d.state_names = lion_states;
    d.builtin = true;
    d.rule = UpdateRule::lion;
    // The paper's defaults: an lr 3-10x below AdamW's (the sign update has unit size per element).
    d.default_lr = 1e-4;
    d.default_betas = {0.9, 0.99};
    d.decoupled_weight_decay = true;
    return d;
  }();
  return descriptor;
}

Lion::Lion(NamedParameters parameters, const LionOptions& options)
    : Lion(default_group(std::move(parameters)), options) {}
Lion::Lion(std::vector<ParamGroup> groups, const LionOptions& options) : Lion(std::move(groups), options.options()) {}
Lion::Lion(NamedParameters parameters, const OptimizerOptions& options)
    : Lion(default_group(std::move(parameters)), options) {}
Lion::Lion(std::vector<ParamGroup> groups, const OptimizerOptions& options)
    : Optimizer(lion_descriptor(), lion_descriptor().name, std::move(groups), options, lion_states(options)) {}

void Lion::apply_update(UpdateContext& context) {
  context.kernels.elementwise_update(context.arena, UpdateRule::lion, context.adam, context.segments.data(),
                                     context.grad_multiplier, context.chunk_param_check.data(),
                                     context.chunk_grad_sums);
}

}  // namespace opsnn::optim
