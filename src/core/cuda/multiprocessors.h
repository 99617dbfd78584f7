// The SM count of a CUDA device, queried once per device: what launch heuristics (grid sizes, how many
// partial results a reduction leaves) scale with. Host code; .cu and .cpp files both use it.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/cuda/cuda_check.h"

namespace opsnn::cuda {

// Of device `device`.
inline int64_t multiprocessor_count(int device) {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> cached[kCachedDevices];
  if (device < kCachedDevices) {
    const int known = cached[device].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int count = 0;
  OPSNN_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  if (device < kCachedDevices) cached[device].store(count, std::memory_order_relaxed);
  return count;
}

// Of the current device.
inline int64_t multiprocessor_count() {
  int device = 0;
  OPSNN_CUDA_CHECK(cudaGetDevice(&device));
  return multiprocessor_count(device);
}

}  // namespace opsnn::cuda
