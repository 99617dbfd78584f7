// LAMB (You et al. 2020, Alg. 2): Adam moments with a per-tensor trust ratio phi(||p||)/||r||, clamped to
// [trust_clamp_lower, trust_clamp_upper]; two passes over the arena (moments + norms, then the update).
//
//   opsnn::optim::LAMB optimizer(model.named_parameters(), LambOptions(2e-3).weight_decay(0.01));
#pragma once

#include "opsnn/optim/optimizer.h"

namespace opsnn::optim {

// LAMB's settings: Adam's moments (lr 1e-3, betas (0.9, 0.999), eps 1e-8), decoupled weight decay 0 and
// the trust clamp [1e-3, 10].
struct LambOptions : MomentOptions<LambOptions> {
  using Self = LambOptions;  // what the setters return
  explicit LambOptions(double lr = 1e-3) : MomentOptions(lr, 0.0) {}
  OPSNN_FORWARD_OPTION(double, trust_clamp_lower)
  OPSNN_FORWARD_OPTION(double, trust_clamp_upper)
};

class LAMB : public Optimizer {
 public:
  LAMB(NamedParameters parameters, const LambOptions& options = LambOptions());
  LAMB(std::vector<ParamGroup> groups, const LambOptions& options = LambOptions());
  // Every setting in the one struct (what make_optimizer("lamb", ...) passes).
  LAMB(NamedParameters parameters, const OptimizerOptions& options);
  LAMB(std::vector<ParamGroup> groups, const OptimizerOptions& options);

 protected:
  void apply_update(UpdateContext& context) override;
};

}  // namespace opsnn::optim
