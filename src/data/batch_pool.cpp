// BatchPool: the shared pool state (buffers, the free list, the copies each free buffer waits for) and the
// leases (BatchBuffer) that give buffers back when their batch is gone.
#include "opsnn/data/batch_pool.h"

#include <deque>
#include <mutex>

#include "opsnn/core/error.h"

namespace opsnn::data {
namespace detail {

// Outlives the BatchPool while any lease does: leases own it, so batches held after their loader is
// destroyed still view live memory.
struct BatchPoolState {
  struct Slot {
    std::shared_ptr<Storage> inputs, labels;
    std::vector<std::shared_ptr<DeviceEvent>> readers;  // copies that may still read the slot's last batch
  };

  Shape sample_shape;
  DType input_dtype = DType::f32, label_dtype = DType::i64;
  int64_t batch_size = 0;
  HostMemory memory = HostMemory::pageable;

  std::mutex mutex;  // guards slots and free_slots
  std::vector<Slot> slots;
  std::deque<size_t> free_slots;  // given back first = taken first: its copies are the likeliest done

  ~BatchPoolState() {
    // Every slot is free now (a held one would keep this state alive). Free no buffer under a copy.
    for (Slot& slot : slots) {
      for (const auto& reader : slot.readers) {
        try {
          reader->wait();
        } catch (...) {  // a failed device: nothing left to wait for
        }
      }
    }
  }

  Slot allocate_slot() const {
    int64_t sample_numel = shape_numel(sample_shape);
    Slot slot;
    slot.inputs = std::make_shared<Storage>(static_cast<size_t>(batch_size * sample_numel) * dtype_size(input_dtype),
                                            kCPU, memory);
    slot.labels = std::make_shared<Storage>(static_cast<size_t>(batch_size) * dtype_size(label_dtype), kCPU, memory);
    return slot;
  }

  void give_back(size_t slot, std::vector<std::shared_ptr<DeviceEvent>> readers) {
    std::lock_guard<std::mutex> lock(mutex);
    slots[slot].readers = std::move(readers);
    free_slots.push_back(slot);
  }
};

}  // namespace detail

BatchBuffer::~BatchBuffer() { pool_->give_back(slot_, std::move(readers_)); }

void BatchBuffer::release_after(std::shared_ptr<DeviceEvent> reader) {
  OPSNN_CHECK(reader != nullptr, "BatchBuffer::release_after needs an event");
  readers_.push_back(std::move(reader));
}

BatchPool::BatchPool(const Dataset& dataset, int64_t batch_size, HostMemory memory, int64_t reserve)
    : batch_size_(batch_size), state_(std::make_shared<detail::BatchPoolState>()) {
  OPSNN_CHECK(batch_size >= 1, "BatchPool batch_size must be >= 1, got ", batch_size);
  OPSNN_CHECK(reserve >= 0, "BatchPool reserve must be >= 0, got ", reserve);
  state_->sample_shape = dataset.sample_shape();
  state_->input_dtype = dataset.input_dtype();
  state_->label_dtype = dataset.label_dtype();
  state_->batch_size = batch_size;
  state_->memory = memory;
  for (int64_t i = 0; i < reserve; ++i) {
    state_->slots.push_back(state_->allocate_slot());
    state_->free_slots.push_back(state_->slots.size() - 1);
  }
}

int64_t BatchPool::buffer_count() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return static_cast<int64_t>(state_->slots.size());
}

Batch BatchPool::acquire(int64_t count) {
  OPSNN_CHECK(count >= 0 && count <= batch_size_, "BatchPool: a batch of ", count, " samples does not fit buffers of ",
              batch_size_);
  detail::BatchPoolState& pool = *state_;
  size_t slot = 0;
  std::vector<std::shared_ptr<DeviceEvent>> readers;
  Storage* inputs = nullptr;
  Storage* labels = nullptr;
  {
    std::unique_lock<std::mutex> lock(pool.mutex);
    if (pool.free_slots.empty()) {
      lock.unlock();
      detail::BatchPoolState::Slot fresh = pool.allocate_slot();  // unlocked: page-locking is slow
      lock.lock();
      pool.slots.push_back(std::move(fresh));
      slot = pool.slots.size() - 1;
    } else {
      slot = pool.free_slots.front();
      pool.free_slots.pop_front();
      readers.swap(pool.slots[slot].readers);
    }
    inputs = pool.slots[slot].inputs.get();
    labels = pool.slots[slot].labels.get();
  }
  // The buffer's previous batch may still be on its way to a device. The lease holds the copies while
  // they are waited for, so a wait that throws gives the slot back with the rest.
  std::shared_ptr<BatchBuffer> lease(new BatchBuffer(state_, slot));
  lease->readers_ = std::move(readers);
  while (!lease->readers_.empty()) {
    lease->readers_.back()->wait();
    lease->readers_.pop_back();
  }
  Shape input_shape{count};
  input_shape.insert(input_shape.end(), pool.sample_shape.begin(), pool.sample_shape.end());
  Batch batch;
  // Aliasing pointers: the tensors own the lease, not the storage, so the last of them gives the buffer back.
  batch.inputs = Tensor::view_of(std::shared_ptr<Storage>(lease, inputs), 0, input_shape, pool.input_dtype);
  batch.labels = Tensor::view_of(std::shared_ptr<Storage>(lease, labels), 0, {count}, pool.label_dtype);
  batch.buffer = std::move(lease);
  return batch;
}

}  // namespace opsnn::data
