// The compute-backend registry that the functional ops dispatch through, the process-wide f32 math
// setting, and the one place that registers every backend compiled into the library (the only
// OPSNN_WITH_CUDA switch in the tree).
#include "opsnn/ops/backend.h"

#include <array>
#include <atomic>

#include "core/cpu_services.h"
#include "ops/cpu/cpu_backend.h"
#if OPSNN_WITH_CUDA
#include "ops/cuda/cuda_backend.h"
#include "optim/cuda/register.h"
#endif

namespace opsnn {

// Called once, lazily, by the device-services registry on first use.
void load_builtin_backends() {
  register_device_services(DeviceType::cpu, make_cpu_services());
  ops::register_backend(DeviceType::cpu, ops::make_cpu_backend());
#if OPSNN_WITH_CUDA
  ops::register_cuda_backend();
  optim::register_cuda_optimizer_kernels();
#endif
}

}  // namespace opsnn

namespace opsnn::ops {
namespace {
std::array<std::unique_ptr<Backend>, 2>& backends() {
  static std::array<std::unique_ptr<Backend>, 2> instance;
  return instance;
}

std::atomic<Fp32Math> fp32_math_setting{Fp32Math::strict};
std::atomic<bool> conv_deterministic_setting{true};
}  // namespace

void set_fp32_math(Fp32Math math) { fp32_math_setting.store(math); }
Fp32Math fp32_math() { return fp32_math_setting.load(); }
void set_conv_deterministic(bool deterministic) { conv_deterministic_setting.store(deterministic); }
bool conv_deterministic() { return conv_deterministic_setting.load(); }

void register_backend(DeviceType type, std::unique_ptr<Backend> backend) {
  backends()[static_cast<size_t>(type)] = std::move(backend);
}

Backend& backend_for(Device device) {
  device_services(device);  // loads the backends, and throws a clear error for an absent device
  Backend* backend = backends()[static_cast<size_t>(device.type)].get();
  OPSNN_CHECK_AS(DeviceError, backend != nullptr, "no compute kernels are registered for ", device.str());
  return *backend;
}

}  // namespace opsnn::ops
