// Registration of the CUDA backend (device services; compute kernels arrive with the CUDA backend issue).
#pragma once

#include <memory>

#include "opsnn/core/storage.h"

namespace opsnn {
std::unique_ptr<DeviceServices> make_cuda_services();
}

namespace opsnn::ops {
void register_cuda_backend();
}
