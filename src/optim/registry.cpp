// The registries of the optimizer subsystem: optimizers by name (built-ins added on first use, so a static
// library needs no registration objects to be linked in) and fused-step kernels by device type.
#include <array>
#include <mutex>

#include "opsnn/core/error.h"
#include "opsnn/optim/adam.h"
#include "opsnn/optim/lamb.h"
#include "opsnn/optim/sgd.h"
#include "optim/device_table.h"

namespace opsnn::optim {
namespace {

template <typename T> OptimizerFactory factory_of() {
  return [](std::vector<ParamGroup> groups, const OptimizerOptions& options) -> std::unique_ptr<Optimizer> {
    return std::make_unique<T>(std::move(groups), options);
  };
}

struct OptimizerRegistry {
  std::mutex mutex;
  std::map<std::string, OptimizerFactory> factories;
  OptimizerRegistry() {
    factories["sgd"] = factory_of<SGD>();
    factories["adam"] = factory_of<Adam>();
    factories["adamw"] = factory_of<AdamW>();
    factories["lamb"] = factory_of<LAMB>();
  }
};

OptimizerRegistry& optimizer_registry() {
  static OptimizerRegistry registry;
  return registry;
}

// The CPU kernels are always there; other devices register theirs.
DeviceTable<FusedStepKernels>& kernel_table() {
  static DeviceTable<FusedStepKernels> table(DeviceType::cpu, cpu_fused_step_kernels());
  return table;
}

}  // namespace

void register_optimizer(const std::string& name, OptimizerFactory factory) {
  OPSNN_CHECK_AS(ConfigError, !name.empty() && factory, "register_optimizer needs a name and a factory");
  OptimizerRegistry& registry = optimizer_registry();
  std::lock_guard lock(registry.mutex);
  registry.factories[name] = std::move(factory);
}

std::vector<std::string> optimizer_names() {
  OptimizerRegistry& registry = optimizer_registry();
  std::lock_guard lock(registry.mutex);
  std::vector<std::string> names;
  for (const auto& entry : registry.factories) names.push_back(entry.first);
  return names;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamGroup> groups,
                                          const OptimizerOptions& options) {
  OptimizerFactory factory;
  {
    OptimizerRegistry& registry = optimizer_registry();
    std::lock_guard lock(registry.mutex);
    auto it = registry.factories.find(name);
    if (it != registry.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const std::string& known_name : optimizer_names()) known += (known.empty() ? "" : ", ") + known_name;
    throw ConfigError(detail::concat("unknown optimizer '", name, "' (known: ", known, ")"));
  }
  std::unique_ptr<Optimizer> optimizer = factory(std::move(groups), options);
  OPSNN_CHECK_AS(ConfigError, optimizer != nullptr, "the factory registered for optimizer '", name,
                 "' returned no optimizer");
  return optimizer;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, NamedParameters parameters,
                                          const OptimizerOptions& options) {
  return make_optimizer(name, std::vector<ParamGroup>{ParamGroup{"default", std::move(parameters), 1.0, std::nullopt}},
                        options);
}

void register_fused_step_kernels(DeviceType type, const FusedStepKernels& kernels) { kernel_table().set(type, kernels); }

const FusedStepKernels& fused_step_kernels(Device device) {
  const FusedStepKernels* kernels = kernel_table().find(device.type);
  // GPU arenas run the built-in optimizers on a DeviceStepper; only an optimizer registered under
  // another name asks for host-pipeline kernels on a GPU.
  OPSNN_CHECK_AS(DeviceError, kernels != nullptr, "no host-pipeline optimizer kernels for ", device.str(),
                 ": on a GPU only the built-in optimizers (sgd, adam, adamw, lamb) run, on the fused device step");
  return *kernels;
}

}  // namespace opsnn::optim
