// SGD with momentum, dampening and Nesterov (torch.optim.SGD semantics, L2 weight decay) over the arena.
//
//   opsnn::optim::SGD optimizer(model.named_parameters(), SgdOptions(0.1).momentum(0.9).nesterov(true));
#pragma once

#include "opsnn/optim/optimizer.h"

namespace opsnn::optim {

// SGD's settings: lr 1e-3, momentum 0, dampening 0, nesterov off, weight decay 0 (L2).
struct SgdOptions : CommonOptions<SgdOptions> {
  using Self = SgdOptions;  // what the setters return
  explicit SgdOptions(double lr = 1e-3) : CommonOptions(lr, 0.0) {}
  OPSNN_FORWARD_OPTION(double, momentum)
  OPSNN_FORWARD_OPTION(double, dampening)
  OPSNN_FORWARD_OPTION(bool, nesterov)
};

class SGD : public Optimizer {
 public:
  SGD(NamedParameters parameters, const SgdOptions& options = SgdOptions());
  SGD(std::vector<ParamGroup> groups, const SgdOptions& options = SgdOptions());
  // Every setting in the one struct (what make_optimizer("sgd", ...) passes).
  SGD(NamedParameters parameters, const OptimizerOptions& options);
  SGD(std::vector<ParamGroup> groups, const OptimizerOptions& options);

 protected:
  void apply_update(UpdateContext& context) override;
};

}  // namespace opsnn::optim
