// DataLoader: batches of a Dataset in a seeded per-epoch order, with optional crop/flip augmentation,
// produced ahead of time by background worker threads into a bounded queue. Every batch is a pure
// function of (seed, epoch, batch index), so a loader restored to a saved position yields exactly the
// batches that would have come next, whatever the number of workers. With pin_memory the batches live in
// page-locked buffers that the loader recycles (BatchPool), ready for asynchronous upload (DeviceLoader).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "opsnn/data/batch_pool.h"
#include "opsnn/data/dataset.h"
#include "opsnn/data/transforms.h"

namespace opsnn::data {

// The largest LoaderOptions::prefetch: every prefetched batch is held in memory at once.
inline constexpr int64_t kMaxPrefetch = 1024;

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;      // a fresh Philox Fisher-Yates order every epoch
  bool drop_last = false;   // drop the final partial batch of each epoch
  uint64_t seed = 0;        // drives shuffling and augmentation
  AugmentOptions augment;   // image datasets only
  int64_t num_workers = 1;  // background threads producing batches; 0 = produce inside next()
  int64_t prefetch = 2;     // batches produced ahead of the consumer (queue capacity), in [1, kMaxPrefetch]
  // Batches in page-locked host memory (needs a CUDA device) from prefetch + 2 buffers allocated once
  // and reused: the ready queue, the batch the consumer holds, and one still being read by its upload.
  bool pin_memory = false;
  // Data parallelism: this loader is rank shard_rank of shard_count. Every epoch's order is cut into
  // global batches of batch_size * shard_count samples, and this rank's batch is its batch_size-long part
  // of each (rank r: positions [r * batch_size, (r + 1) * batch_size) of the global batch), so the ranks
  // together see each sample once per epoch, and shard_count ranks of batch_size see exactly the batches
  // one process of batch_size * shard_count would. A partial last global batch is split as evenly as
  // possible (the first ranks get one more); it is dropped when drop_last is set or it cannot give every
  // rank a sample. Positions count global batches.
  int64_t shard_rank = 0;
  int64_t shard_count = 1;

  // Evaluation: dataset order, no augmentation, the last partial batch kept.
  static LoaderOptions evaluation(int64_t batch_size, int64_t num_workers = 1) {
    LoaderOptions options;
    options.batch_size = batch_size;
    options.shuffle = false;
    options.drop_last = false;
    options.num_workers = num_workers;
    return options;
  }
};

// Where a loader stands: the batch next() returns next. batch == batches_per_epoch() means the epoch is
// exhausted and next() will report its end (then move to batch 0 of epoch + 1).
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const LoaderPosition&) const = default;
};

class DataLoader {
 public:
  // Throws ConfigError for bad options (batch_size < 1, prefetch outside [1, kMaxPrefetch], augmentation
  // of non-image data, an epoch without any batch because drop_last drops the only partial batch).
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, LoaderPosition start = {});
  ~DataLoader();  // stops and joins the workers; pending batches are discarded
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Samples seen per epoch (batches_per_epoch * batch_size minus the partial batch shortfall).
  int64_t samples_per_epoch() const;
  // Page-locked batch buffers allocated so far: prefetch + 2 unless the consumer holds more batches at once
  // (0 without pin_memory).
  int64_t pinned_buffer_count() const { return buffers_ ? buffers_->buffer_count() : 0; }

  // The next batch of the current epoch, or nullopt when the epoch is exhausted (the position then moves
  // to batch 0 of the next epoch). An exception thrown while producing this batch (by the dataset, in a
  // worker thread) is rethrown here, on the caller's thread.
  std::optional<Batch> next();

  LoaderPosition position() const;
  // Continues from `position` (e.g. one saved in a checkpoint): prefetched batches are discarded.
  void seek(LoaderPosition position);

  // The batch at a position, computed directly on the calling thread (what next() yields there).
  Batch make_batch(LoaderPosition position) const;
  // The dataset indices of a batch.
  std::vector<int64_t> batch_indices(LoaderPosition position) const;

 private:
  // Batches are numbered by a sequence over all epochs: epoch * (batches_per_epoch + 1) + batch, where
  // the extra slot of each epoch is its end marker.
  int64_t sequence_of(LoaderPosition position) const {
    return position.epoch * (batches_per_epoch_ + 1) + position.batch;
  }
  LoaderPosition position_of(int64_t sequence) const {
    return {sequence / (batches_per_epoch_ + 1), sequence % (batches_per_epoch_ + 1)};
  }
  std::shared_ptr<const std::vector<int64_t>> epoch_order(int64_t epoch) const;
  void start_workers();
  void stop_workers();
  void worker_loop();

  struct Slot {
    std::optional<Batch> batch;  // empty for an end-of-epoch marker
    std::exception_ptr error;
  };

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  int64_t batches_per_epoch_ = 0;
  std::unique_ptr<BatchPool> buffers_;  // with pin_memory

  mutable std::mutex order_mutex_;  // guards the cached epoch orders
  mutable std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> order_cache_;

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable slot_ready_, slot_taken_;
  int64_t consumer_sequence_ = 0;  // the sequence number next() returns
  int64_t claim_sequence_ = 0;     // the next sequence number a worker will produce
  std::map<int64_t, Slot> ready_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace opsnn::data
