// The registry of device-resident fused steppers (device_step.h): filled by the CUDA optimizer kernels
// at startup; the CPU registers none and runs the host pipeline of optimizer.cpp.
#include "opsnn/optim/device_step.h"

#include "optim/device_table.h"

namespace opsnn::optim {
namespace {

DeviceTable<DeviceStepperFactory>& stepper_table() {
  static DeviceTable<DeviceStepperFactory> table;
  return table;
}

}  // namespace

void register_device_stepper(DeviceType type, DeviceStepperFactory factory) { stepper_table().set(type, factory); }

DeviceStepperFactory device_stepper_factory(DeviceType type) {
  const DeviceStepperFactory* factory = stepper_table().find(type);
  return factory != nullptr ? *factory : nullptr;
}

}  // namespace opsnn::optim
