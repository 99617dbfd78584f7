// Registers the CUDA device services, the CUDA compute kernels and the convolution-algorithm store.
#include <memory>

#include "ops/conv_algorithm_store.h"
#include "ops/cuda/cuda_backend.h"

namespace opsnn::ops {

void register_cuda_backend() {
  register_device_services(DeviceType::cuda, make_cuda_services());
  register_backend(DeviceType::cuda, std::make_unique<CudaBackend>());
  register_conv_algorithm_store(make_cuda_conv_algorithm_store());
}

}  // namespace opsnn::ops
