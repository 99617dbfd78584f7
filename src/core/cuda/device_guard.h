// DeviceGuard: makes a CUDA device current for a scope and restores the previous one on exit, so the
// services and kernels of one tensor's device never disturb the caller's current device. QuietDeviceGuard
// is the same for destructors: it never throws, and a failed query or switch leaves the device as it is.
#pragma once

#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"

namespace opsnn::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    OPSNN_CUDA_CHECK(cudaGetDevice(&previous_));
    changed_ = previous_ != index;
    if (changed_) OPSNN_CUDA_CHECK(cudaSetDevice(index));
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

class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int index) noexcept {
    switched_ = cudaGetDevice(&previous_) == cudaSuccess && previous_ != index && cudaSetDevice(index) == cudaSuccess;
  }
  ~QuietDeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace opsnn::cuda
