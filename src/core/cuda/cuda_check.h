// Check macros for CUDA runtime, cuBLAS and cuDNN calls: a failure throws opsnn::Error naming the call,
// the library's error string and file:line.
#pragma once

#include <cuda_runtime.h>

#include "opsnn/core/error.h"

#define OPSNN_CUDA_CHECK(call)                                                                          \
  do {                                                                                                  \
    cudaError_t opsnn_cuda_status = (call);                                                             \
    if (opsnn_cuda_status != cudaSuccess)                                                               \
      throw ::opsnn::Error(::opsnn::detail::concat("CUDA error '", cudaGetErrorString(opsnn_cuda_status), \
                                                   "' in ", #call, " at ", __FILE__, ":", __LINE__));   \
  } while (0)
