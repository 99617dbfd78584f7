// Adam (L2 weight decay, optional amsgrad; Kingma & Ba 2015) and AdamW (decoupled decay; Loshchilov &
// Hutter 2019) over the arena: one fused pass per step.
#pragma once

#include "opsnn/optim/optimizer.h"

namespace opsnn::optim {

class Adam : public Optimizer {
 public:
  Adam(NamedParameters parameters, const OptimizerOptions& options);
  Adam(std::vector<ParamGroup> groups, const OptimizerOptions& options);

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, const OptimizerOptions& options);
  void apply_update(UpdateContext& context) override;
};

class AdamW : public Adam {
 public:
  AdamW(NamedParameters parameters, const OptimizerOptions& options);
  AdamW(std::vector<ParamGroup> groups, const OptimizerOptions& options);
};

}  // namespace opsnn::optim
