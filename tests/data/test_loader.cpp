// DataLoader: epoch order, drop_last, eval mode, resume from a saved position, worker-count independence,
// exceptions crossing from the prefetch threads to the consumer, and pinned batches (tagged [cuda]).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/data/loader.h"
#include "opsnn/data/synthetic.h"
#include "support/catch.h"
#include "support/index_dataset.h"

using namespace opsnn;
using namespace opsnn::data;
using opsnn::testing::IndexDataset;

namespace {

std::vector<int64_t> indices_of(const Batch& batch) {
  std::vector<int64_t> indices;
  for (float value : batch.inputs.to_vector<float>()) indices.push_back(static_cast<int64_t>(value));
  return indices;
}

// All batches of one epoch as index lists (consumes the end-of-epoch marker).
std::vector<std::vector<int64_t>> one_epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> batches;
  while (auto batch = loader.next()) batches.push_back(indices_of(*batch));
  return batches;
}

LoaderOptions options_with(int64_t batch_size, uint64_t seed, int64_t workers) {
  LoaderOptions options;
  options.batch_size = batch_size;
  options.seed = seed;
  options.num_workers = workers;
  return options;
}

}  // namespace

TEST_CASE("DataLoader: each shuffled epoch is a permutation, reproducible from the seed", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(103);
  DataLoader first(dataset, options_with(10, 42, 2));
  DataLoader again(dataset, options_with(10, 42, 0));
  DataLoader other_seed(dataset, options_with(10, 43, 1));
  const auto epoch0 = one_epoch(first), epoch1 = one_epoch(first);
  REQUIRE(epoch0.size() == 11);
  REQUIRE(epoch0.back().size() == 3);
  std::vector<int64_t> flat;
  for (const auto& batch : epoch0) flat.insert(flat.end(), batch.begin(), batch.end());
  std::vector<int64_t> sorted = flat;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 103; ++i) REQUIRE(sorted[static_cast<size_t>(i)] == i);
  REQUIRE(flat != sorted);    // actually shuffled
  REQUIRE(epoch0 != epoch1);  // a new order every epoch
  REQUIRE(one_epoch(again) == epoch0);
  REQUIRE(one_epoch(again) == epoch1);
  REQUIRE(one_epoch(other_seed) != epoch0);
  REQUIRE(shuffled_indices(103, 42, 0) == shuffled_indices(103, 42, 0));
}

TEST_CASE("DataLoader: drop_last and batch counts", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(10);
  LoaderOptions options = options_with(3, 1, 1);
  options.drop_last = true;
  DataLoader dropping(dataset, options);
  REQUIRE(dropping.batches_per_epoch() == 3);
  REQUIRE(dropping.samples_per_epoch() == 9);
  for (const auto& batch : one_epoch(dropping)) REQUIRE(batch.size() == 3);
  options.drop_last = false;
  DataLoader keeping(dataset, options);
  REQUIRE(keeping.batches_per_epoch() == 4);
  const auto batches = one_epoch(keeping);
  REQUIRE(batches.size() == 4);
  REQUIRE(batches.back().size() == 1);
  // drop_last with fewer samples than a batch leaves no batch at all: refused up front.
  options.batch_size = 11;
  options.drop_last = true;
  REQUIRE_THROWS_WITH(DataLoader(dataset, options), Catch::Contains("not one batch of 11"));
  options.batch_size = 0;
  REQUIRE_THROWS_WITH(DataLoader(dataset, options), Catch::Contains("batch_size must be >= 1"));
}

TEST_CASE("DataLoader: a batch_size far beyond the dataset gives one partial batch", "[data]") {
  // samples + batch_size - 1 wrapped for INT64_MAX and reported "not one batch".
  auto dataset = std::make_shared<IndexDataset>(10);
  for (int64_t workers : {0, 2}) {
    DataLoader loader(dataset, options_with(INT64_MAX, 1, workers));
    REQUIRE(loader.batches_per_epoch() == 1);
    REQUIRE(loader.samples_per_epoch() == 10);
    const auto batches = one_epoch(loader);
    REQUIRE(batches.size() == 1);
    REQUIRE(batches[0].size() == 10);
  }
  LoaderOptions dropping = options_with(INT64_MAX, 1, 0);
  dropping.drop_last = true;
  CHECK_THROWS_AS(DataLoader(dataset, dropping), ConfigError);
}

