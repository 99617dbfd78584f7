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

void* DeviceServices::allocate_pinned_host(size_t) {
  throw DeviceError("page-locked (pinned) host memory needs a CUDA device; this device type has none");
}
void DeviceServices::deallocate_pinned_host(void*) {}  // allocate_pinned_host never succeeded

// The services that page-lock host memory: those of the GPU backend, when it has a device.
static DeviceServices* pinned_memory_services() {
  ensure_loaded();
  DeviceServices* services = registry().by_type[static_cast<size_t>(DeviceType::cuda)].get();
  return services != nullptr && services->device_count() > 0 ? services : nullptr;
}

bool pinned_memory_available() { return pinned_memory_services() != nullptr; }

bool is_page_locked(const void* host_pointer) {
  DeviceServices* services = pinned_memory_services();
  return services != nullptr && services->is_page_locked(host_pointer);
}

DeviceServices& device_services(Device device) {
  ensure_loaded();
  DeviceServices* services = registry().by_type[static_cast<size_t>(device.type)].get();
  if (services == nullptr)
    throw DeviceError(
        detail::concat("device ", device.str(), " is not available: this build of opsnn has no CUDA backend"));
  if (device.index < 0 || device.index >= services->device_count())
    throw DeviceError(detail::concat("device ", device.str(), " is not available (", services->device_count(),
                                     " device(s) of that type found)"));
  return *services;
}

Storage::Storage(size_t bytes, Device device, HostMemory memory) : bytes_(bytes), device_(device), memory_(memory) {
  DeviceServices& services = device_services(device);  // throws for an absent device, even for 0 bytes
  if (memory == HostMemory::pinned) {
    OPSNN_CHECK_AS(DeviceError, device.is_cpu(), "pinned memory is host memory; asked for on ", device.str());
    DeviceServices* pinning = pinned_memory_services();
    OPSNN_CHECK_AS(DeviceError, pinning != nullptr,
                   "page-locked (pinned) host memory needs a CUDA device; none was found (or this build has no "
                   "CUDA backend)");
    data_ = bytes == 0 ? nullptr : pinning->allocate_pinned_host(bytes);
    return;
  }
  data_ = bytes == 0 ? nullptr : services.allocate(bytes, device.index);
}

Storage::~Storage() {
  if (data_ == nullptr) return;
  if (memory_ == HostMemory::pinned)
    pinned_memory_services()->deallocate_pinned_host(data_);
  else
    device_services(device_).deallocate(data_, bytes_, device_.index);
}

}  // namespace opsnn
