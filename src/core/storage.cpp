// Storage allocation through the per-device services registry, and the built-in CPU services.
#include "opsnn/core/storage.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "core/cpu_services.h"
#include "opsnn/core/error.h"

namespace opsnn {
namespace {

// The CPU's services are core's own and always there; other device types are registered from above
// (opsnn::register_builtins, src/register_builtins.cpp, registers the CUDA ones).
struct ServicesRegistry {
  std::array<std::unique_ptr<DeviceServices>, 2> by_type;
  bool builtins_registered = false;
  ServicesRegistry() { by_type[static_cast<size_t>(DeviceType::cpu)] = make_cpu_services(); }
};

ServicesRegistry& registry() {
  static ServicesRegistry instance;
  return instance;
}

}  // namespace

void register_device_services(DeviceType type, std::unique_ptr<DeviceServices> services) {
  registry().by_type[static_cast<size_t>(type)] = std::move(services);
}

void mark_builtins_registered() { registry().builtins_registered = true; }
bool builtins_registered() { return registry().builtins_registered; }

bool device_available(Device device) {
  DeviceServices* services = registry().by_type[static_cast<size_t>(device.type)].get();
  return services != nullptr && device.index >= 0 && device.index < services->device_count();
}

int cuda_device_count() {
  DeviceServices* services = registry().by_type[static_cast<size_t>(DeviceType::cuda)].get();
  return services ? services->device_count() : 0;
}

void* DeviceServices::allocate_pinned_host(size_t) {
  throw DeviceError("page-locked (pinned) host memory needs a CUDA device; this device type has none");
}
void DeviceServices::deallocate_pinned_host(void*) {}  // allocate_pinned_host never succeeded

std::unique_ptr<CapturedGraph> DeviceServices::capture_graph(const std::function<void()>&, int) {
  throw DeviceError("capture_graph: graphs record CUDA work; this device type has none");
}

std::unique_ptr<CapturedGraph> capture_graph(Device device, const std::function<void()>& work) {
  OPSNN_CHECK_AS(UsageError, static_cast<bool>(work), "capture_graph: no work given");
  OPSNN_CHECK_AS(DeviceError, device_available(device), "capture_graph: device ", device.str(), " is not available");
  return device_services(device).capture_graph(work, device.index);
}

// The services that page-lock host memory: those of the GPU backend, when it has a device.
static DeviceServices* pinned_memory_services() {
  DeviceServices* services = registry().by_type[static_cast<size_t>(DeviceType::cuda)].get();
  return services != nullptr && services->device_count() > 0 ? services : nullptr;
}

bool pinned_memory_available() { return pinned_memory_services() != nullptr; }

bool is_page_locked(const void* host_pointer) {
  DeviceServices* services = pinned_memory_services();
  return services != nullptr && services->is_page_locked(host_pointer);
}

DeviceServices& device_services(Device device) {
  DeviceServices* services = registry().by_type[static_cast<size_t>(device.type)].get();
  if (services == nullptr)
    throw DeviceError(detail::concat("device ", device.str(), " is not available: ",
                                     builtins_registered()
                                         ? "this build of opsnn has no CUDA backend"
                                         : "no CUDA backend is registered (a program calls "
                                           "opsnn::register_builtins() once, or includes <opsnn/opsnn.h>)"));
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