TEST_CASE("DataLoader: bad options are ConfigErrors naming the option, prefetch is bounded", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(10);
  LoaderOptions options = options_with(2, 1, 2);
  options.prefetch = 1'000'000;  // grew to gigabytes of queued batches
  CHECK_THROWS_MATCHES(DataLoader(dataset, options), ConfigError,
                       Catch::Message("DataLoader prefetch must be in [1, 1024], got 1000000"));
  options.prefetch = INT64_MAX;  // consumer + prefetch wrapped
  CHECK_THROWS_AS(DataLoader(dataset, options), ConfigError);
  options.prefetch = 0;
  CHECK_THROWS_AS(DataLoader(dataset, options), ConfigError);
  options.prefetch = kMaxPrefetch;
  CHECK(one_epoch(*std::make_unique<DataLoader>(dataset, options)).size() == 5);
  options.prefetch = 2;
  options.batch_size = 0;
  CHECK_THROWS_AS(DataLoader(dataset, options), ConfigError);
  options.batch_size = 2;
  options.num_workers = 257;
  CHECK_THROWS_AS(DataLoader(dataset, options), ConfigError);
  options.num_workers = 1;
  options.augment.horizontal_flip = true;  // index samples are not images
  CHECK_THROWS_AS(DataLoader(dataset, options), ConfigError);
}

