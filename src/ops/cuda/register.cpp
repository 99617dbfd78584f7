// Registers the CUDA device services (and, once they exist, the CUDA compute kernels).
#include "ops/cuda/cuda_backend.h"

namespace opsnn::ops {

void register_cuda_backend() { register_device_services(DeviceType::cuda, make_cuda_services()); }

}  // namespace opsnn::ops
