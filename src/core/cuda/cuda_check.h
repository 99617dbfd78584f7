// Check macros for CUDA runtime, cuBLAS and cuDNN calls: a failure throws opsnn::Error naming the call,
// the library's error string and file:line.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "opsnn/core/error.h"

#define OPSNN_CUDA_CHECK(call)                                                                                     \
  do {                                                                                                             \
    cudaError_t opsnn_cuda_status = (call);                                                                        \
    if (opsnn_cuda_status != cudaSuccess)                                                                          \
      throw ::opsnn::Error(::opsnn::detail::concat("CUDA error '", cudaGetErrorString(opsnn_cuda_status), "' in ", \
                                                   #call, " at ", __FILE__, ":", __LINE__));                       \
  } while (0)

#define OPSNN_CUBLAS_CHECK(call)                                                                                 \
  do {                                                                                                           \
    cublasStatus_t opsnn_cublas_status = (call);                                                                 \
    if (opsnn_cublas_status != CUBLAS_STATUS_SUCCESS)                                                            \
      throw ::opsnn::Error(::opsnn::detail::concat("cuBLAS error '", cublasGetStatusString(opsnn_cublas_status), \
                                                   "' in ", #call, " at ", __FILE__, ":", __LINE__));            \
  } while (0)

#define OPSNN_CUDNN_CHECK(call)                                                                                       \
  do {                                                                                                                \
    cudnnStatus_t opsnn_cudnn_status = (call);                                                                        \
    if (opsnn_cudnn_status != CUDNN_STATUS_SUCCESS)                                                                   \
      throw ::opsnn::Error(::opsnn::detail::concat("cuDNN error '", cudnnGetErrorString(opsnn_cudnn_status), "' in ", \
                                                   #call, " at ", __FILE__, ":", __LINE__));                          \
  } while (0)
