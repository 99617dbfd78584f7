// CUDA graphs: GPU work recorded once and replayed with one launch, which removes the host's per-kernel
// launch cost and the GPU's idle gaps between kernels (what a training step of many small kernels loses).
#pragma once

#include <functional>
#include <memory>

#include "opsnn/core/device.h"

namespace opsnn {

class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  // Enqueues the recorded work once, ordered after the work already enqueued on the device and before
  // the work enqueued after it. Checks a replay cannot make on the spot (the index range of
  // cross_entropy's targets and of embedding lookups) are made on the device and reported here: a
  // replay throws the error (ShapeError) of a check that an earlier replay, already finished, failed.
  virtual void replay() = 0;
  // Waits for every replay enqueued so far, then throws the error of any check one of them failed.
  virtual void synchronize() = 0;
};

// Records `work` on `device` into a CUDA graph without running it: every kernel, copy and stream-ordered
// allocation the framework makes inside it is recorded, and only replay() runs them. What the work
// needs:
// - Static shapes and addresses: it reads and writes tensors made before the capture (inputs copied in
//   before each replay, results copied out after), and every tensor it makes itself is gone when it
//   returns (UsageError otherwise, naming how many outlived it).
// - No host reads (item(), to(Device::cpu())) and nothing that runs only once: run the work eagerly
//   first, so that convolution searches and lazily made state happen outside the graph. A call that a
//   graph cannot record ends the capture with UsageError naming the CUDA error.
// - Host-side state the work advances (counters, an optimizer's host copy of its step) advances only
//   during the capture; the optimizers' device steps keep their own state on the device.
// The tensors the work reads and the modules and optimizer it uses must outlive the graph. While the
// capture runs, no other thread may queue work for the device (its legacy stream would join the capture).
// DeviceError on a device without graphs (the CPU); not with data parallelism (its reductions run on a
// stream of their own).
std::unique_ptr<CapturedGraph> capture_graph(Device device, const std::function<void()>& work);

}  // namespace opsnn
