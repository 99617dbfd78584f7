// Adagrad (Duchi, Hazan & Singer 2011, "Adaptive Subgradient Methods for Online Learning and Stochastic
// Optimization", diagonal form as torch.optim.Adagrad): one state, the running sum of squared gradients;
// g += wd*p (L2); sum += g*g; p -= lr*g/(sqrt(sum) + eps). One fused pass per step, and row-sparse tables
// update only their touched rows (the recommender standard for embeddings).
//
//   opsnn::optim::Adagrad optimizer(model.named_parameters(), AdagradOptions(0.05).initial_accumulator_value(0.1));
#pragma once

#include "opsnn/optim/optimizer.h"

namespace opsnn::optim {

// Adagrad's settings: lr 1e-2, eps 1e-10, weight decay 0, the sum starting at 0 (PyTorch's defaults).
// PyTorch's lr_decay (lr / (1 + (t-1)*lr_decay)) is not an option: a scheduler sets the lr of each step.
struct AdagradOptions : CommonOptions<AdagradOptions> {
  using Self = AdagradOptions;  // what the setters return
  explicit AdagradOptions(double lr = 1e-2) : CommonOptions(lr, 0.0) { options_.eps(1e-10); }
  OPSNN_FORWARD_OPTION(double, eps)
  OPSNN_FORWARD_OPTION(double, initial_accumulator_value)
};

class Adagrad final : public Optimizer {
 public:
  Adagrad(NamedParameters parameters, const AdagradOptions& options = AdagradOptions());
  Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& options = AdagradOptions());
  // Every setting in the one struct (what make_optimizer("adagrad", ...) passes).
  Adagrad(NamedParameters parameters, const OptimizerOptions& options);
  Adagrad(std::vector<ParamGroup> groups, const OptimizerOptions& options);

 protected:
  void apply_update(UpdateContext& context) override;
};

}  // namespace opsnn::optim
