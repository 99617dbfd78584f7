// The registry of device-resident fused steppers (device_step.h): filled by the CUDA optimizer kernels
// at startup; the CPU registers none and runs the host pipeline of optimizer.cpp.
#include "opsnn/optim/device_step.h"

#include <array>
#include <mutex>

namespace opsnn::optim {
namespace {

struct StepperRegistry {
  std::mutex mutex;
  std::array<DeviceStepperFactory, 2> by_type{};
};

StepperRegistry& stepper_registry() {
  static StepperRegistry registry;
  return registry;
}

}  // namespace

void register_device_stepper(DeviceType type, DeviceStepperFactory factory) {
  StepperRegistry& registry = stepper_registry();
  std::lock_guard lock(registry.mutex);
  registry.by_type.at(static_cast<size_t>(type)) = factory;
}

DeviceStepperFactory device_stepper_factory(DeviceType type) {
  StepperRegistry& registry = stepper_registry();
  std::lock_guard lock(registry.mutex);
  return registry.by_type.at(static_cast<size_t>(type));
}

}  // namespace opsnn::optim
