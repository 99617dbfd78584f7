// What the registry knows about an optimizer besides its factory: the facts other code used to derive
// from its name (which options apply, its defaults, whether it decays decoupled, needs per-tensor norms,
// can update row-sparse tables, which device rule runs it). Each built-in defines its descriptor in its
// own .cpp; config validation, options validation, the trainer's hooks and the device step ask these
// traits instead of comparing names.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "opsnn/optim/device_step.h"
#include "opsnn/optim/options.h"

namespace opsnn::optim {

class Optimizer;
struct ParamGroup;

using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>, const OptimizerOptions&)>;

struct OptimizerDescriptor {
  std::string name;
  OptimizerFactory factory;
  // Per-parameter state names for these options ("exp_avg", ...); null: none.
  std::vector<std::string> (*state_names)(const OptimizerOptions& options) = nullptr;
  // The device step's rule; unset (builtin = false) for optimizers registered from outside, which keep
  // the host pipeline.
  bool builtin = false;
  UpdateRule rule = UpdateRule::adam;
  // Defaults used when the options leave the setting unset.
  double default_lr = 1e-3;
  Betas default_betas{0.9, 0.999};
  double default_weight_decay = 0.0;
  double default_eps = 1e-8;
  bool decoupled_weight_decay = false;  // p -= lr*wd*p apart from the gradient (AdamW, Lion)
  bool has_momentum_option = false;     // momentum / dampening / nesterov apply (SGD); else betas[0] is it
  bool supports_amsgrad = false;
  bool per_tensor_norms = false;  // a trust ratio from whole-tensor norms (LAMB): not row-sparse
  bool sparse_capable = false;    // row-sparse tables update lazily (sparse_update.h)
};

// Adds or replaces a descriptor (register_optimizer(name, factory) adds one with only name and factory).
void register_optimizer(OptimizerDescriptor descriptor);
// The registered descriptor of `name`, or null.
const OptimizerDescriptor* find_optimizer(std::string_view name);
// The registered descriptor of `name`, else the generic one (no name, no defaults of its own, betas[0] as
// its momentum, every Adam-style option accepted, the host pipeline): what a subclass constructed under
// an unregistered name gets.
const OptimizerDescriptor& optimizer_descriptor(std::string_view name);
// The built-in optimizers' names and descriptors in their fixed order (builtin_list.h): what configs
// accept. Known whether or not they are registered yet.
const std::vector<std::string>& builtin_optimizer_names();
const std::vector<const OptimizerDescriptor*>& builtin_optimizer_descriptors();
// Registers every built-in (what opsnn::register_builtins does for the optimizers).
void register_builtin_optimizers();

}  // namespace opsnn::optim
