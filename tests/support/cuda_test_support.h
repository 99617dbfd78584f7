// For [cuda] tests: the first GPU, and the early return (with a note naming what did not run) where the
// machine has none, so the tests skip on CPU-only machines such as CI.
#pragma once

#include <string>

#include "opsnn/core/device.h"
#include "opsnn/core/storage.h"
#include "support/catch.h"

namespace opsnn::testing {

inline const Device kGpu{DeviceType::cuda, 0};

// True where no CUDA device exists; `what` names the skipped tests in the warning.
inline bool gpu_missing(const std::string& what) {
  if (cuda_device_count() > 0) return false;
  WARN("no CUDA device: " << what << " did not run");
  return true;
}

}  // namespace opsnn::testing
