// Adam (L2 weight decay, optional amsgrad; Kingma & Ba 2015) and AdamW (decoupled decay; Loshchilov &
// Hutter 2019) over the arena: one fused pass per step.
//
//   opsnn::optim::AdamW optimizer(model.named_parameters(), AdamWOptions(3e-4).betas({0.9, 0.95}));
#pragma once

#include "opsnn/optim/optimizer.h"

namespace opsnn::optim {

// Adam's settings: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0 (L2, added to the gradient).
struct AdamOptions : MomentOptions<AdamOptions> {
  using Self = AdamOptions;  // what the setters return
  explicit AdamOptions(double lr = 1e-3) : MomentOptions(lr, 0.0) {}
  OPSNN_FORWARD_OPTION(bool, amsgrad)
};

// AdamW's: Adam's, with decoupled weight decay 1e-2 (PyTorch's default).
struct AdamWOptions : MomentOptions<AdamWOptions> {
  using Self = AdamWOptions;  // what the setters return
  explicit AdamWOptions(double lr = 1e-3) : MomentOptions(lr, 1e-2) {}
  OPSNN_FORWARD_OPTION(bool, amsgrad)
};

class Adam : public Optimizer {
 public:
  Adam(NamedParameters parameters, const AdamOptions& options = AdamOptions());
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options = AdamOptions());
  // Every setting in the one struct (what make_optimizer("adam", ...) passes).
  Adam(NamedParameters parameters, const OptimizerOptions& options);
  Adam(std::vector<ParamGroup> groups, const OptimizerOptions& options);

 protected:
  Adam(const OptimizerDescriptor& descriptor, std::vector<ParamGroup> groups, const OptimizerOptions& options);
  void apply_update(UpdateContext& context) override;
};

class AdamW : public Adam {
 public:
  AdamW(NamedParameters parameters, const AdamWOptions& options = AdamWOptions());
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = AdamWOptions());
  AdamW(NamedParameters parameters, const OptimizerOptions& options);
  AdamW(std::vector<ParamGroup> groups, const OptimizerOptions& options);
};

}  // namespace opsnn::optim
