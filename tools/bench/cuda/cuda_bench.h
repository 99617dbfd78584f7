// Shared by the GPU parts of opsnn-bench: a check for CUDA runtime calls that throws opsnn::Error with
// the call and the runtime's message (the benchmark's main turns it into exit code 1), and event timing
// on the default stream (cuda_timing.cpp).
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "opsnn/core/error.h"

#define BENCH_CUDA_CHECK(call)                                                                      \
  do {                                                                                              \
    cudaError_t bench_status = (call);                                                              \
    OPSNN_CHECK(bench_status == cudaSuccess, #call, " failed: ", cudaGetErrorString(bench_status)); \
  } while (0)

namespace opsnn::bench {

// Median milliseconds of one fn() over `repeats` calls, each between two events, after `warmup` calls.
double median_ms(const std::function<void()>& fn, int warmup, int repeats);
// Mean milliseconds of one fn() over `repeats` back-to-back calls between two events, after one call.
double mean_ms(const std::function<void()>& fn, int repeats);

}  // namespace opsnn::bench
