// DataLoader: the epoch order, batch assembly (into pooled pinned buffers with pin_memory), and the worker
// threads that fill the ready queue ahead of the consumer (ordered delivery by sequence number, bounded by
// `prefetch`).
#include "opsnn/data/loader.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "opsnn/core/error.h"

namespace opsnn::data {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, LoaderPosition start)
    : dataset_(std::move(dataset)), options_(options) {
  OPSNN_CHECK_AS(UsageError, dataset_ != nullptr, "DataLoader needs a dataset");
  OPSNN_CHECK_AS(ConfigError, options_.batch_size >= 1, "DataLoader batch_size must be >= 1, got ",
                 options_.batch_size);
  OPSNN_CHECK_AS(ConfigError, options_.num_workers >= 0 && options_.num_workers <= 256,
                 "DataLoader num_workers must be in [0, 256], got ", options_.num_workers);
  // Each prefetched batch is a whole batch in memory, and sequence numbers are counted up to
  // consumer + prefetch: an unbounded queue exhausts memory long before it could help throughput.
  OPSNN_CHECK_AS(ConfigError, options_.prefetch >= 1 && options_.prefetch <= kMaxPrefetch,
                 "DataLoader prefetch must be in [1, ", kMaxPrefetch, "], got ", options_.prefetch);
  OPSNN_CHECK_AS(ConfigError, options_.augment.crop_padding >= 0, "augment crop_padding must be >= 0, got ",
                 options_.augment.crop_padding);
  OPSNN_CHECK_AS(ConfigError, !options_.augment.any() || dataset_->is_image(), dataset_->name(),
                 ": crop/flip augmentation applies to [C, H, W] images only, samples are ",
                 shape_str(dataset_->sample_shape()));
  OPSNN_CHECK_AS(ConfigError,
                 options_.shard_count >= 1 && options_.shard_rank >= 0 && options_.shard_rank < options_.shard_count,
                 "DataLoader shard ", options_.shard_rank, " of ", options_.shard_count, " is out of range");
  OPSNN_CHECK_AS(ConfigError, options_.batch_size <= std::numeric_limits<int64_t>::max() / options_.shard_count,
                 "DataLoader batch_size ", options_.batch_size, " x ", options_.shard_count, " ranks overflows");
  const int64_t samples = dataset_->size();
  const int64_t global_batch = options_.batch_size * options_.shard_count;
  // Not (samples + batch_size - 1) / batch_size: that wraps for a batch_size near INT64_MAX.
  const int64_t full_batches = samples / global_batch;
  const int64_t remainder = samples % global_batch;
  batches_per_epoch_ = full_batches + (!options_.drop_last && remainder >= options_.shard_count ? 1 : 0);
  OPSNN_CHECK_AS(
      ConfigError, batches_per_epoch_ >= 1, dataset_->name(), " has ", samples, " samples: not one batch of ",
      options_.batch_size,
      options_.shard_count > 1 ? ::opsnn::detail::concat(" on each of ", options_.shard_count, " ranks") : "",
      options_.drop_last ? " (drop_last drops the partial one)" : "");
  // At most `prefetch` batches are claimed by workers or wait in the queue; the consumer holds one, and
  // an asynchronous upload may still read the one before.
  if (options_.pin_memory)
    // No batch is larger than the dataset: a huge batch_size must not size the pooled buffers.
    buffers_ = std::make_unique<BatchPool>(*dataset_, std::min(options_.batch_size, samples), HostMemory::pinned,
                                           options_.prefetch + 2);
  seek(start);
}

DataLoader::~DataLoader() { stop_workers(); }

int64_t DataLoader::samples_per_epoch() const {
  // This rank's samples: its batch_size of every full global batch, and its share of a kept partial one.
  const int64_t global_batch = options_.batch_size * options_.shard_count;
  const int64_t full = dataset_->size() / global_batch, remainder = dataset_->size() % global_batch;
  int64_t mine = full * options_.batch_size;
  if (batches_per_epoch_ > full)
    mine += remainder / options_.shard_count + (options_.shard_rank < remainder % options_.shard_count ? 1 : 0);
  return mine;
}

std::shared_ptr<const std::vector<int64_t>> DataLoader::epoch_order(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(order_mutex_);
  auto found = order_cache_.find(epoch);
  if (found != order_cache_.end()) return found->second;
  // Workers rarely straddle more than two epochs; keep a few orders and forget the oldest.
  if (order_cache_.size() >= 3) order_cache_.erase(order_cache_.begin());
  auto order = std::make_shared<const std::vector<int64_t>>(shuffled_indices(dataset_->size(), options_.seed, epoch));
  order_cache_.emplace(epoch, order);
  return order;
}

