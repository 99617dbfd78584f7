// DeviceLoader: batches uploaded one ahead on a copy stream, and the ordering that makes it safe.
//
// Three streams of work meet here: the loader's workers filling pinned buffers, the copy stream, and the
// compute queue (the legacy default stream, where every kernel runs and the device allocator orders its
// allocations and frees). next() hands out batch k and starts batch k+1's upload:
//   1. The destination tensors of k+1 are allocated on the compute queue. Their memory may have been freed
//      there by tensors whose kernels are still queued, so the copy stream first waits for the compute
//      work queued so far (CopyStream::wait_for_compute). That is batch k-1's tail (its optimizer step):
//      batch k's kernels are queued only after next() returns, so the copy overlaps them.
//   2. The copies read the pinned buffer; the event recorded after them goes to the buffer's lease
//      (BatchBuffer::release_after): the loader rewrites the buffer only after that event has passed.
//   3. When batch k+1 is handed out (the next call), the compute queue is made to wait for the event, so
//      no kernel reads the batch before its copy has landed. Its device tensors are freed on the compute
//      queue later, after that wait, so the freed memory is never reused under a pending copy.
// An upload dropped before being handed out (seek, destruction) gets the same compute-queue wait before
// its tensors are freed.
#include "opsnn/data/device_loader.h"

#include <utility>

#include "opsnn/core/error.h"

namespace opsnn::data {

DeviceLoader::DeviceLoader(std::unique_ptr<DataLoader> loader, Device device, std::unique_ptr<CopyStream> copy_stream)
    : host_(std::move(loader)), device_(device), copy_stream_(std::move(copy_stream)) {
  OPSNN_CHECK(host_ != nullptr, "DeviceLoader needs a DataLoader");
  if (!copy_stream_ && host_->options().pin_memory && !device_.is_cpu())
    copy_stream_ = device_services(device_).make_copy_stream(device_.index);
}

DeviceLoader::~DeviceLoader() {
  try {
    drop_upload();
  } catch (...) {  // a failed device: the stream is gone with it
  }
}

std::optional<Batch> DeviceLoader::next() {
  if (!copy_stream_) {
    std::optional<Batch> batch = host_->next();
    if (batch && !device_.is_cpu()) {
      // Synchronous copies: the host buffer may be reused as soon as they return.
      batch->inputs = batch->inputs.to(device_);
      batch->labels = batch->labels.to(device_);
      batch->buffer.reset();
    }
    return batch;
  }
  Upload current = ahead_ ? std::move(*ahead_) : start_upload();
  ahead_.reset();
  if (current.error) std::rethrow_exception(current.error);
  // An epoch's end is handed out without looking ahead: the position then is batch 0 of the next epoch.
  if (!current.batch) return std::nullopt;
  ahead_ = start_upload();              // before the wait below, so it waits only for the compute queued so far
  current.copied->make_compute_wait();  // batch k's kernels, queued after this returns, read a landed copy
  return std::move(current.batch);
}

LoaderPosition DeviceLoader::position() const { return ahead_ ? ahead_->position : host_->position(); }

void DeviceLoader::seek(LoaderPosition position) {
  drop_upload();
  host_->seek(position);
}

DeviceLoader::Upload DeviceLoader::start_upload() {
  Upload upload;
  upload.position = host_->position();
  std::optional<Batch> host_batch;
  try {
    host_batch = host_->next();
  } catch (...) {
    upload.error = std::current_exception();
    return upload;
  }
  if (!host_batch) return upload;
  const Tensor& inputs = host_batch->inputs;
  const Tensor& labels = host_batch->labels;
  OPSNN_CHECK(inputs.is_contiguous() && labels.is_contiguous(), "DeviceLoader: loader batches are contiguous");
  Batch device_batch;
  device_batch.inputs = Tensor::empty(inputs.shape(), inputs.dtype(), device_);
  device_batch.labels = Tensor::empty(labels.shape(), labels.dtype(), device_);
  device_batch.epoch = host_batch->epoch;
  device_batch.index = host_batch->index;
  copy_stream_->wait_for_compute();  // after the allocations just queued (step 1 above)
  copy_stream_->copy_from_host(device_batch.inputs.data_ptr(), inputs.data_ptr(), inputs.nbytes());
  copy_stream_->copy_from_host(device_batch.labels.data_ptr(), labels.data_ptr(), labels.nbytes());
  upload.copied = copy_stream_->record();
  if (host_batch->buffer) host_batch->buffer->release_after(upload.copied);
  upload.batch = std::move(device_batch);
  return upload;  // host_batch goes: its buffer returns to the pool, guarded by the event
}

void DeviceLoader::drop_upload() {
  if (ahead_ && ahead_->copied) ahead_->copied->make_compute_wait();  // frees below queue after the copies
  ahead_.reset();
}

}  // namespace opsnn::data