TEST_CASE("DataLoader: evaluation mode keeps dataset order and the last partial batch", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(25);
  DataLoader loader(dataset, LoaderOptions::evaluation(10));
  for (int pass = 0; pass < 2; ++pass) {
    const auto batches = one_epoch(loader);
    REQUIRE(batches.size() == 3);
    REQUIRE(batches[0] == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    REQUIRE(batches[2] == std::vector<int64_t>{20, 21, 22, 23, 24});
  }
  REQUIRE(loader.position() == LoaderPosition{2, 0});
}

TEST_CASE("DataLoader: position moves through epochs, a restored loader yields exactly what came next", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(50);
  const LoaderOptions options = options_with(8, 7, 2);  // 7 batches per epoch
  DataLoader original(dataset, options);
  REQUIRE(original.position() == LoaderPosition{0, 0});
  one_epoch(original);
  REQUIRE(original.position() == LoaderPosition{1, 0});
  original.next();
  original.next();
  const LoaderPosition saved = original.position();
  REQUIRE(saved == LoaderPosition{1, 2});
  std::vector<std::vector<int64_t>> expected;
  int end_markers = 0;
  for (int i = 0; i < 12; ++i) {  // crosses the end of epoch 1 into epoch 2
    auto batch = original.next();
    if (!batch) {
      ++end_markers;
      expected.push_back({});
      continue;
    }
    REQUIRE(batch->epoch == (i < 5 ? 1 : 2));
    expected.push_back(indices_of(*batch));
  }
  REQUIRE(end_markers == 1);
  for (int64_t workers : {0, 1, 3}) {
    DataLoader restored(dataset, options_with(8, 7, workers), saved);
    std::vector<std::vector<int64_t>> got;
    for (int i = 0; i < 12; ++i) {
      auto batch = restored.next();
      got.push_back(batch ? indices_of(*batch) : std::vector<int64_t>{});
    }
    REQUIRE(got == expected);
  }
  // seek() on a running loader discards what was prefetched.
  original.seek(saved);
  REQUIRE(indices_of(*original.next()) == expected[0]);
  REQUIRE(original.make_batch(saved).labels.to_vector<int64_t>().size() == 8);
  REQUIRE_THROWS_WITH(original.seek({0, 8}), Catch::Contains("cannot seek"));
}

TEST_CASE("DataLoader: an exception in a prefetch worker reaches the consumer", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(40, /*poison_index=*/13);
  for (int64_t workers : {0, 1, 3}) {
    LoaderOptions options = LoaderOptions::evaluation(5, workers);
    options.prefetch = 4;
    DataLoader loader(dataset, options);
    REQUIRE(indices_of(*loader.next()).front() == 0);
    REQUIRE(indices_of(*loader.next()).front() == 5);
    REQUIRE_THROWS_AS(loader.next(), DataError);
    // Later batches still arrive; destroying the loader with workers blocked on a full queue is clean.
    REQUIRE(indices_of(*loader.next()).front() == 15);
  }
}

TEST_CASE("DataLoader: shutdown with a full queue never hangs", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(1000);
  for (int round = 0; round < 20; ++round) {
    LoaderOptions options = options_with(4, static_cast<uint64_t>(round), 1 + round % 4);
    options.prefetch = 1 + round % 3;
    DataLoader loader(dataset, options);
    if (round % 2 == 0) loader.next();
  }
  SUCCEED("all loaders joined their workers");
}

TEST_CASE("DataLoader: augmented batches do not depend on the worker count", "[data]") {
  SyntheticImageOptions image_options;
  image_options.size = 40;
  image_options.channels = 2;
  image_options.height = 6;
  image_options.width = 5;
  auto dataset = std::make_shared<SyntheticImages>(image_options);
  LoaderOptions options = options_with(6, 3, 0);
  options.augment.crop_padding = 2;
  options.augment.horizontal_flip = true;
  DataLoader serial(dataset, options);
  options.num_workers = 3;
  DataLoader threaded(dataset, options);
  bool any_augmented = false;
  for (int i = 0; i < 16; ++i) {
    auto a = serial.next();
    auto b = threaded.next();
    REQUIRE(a.has_value() == b.has_value());
    if (!a) continue;
    REQUIRE(a->inputs.to_vector<float>() == b->inputs.to_vector<float>());
    REQUIRE(a->labels.to_vector<int64_t>() == b->labels.to_vector<int64_t>());
    const std::vector<int64_t> indices = serial.batch_indices({a->epoch, a->index});
    any_augmented = any_augmented || a->inputs.to_vector<float>() != dataset->get(indices).inputs.to_vector<float>();
  }
  REQUIRE(any_augmented);
  // Augmentation needs images.
  options.num_workers = 0;
  REQUIRE_THROWS_WITH(DataLoader(std::make_shared<IndexDataset>(10), options), Catch::Contains("images only"));
}

TEST_CASE("DataLoader: pin_memory needs a CUDA device", "[data]") {
  if (pinned_memory_available()) {
    WARN("a CUDA device is present: the refusal without one is not tested here");
    return;
  }
  LoaderOptions options = options_with(4, 1, 1);
  options.pin_memory = true;
  REQUIRE_THROWS_AS(DataLoader(std::make_shared<IndexDataset>(20), options), DeviceError);
}

TEST_CASE("cuda: pinned batches are page-locked, recycled from prefetch + 2 buffers, and hold the same values",
          "[cuda][data]") {
  if (!pinned_memory_available()) {
    WARN("no CUDA device: pinned loader batches are not tested");
    return;
  }
  auto dataset = std::make_shared<IndexDataset>(103);
  for (int64_t workers : {0, 1, 3}) {
    INFO(workers << " workers");
    LoaderOptions options = options_with(10, 5, workers);
    options.prefetch = 3;
    DataLoader pageable(dataset, options);
    options.pin_memory = true;
    DataLoader pinned(dataset, options);
    REQUIRE(pinned.pinned_buffer_count() == 5);
    REQUIRE(pageable.pinned_buffer_count() == 0);
    std::set<const void*> buffers;
    for (int call = 0; call < 40; ++call) {  // three epochs and a half, end markers included
      std::optional<Batch> expected = pageable.next();
      std::optional<Batch> batch = pinned.next();
      REQUIRE(batch.has_value() == expected.has_value());
      if (!batch) continue;
      REQUIRE(batch->buffer != nullptr);
      CHECK(batch->inputs.storage()->pinned());
      CHECK(is_page_locked(batch->inputs.data_ptr()));  // the driver's word, not the flag
      CHECK(is_page_locked(batch->labels.data_ptr()));
      CHECK_FALSE(is_page_locked(expected->inputs.data_ptr()));
      CHECK(indices_of(*batch) == indices_of(*expected));
      CHECK(batch->labels.to_vector<int64_t>() == expected->labels.to_vector<int64_t>());
      buffers.insert(batch->inputs.data_ptr());
    }
    CHECK(buffers.size() <= 5);
    CHECK(pinned.pinned_buffer_count() == 5);  // reused, never grown
  }
}
