// The stream a thread's CUDA work goes to. Every kernel launch, stream-ordered allocation and free, copy
// and cuBLAS/cuDNN call of the framework takes current_stream(): the legacy default stream (nullptr)
// unless a graph capture (capture.cpp) has set its capturing stream for the thread. So eager code keeps
// the legacy stream's ordering with everything else, and a capture records the same calls into a graph.
#pragma once

#include <cuda_runtime.h>

namespace opsnn::cuda {

cudaStream_t current_stream();

// Makes `stream` the thread's current stream for its lifetime, then restores the previous one.
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace opsnn::cuda
