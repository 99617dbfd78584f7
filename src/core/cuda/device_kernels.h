// Launchers for the CUDA byte-level primitives behind DeviceServices (copies with dtype conversion,
// fill, accumulate). Plain C++ signatures so .cpp files can call them without CUDA headers.
#pragma once

#include <cstdint>

#include "opsnn/core/dtype.h"

namespace opsnn::cuda {

// Contiguous destination from a strided source of up to kMaxDims dimensions, converting dtypes; the two
// must not overlap (a contiguous same-dtype copy is a cudaMemcpyAsync).
inline constexpr int kMaxDims = 8;
void launch_strided_copy(void* destination, DType destination_dtype, const void* source, DType source_dtype, int dim,
                         const int64_t* shape, const int64_t* source_strides, void* stream);
void launch_fill(void* destination, DType dtype, double value, int64_t count, void* stream);
void launch_accumulate(void* destination, const void* source, DType dtype, double alpha, int64_t count, void* stream);
// destination[i] += source[i] for an f32 destination and an f16 or bf16 source, in one pass; false (nothing
// launched) for other pairs.
bool launch_accumulate_converted(void* destination, DType destination_dtype, const void* source, DType source_dtype,
                                 int64_t count, void* stream);

}  // namespace opsnn::cuda
