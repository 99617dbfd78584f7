// Shared by the GPU parts of opsnn-bench: a check for CUDA runtime calls that throws opsnn::Error with
// the call and the runtime's message (the benchmark's main turns it into exit code 1).
#pragma once

#include <cuda_runtime.h>

#include "opsnn/core/error.h"

#define BENCH_CUDA_CHECK(call)                                                                  \
  do {                                                                                        \
    cudaError_t bench_status = (call);                                                        \
    OPSNN_CHECK(bench_status == cudaSuccess, #call, " failed: ", cudaGetErrorString(bench_status)); \
  } while (0)
