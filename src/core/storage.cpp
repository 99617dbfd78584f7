// Storage allocation through the per-device services registry, and the built-in CPU services.
#include "opsnn/core/storage.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/cpu_services.h"
#include "opsnn/core/error.h"

namespace opsnn {
namespace {

struct ServicesRegistry {
  std::array<std::unique_ptr<DeviceServices>, 2> by_type;
  std::once_flag backends_loaded;
};

ServicesRegistry& registry() {
  static ServicesRegistry instance;
  return instance;
}

}  // namespace

void load_builtin_backends();  // backends.cpp: registers every backend compiled into the library

void register_device_services(DeviceType type, std::unique_ptr<DeviceServices> services) {
  registry().by_type[static_cast<size_t>(type)] = std::move(services);
}

static void ensure_loaded() { std::call_once(registry().backends_loaded, load_builtin_backends); }

bool device_available(Device device) {
  ensure_loaded();
  DeviceServices* services = registry().by_type[static_cast<size_t>(device.type)].get();
  return services != nullptr && device.index >= 0 && device.index < services->device_count();
}

int cuda_device_count() {
  ensure_loaded();
  DeviceServices* services = registry().by_type[static_cast<size_t>(DeviceType::cuda)].get();
  return services ? services->device_count() : 0;
}

DeviceServices& device_services(Device device) {
  ensure_loaded();
  DeviceServices* services = registry().by_type[static_cast<size_t>(device.type)].get();
  if (services == nullptr)
    throw DeviceError(detail::concat("device ", device.str(),
                                     " is not available: this build of opsnn has no CUDA backend"));
  if (device.index < 0 || device.index >= services->device_count())
    throw DeviceError(detail::concat("device ", device.str(), " is not available (", services->device_count(),
                                     " device(s) of that type found)"));
  return *services;
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  DeviceServices& services = device_services(device);  // throws for an absent device, even for 0 bytes
  data_ = bytes == 0 ? nullptr : services.allocate(bytes, device.index);
}

Storage::~Storage() {
  if (data_ != nullptr) device_services(device_).deallocate(data_, bytes_, device_.index);
}

}  // namespace opsnn
