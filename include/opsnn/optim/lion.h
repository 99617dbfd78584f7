// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): one state (exp_avg) and a sign
// update, c = b1*m + (1-b1)*g; p -= lr*(sign(c) + wd*p); m = b2*m + (1-b2)*g. One fused pass per step.
//
//   opsnn::optim::Lion optimizer(model.named_parameters(), LionOptions(3e-5).weight_decay(1.0));
#pragma once

#include "opsnn/optim/optimizer.h"

namespace opsnn::optim {

// Lion's settings: lr 1e-4 (3-10x below AdamW's: the sign update has unit size per element), betas
// (0.9, 0.99), decoupled weight decay 0.
struct LionOptions : CommonOptions<LionOptions> {
  using Self = LionOptions;  // what the setters return
  explicit LionOptions(double lr = 1e-4) : CommonOptions(lr, 0.0) { options_.betas(Betas(0.9, 0.99)); }
  OPSNN_FORWARD_OPTION(Betas, betas)
};

class Lion final : public Optimizer {
 public:
  Lion(NamedParameters parameters, const LionOptions& options = LionOptions());
  Lion(std::vector<ParamGroup> groups, const LionOptions& options = LionOptions());
  // Every setting in the one struct (what make_optimizer("lion", ...) passes).
  Lion(NamedParameters parameters, const OptimizerOptions& options);
  Lion(std::vector<ParamGroup> groups, const OptimizerOptions& options);

 protected:
  void apply_update(UpdateContext& context) override;
};

}  // namespace opsnn::optim
