// The CUDA CopyStream: uploads on a stream of their own, ordered against the legacy default stream (the
// compute queue) by events only.
//
// The stream is created with cudaStreamNonBlocking: a blocking stream would synchronize implicitly with
// the legacy default stream (each waiting for the other's earlier work), and copies could never overlap
// compute. So every ordering the caller needs is explicit:
//   compute -> copy: wait_for_compute() records an event on the legacy stream and makes this stream wait
//     for it. Destination memory comes from the stream-ordered pool on the legacy stream and may have
//     been freed there by tensors whose kernels are still running; it is ours only in legacy-stream order.
//   copy -> compute: record() returns an event after the copies; CudaEvent::make_compute_wait() makes the
//     legacy stream wait for it before any kernel reads the uploaded data.
//   copy -> host: CudaEvent::wait() blocks until the copy has read its (pinned) source, so the buffer can
//     be rewritten.
#include "core/cuda/copy_stream.h"

#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"

namespace opsnn::cuda {
namespace {

class CudaEvent final : public DeviceEvent {
 public:
  explicit CudaEvent(int device_index) : device_index_(device_index) {
    DeviceGuard guard(device_index_);
    OPSNN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  // Destroying an event whose work is still pending is allowed: CUDA releases it once the work is done.
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t handle() const { return event_; }
  void record(cudaStream_t stream) {
    DeviceGuard guard(device_index_);
    OPSNN_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  void wait() override { OPSNN_CUDA_CHECK(cudaEventSynchronize(event_)); }
  void make_compute_wait() override {
    DeviceGuard guard(device_index_);  // cudaStreamLegacy is the legacy stream of the current device
    OPSNN_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, event_, 0));
  }

 private:
  int device_index_;
  cudaEvent_t event_ = nullptr;
};

class CudaCopyStream final : public CopyStream {
 public:
  explicit CudaCopyStream(int device_index) : device_index_(device_index), compute_point_(device_index) {
    DeviceGuard guard(device_index_);
    OPSNN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaCopyStream() override {
    // Never throws: a failed wait still destroys the stream (CUDA finishes its work first).
    DeviceGuard guard(device_index_, std::nothrow);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  CudaCopyStream(const CudaCopyStream&) = delete;
  CudaCopyStream& operator=(const CudaCopyStream&) = delete;

  void wait_for_compute() override {
    // One event serves every call: cudaStreamWaitEvent waits for the record made just before it.
    compute_point_.record(cudaStreamLegacy);
    DeviceGuard guard(device_index_);
    OPSNN_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_point_.handle(), 0));
  }
  void copy_from_host(void* destination, const void* host_source, size_t bytes) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_index_);
    OPSNN_CUDA_CHECK(cudaMemcpyAsync(destination, host_source, bytes, cudaMemcpyHostToDevice, stream_));
  }
  std::shared_ptr<DeviceEvent> record() override {
    auto event = std::make_shared<CudaEvent>(device_index_);
    event->record(stream_);
    return event;
  }

 private:
  int device_index_;
  CudaEvent compute_point_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<CopyStream> make_copy_stream(int device_index) {
  return std::make_unique<CudaCopyStream>(device_index);
}

}  // namespace opsnn::cuda
