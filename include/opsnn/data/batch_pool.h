// BatchPool: a few reusable host buffers for a loader's batches. Page-locked (pinned) memory is costly to
// allocate and pinning stalls concurrent GPU work, so a loader with pin_memory allocates its buffers once
// and recycles them: each buffer is handed out as a Batch viewing it and comes back when that batch is
// gone and the device copies reading it have finished.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "opsnn/core/storage.h"
#include "opsnn/data/dataset.h"

namespace opsnn::data {

namespace detail {
struct BatchPoolState;
}

// The lease of one pooled buffer, shared with the tensors of the Batch viewing it (Batch::buffer): the
// buffer returns to its pool when the last of them is gone, and is not handed out again before the
// events given to release_after() have passed.
class BatchBuffer {
 public:
  ~BatchBuffer();
  BatchBuffer(const BatchBuffer&) = delete;
  BatchBuffer& operator=(const BatchBuffer&) = delete;

  // `reader` marks the end of an asynchronous copy reading this buffer: the pool waits for it before
  // the buffer takes another batch. Called by the batch's holder (one thread).
  void release_after(std::shared_ptr<DeviceEvent> reader);

 private:
  friend class BatchPool;
  BatchBuffer(std::shared_ptr<detail::BatchPoolState> pool, size_t slot) : pool_(std::move(pool)), slot_(slot) {}

  std::shared_ptr<detail::BatchPoolState> pool_;
  size_t slot_;
  std::vector<std::shared_ptr<DeviceEvent>> readers_;
};

class BatchPool {
 public:
  // Buffers for batches of up to `batch_size` samples of `dataset` (its sample shape and dtypes) in
  // `memory`; `reserve` of them are allocated at once.
  BatchPool(const Dataset& dataset, int64_t batch_size, HostMemory memory, int64_t reserve);
  // Batches still held stay valid; the buffers are freed when the last of them is gone.
  ~BatchPool() = default;
  BatchPool(const BatchPool&) = delete;
  BatchPool& operator=(const BatchPool&) = delete;

  // A batch of `count` <= batch_size samples viewing a free buffer (contiguous inputs [count, sample
  // shape...] and labels [count], contents undefined, epoch and index 0). Among the free buffers the one
  // given back first is taken, after waiting for the copies still reading it. Only when every buffer is
  // held is another allocated (and kept), so a consumer that holds many batches never deadlocks a loader;
  // a loader's steady state needs prefetch + 2 (see DataLoader). Safe to call from several threads.
  Batch acquire(int64_t count);

  int64_t buffer_count() const;  // buffers allocated so far
  int64_t batch_size() const { return batch_size_; }

 private:
  int64_t batch_size_;
  std::shared_ptr<detail::BatchPoolState> state_;
};

}  // namespace opsnn::data
