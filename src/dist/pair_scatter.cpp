// The registry of the pair scatter-add kernels and the CPU's (pair_scatter.h).
#include "dist/pair_scatter.h"

#include <map>
#include <mutex>

#include "opsnn/core/error.h"

namespace opsnn::dist {
namespace {

void cpu_pair_scatter_add(int device_index, float* dense, const int64_t* indices, const float* values, int64_t count) {
  (void)device_index;
  for (int64_t i = 0; i < count; ++i)
    if (indices[i] >= 0) dense[indices[i]] += values[i];
}

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<DeviceType, PairScatterAdd>& registry() {
  static std::map<DeviceType, PairScatterAdd> kernels{{DeviceType::cpu, &cpu_pair_scatter_add}};
  return kernels;
}

}  // namespace

void register_pair_scatter_add(DeviceType type, PairScatterAdd kernel) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[type] = kernel;
}

PairScatterAdd pair_scatter_add(Device device) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto found = registry().find(device.type);
  OPSNN_CHECK_AS(DeviceError, found != registry().end(), "no pair scatter-add kernel for ", device.str());
  return found->second;
}

}  // namespace opsnn::dist
