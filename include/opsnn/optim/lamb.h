// LAMB (You et al. 2020, Alg. 2): Adam moments with a per-tensor trust ratio phi(||p||)/||r||, clamped to
// [trust_clamp_lower, trust_clamp_upper]; two passes over the arena (moments + norms, then the update).
#pragma once

#include "opsnn/optim/optimizer.h"

namespace opsnn::optim {

class LAMB : public Optimizer {
 public:
  LAMB(NamedParameters parameters, const OptimizerOptions& options);
  LAMB(std::vector<ParamGroup> groups, const OptimizerOptions& options);

 protected:
  void apply_update(UpdateContext& context) override;
};

}  // namespace opsnn::optim
