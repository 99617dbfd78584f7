// The registries of the optimizer subsystem: optimizers by name (the composition root,
// src/register_builtins.cpp, adds the built-ins through register_builtin_optimizers) and fused-step kernels
// by device type (the CPU's are built in).
#include <deque>
#include <mutex>

#include "core/cpu_variants.h"
#include "opsnn/core/error.h"
#include "opsnn/optim/builtin_list.h"
#include "opsnn/optim/descriptor.h"
#include "opsnn/optim/optimizer.h"
#include "optim/device_table.h"

namespace opsnn::optim {

// Each built-in's descriptor, defined in its own .cpp.
#define OPSNN_DECLARE_DESCRIPTOR(name) const OptimizerDescriptor& name##_descriptor();
OPSNN_BUILTIN_OPTIMIZERS(OPSNN_DECLARE_DESCRIPTOR)
#undef OPSNN_DECLARE_DESCRIPTOR

namespace {

struct OptimizerRegistry {
  std::mutex mutex;
  // A deque never moves its elements: find_optimizer's pointers stay valid when more are registered (a
  // replaced descriptor is kept, only unlisted).
  std::deque<OptimizerDescriptor> storage;
  std::map<std::string, const OptimizerDescriptor*, std::less<>> by_name;
  void add(OptimizerDescriptor descriptor) {
    storage.push_back(std::move(descriptor));
    by_name[storage.back().name] = &storage.back();
  }
};

OptimizerRegistry& optimizer_registry() {
  static OptimizerRegistry registry;
  return registry;
}

// The traits of an optimizer registered with only a factory: it reads the options it needs.
OptimizerDescriptor generic_descriptor() {
  OptimizerDescriptor d;
  d.supports_amsgrad = true;
  return d;
}

}  // namespace

// The variant chosen for this CPU (core/cpu_variants.h).
const FusedStepKernels& cpu_fused_step_kernels() { return *opsnn::cpu::cpu_kernels().step; }

namespace {

// The CPU kernels are always there; other devices register theirs.
DeviceTable<FusedStepKernels>& kernel_table() {
  static DeviceTable<FusedStepKernels> table(DeviceType::cpu, cpu_fused_step_kernels());
  return table;
}

}  // namespace

const std::vector<const OptimizerDescriptor*>& builtin_optimizer_descriptors() {
  static const std::vector<const OptimizerDescriptor*> descriptors{
#define OPSNN_LIST_DESCRIPTOR(name) &name##_descriptor(),
      OPSNN_BUILTIN_OPTIMIZERS(OPSNN_LIST_DESCRIPTOR)
#undef OPSNN_LIST_DESCRIPTOR
  };
  return descriptors;
}

void register_builtin_optimizers() {
  for (const OptimizerDescriptor* descriptor : builtin_optimizer_descriptors()) register_optimizer(*descriptor);
}

void register_optimizer(OptimizerDescriptor descriptor) {
  OPSNN_CHECK_AS(ConfigError, !descriptor.name.empty() && descriptor.factory,
                 "register_optimizer needs a name and a factory");
  OptimizerRegistry& registry = optimizer_registry();
  std::lock_guard lock(registry.mutex);
  registry.add(std::move(descriptor));
}

void register_optimizer(const std::string& name, OptimizerFactory factory) {
  OptimizerDescriptor descriptor = generic_descriptor();
  descriptor.name = name;
  descriptor.factory = std::move(factory);
  register_optimizer(std::move(descriptor));
}

const OptimizerDescriptor* find_optimizer(std::string_view name) {
  OptimizerRegistry& registry = optimizer_registry();
  std::lock_guard lock(registry.mutex);
  auto it = registry.by_name.find(name);
  return it != registry.by_name.end() ? it->second : nullptr;
}

const OptimizerDescriptor& optimizer_descriptor(std::string_view name) {
  static const OptimizerDescriptor generic = generic_descriptor();
  const OptimizerDescriptor* found = find_optimizer(name);
  return found != nullptr ? *found : generic;
}

const std::vector<std::string>& builtin_optimizer_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const OptimizerDescriptor* descriptor : builtin_optimizer_descriptors()) out.push_back(descriptor->name);
    return out;
  }();
  return names;
}

std::vector<std::string> optimizer_names() {
  OptimizerRegistry& registry = optimizer_registry();
  std::lock_guard lock(registry.mutex);
  std::vector<std::string> names;
  for (const auto& entry : registry.by_name) names.push_back(entry.first);
  return names;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamGroup> groups,
                                          const OptimizerOptions& options) {
  OptimizerFactory factory;
  {
    OptimizerRegistry& registry = optimizer_registry();
    std::lock_guard lock(registry.mutex);
    auto it = registry.by_name.find(name);
    if (it != registry.by_name.end()) factory = it->second->factory;
  }
  if (!factory) {
    std::string known;
    for (const std::string& known_name : optimizer_names()) known += (known.empty() ? "" : ", ") + known_name;
    if (known.empty())  // nothing registered: the program never ran the composition root
      throw ConfigError(detail::concat("unknown optimizer '", name,
                                       "': no optimizer is registered (a program calls opsnn::register_builtins() "
                                       "once, or includes <opsnn/opsnn.h>)"));
    throw ConfigError(detail::concat("unknown optimizer '", name, "' (known: ", known, ")"));
  }
  std::unique_ptr<Optimizer> optimizer = factory(std::move(groups), options);
  OPSNN_CHECK_AS(ConfigError, optimizer != nullptr, "the factory registered for optimizer '", name,
                 "' returned no optimizer");
  return optimizer;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, NamedParameters parameters,
                                          const OptimizerOptions& options) {
  return make_optimizer(name, default_group(std::move(parameters)), options);
}

void register_fused_step_kernels(DeviceType type, const FusedStepKernels& kernels) {
  kernel_table().set(type, kernels);
}

const FusedStepKernels& fused_step_kernels(Device device) {
  const FusedStepKernels* kernels = kernel_table().find(device.type);
  // GPU arenas run the built-in optimizers on a DeviceStepper; only an optimizer registered under
  // another name asks for host-pipeline kernels on a GPU.
  if (kernels == nullptr) {
    std::string builtins;
    for (const std::string& name : builtin_optimizer_names()) builtins += (builtins.empty() ? "" : ", ") + name;
    throw DeviceError(detail::concat("no host-pipeline optimizer kernels for ", device.str(),
                                     ": on a GPU only the built-in optimizers (", builtins,
                                     ") run, on the fused device step"));
  }
  return *kernels;
}

}  // namespace opsnn::optim
