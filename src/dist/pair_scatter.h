// Adding exchanged (index, value) pairs into a dense array on the device that holds them: the top-k
// exchange of data parallelism. Per device type, registered like the other kernels (the CPU's here,
// the CUDA one by the composition root). Indices within one call are distinct (a rank's selection), so
// a call has no conflicting writes; calls are ordered, so sums over ranks follow rank order.
#pragma once

#include <cstdint>

#include "opsnn/core/device.h"

namespace opsnn::dist {

// dense[indices[i]] += values[i] for i < count with indices[i] >= 0 (padding is -1). Device pointers;
// enqueued on the device's compute stream.
using PairScatterAdd = void (*)(int device_index, float* dense, const int64_t* indices, const float* values,
                                int64_t count);

void register_pair_scatter_add(DeviceType type, PairScatterAdd kernel);
// The kernel of device's type; DeviceError naming the device when none is registered.
PairScatterAdd pair_scatter_add(Device device);

}  // namespace opsnn::dist
