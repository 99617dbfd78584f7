// The CUDA CopyStream (storage.h): a non-blocking stream for host-to-device uploads beside the legacy
// default stream that runs every kernel, and the CUDA events that order the two.
#pragma once

#include <memory>

#include "opsnn/core/storage.h"

namespace opsnn::cuda {

std::unique_ptr<CopyStream> make_copy_stream(int device_index);

}  // namespace opsnn::cuda
