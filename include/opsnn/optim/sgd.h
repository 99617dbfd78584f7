// SGD with momentum, dampening and Nesterov (torch.optim.SGD semantics, L2 weight decay) over the arena.
#pragma once

#include "opsnn/optim/optimizer.h"

namespace opsnn::optim {

class SGD : public Optimizer {
 public:
  SGD(NamedParameters parameters, const OptimizerOptions& options);
  SGD(std::vector<ParamGroup> groups, const OptimizerOptions& options);

 protected:
  void apply_update(UpdateContext& context) override;
};

}  // namespace opsnn::optim
