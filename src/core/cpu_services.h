// The CPU's DeviceServices: 64-byte aligned host memory and OpenMP element loops for copies and casts.
#pragma once

#include <memory>

#include "opsnn/core/storage.h"

namespace opsnn {

std::unique_ptr<DeviceServices> make_cpu_services();

// Copies a strided source of `dim` dimensions into a contiguous destination, converting dtypes.
void cpu_strided_copy(void* destination, DType destination_dtype, const void* source, DType source_dtype, int dim,
                      const int64_t* shape, const int64_t* source_strides);

}  // namespace opsnn
