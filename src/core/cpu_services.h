// The CPU's DeviceServices: 64-byte aligned host memory and OpenMP element loops for copies and casts.
#pragma once

#include <memory>

#include "opsnn/core/storage.h"

namespace opsnn {

std::unique_ptr<DeviceServices> make_cpu_services();

// Whether CPU buffers of 8 MB and more (in 2 MB aligned regions, each buffer a few lines in) are advised as
// transparent huge pages: yes unless OPSNN_HUGE_PAGES=0 (read once; a value other than 0 or 1 throws
// ConfigError naming it).
bool cpu_huge_pages();

// Copies a strided source of `dim` dimensions into a contiguous destination, converting dtypes.
void cpu_strided_copy(void* destination, DType destination_dtype, const void* source, DType source_dtype, int dim,
                      const int64_t* shape, const int64_t* source_strides);

}  // namespace opsnn