std::vector<int64_t> DataLoader::batch_indices(LoaderPosition position) const {
  OPSNN_CHECK(position.epoch >= 0 && position.batch >= 0 && position.batch < batches_per_epoch_,
              "DataLoader: no batch ", position.batch, " in epoch ", position.epoch, " (", batches_per_epoch_,
              " batches per epoch)");
  // This rank's part of the global batch (LoaderOptions::shard_rank).
  const int64_t global_begin = position.batch * options_.batch_size * options_.shard_count;
  const int64_t global_size = std::min(options_.batch_size * options_.shard_count, dataset_->size() - global_begin);
  const int64_t share = global_size / options_.shard_count, extra = global_size % options_.shard_count;
  const int64_t begin = global_begin + options_.shard_rank * share + std::min(options_.shard_rank, extra);
  const int64_t end = begin + share + (options_.shard_rank < extra ? 1 : 0);
  std::vector<int64_t> indices(static_cast<size_t>(end - begin));
  if (options_.shuffle) {
    const auto order = epoch_order(position.epoch);
    std::copy(order->begin() + begin, order->begin() + end, indices.begin());
  } else {
    for (int64_t i = begin; i < end; ++i) indices[static_cast<size_t>(i - begin)] = i;
  }
  return indices;
}

Batch DataLoader::make_batch(LoaderPosition position) const {
  const std::vector<int64_t> indices = batch_indices(position);
  const int64_t count = static_cast<int64_t>(indices.size());
  Batch batch = buffers_ ? buffers_->acquire(count) : dataset_->allocate_batch(count);
  std::vector<uint64_t> seeds(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) seeds[i] = sample_seed(options_.seed, position.epoch, indices[i]);
  dataset_->get_batch_seeded(indices, seeds, batch.inputs, batch.labels);
  augment_batch(batch, *dataset_, options_.augment, options_.seed, position.epoch, indices);
  batch.epoch = position.epoch;
  batch.index = position.batch;
  return batch;
}

std::optional<Batch> DataLoader::next() {
  if (options_.num_workers == 0) {
    LoaderPosition position;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      position = position_of(consumer_sequence_++);
    }
    if (position.batch == batches_per_epoch_) return std::nullopt;
    return make_batch(position);
  }
  Slot slot;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    slot_ready_.wait(lock, [&] { return ready_.count(consumer_sequence_) != 0; });
    auto found = ready_.find(consumer_sequence_);
    slot = std::move(found->second);
    ready_.erase(found);
    ++consumer_sequence_;
  }
  slot_taken_.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

LoaderPosition DataLoader::position() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return position_of(consumer_sequence_);
}

void DataLoader::seek(LoaderPosition position) {
  OPSNN_CHECK(position.epoch >= 0 && position.batch >= 0 && position.batch <= batches_per_epoch_,
              "DataLoader: cannot seek to epoch ", position.epoch, " batch ", position.batch, " (", batches_per_epoch_,
              " batches per epoch)");
  // Positions are counted as one sequence number (sequence_of), which must not wrap.
  OPSNN_CHECK(position.epoch <= (std::numeric_limits<int64_t>::max() - batches_per_epoch_) / (batches_per_epoch_ + 1),
              "DataLoader: cannot seek to epoch ", position.epoch, " (too large to count batches in)");
  stop_workers();
  ready_.clear();
  consumer_sequence_ = claim_sequence_ = sequence_of(position);
  start_workers();
}

void DataLoader::start_workers() {
  for (int64_t i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  slot_taken_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = false;
}

void DataLoader::worker_loop() {
  for (;;) {
    int64_t sequence = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      slot_taken_.wait(lock, [&] { return stopping_ || claim_sequence_ < consumer_sequence_ + options_.prefetch; });
      if (stopping_) return;
      sequence = claim_sequence_++;
    }
    Slot slot;
    const LoaderPosition position = position_of(sequence);
    if (position.batch < batches_per_epoch_) {
      try {
        slot.batch = make_batch(position);
      } catch (...) {
        slot.error = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(sequence, std::move(slot));
    }
    slot_ready_.notify_all();
  }
}

}  // namespace opsnn::data
