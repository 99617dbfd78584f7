// Registers the CUDA device services and the CUDA compute kernels.
#include <memory>

#include "ops/cuda/cuda_backend.h"

namespace opsnn::ops {

void register_cuda_backend() {
  register_device_services(DeviceType::cuda, make_cuda_services());
  register_backend(DeviceType::cuda, std::make_unique<CudaBackend>());
}

}  // namespace opsnn::ops
