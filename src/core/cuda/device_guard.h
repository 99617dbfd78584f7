// DeviceGuard: makes a CUDA device current for a scope and restores the previous one on exit, so the
// services and kernels of one tensor's device never disturb the caller's current device. Destructors take
// the std::nothrow form.
#pragma once

#include <cuda_runtime.h>

#include <new>

#include "core/cuda/cuda_check.h"

namespace opsnn::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    OPSNN_CUDA_CHECK(cudaGetDevice(&previous_));
    changed_ = previous_ != index;
    if (changed_) OPSNN_CUDA_CHECK(cudaSetDevice(index));
  }
  // For destructors: never throws; a failed query or switch leaves the current device as it is.
  DeviceGuard(int index, std::nothrow_t) noexcept {
    changed_ = cudaGetDevice(&previous_) == cudaSuccess && previous_ != index && cudaSetDevice(index) == cudaSuccess;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace opsnn::cuda
