// The CUDA kernel of pair_scatter.h, with a plain-C++ signature for the registration.
#pragma once

#include <cstdint>

namespace opsnn::dist {

void cuda_pair_scatter_add(int device_index, float* dense, const int64_t* indices, const float* values, int64_t count);

}  // namespace opsnn::dist
