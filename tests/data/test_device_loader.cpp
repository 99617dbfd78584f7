// DeviceLoader: on the CPU batches pass through untouched; the asynchronous path, driven on the CPU by a
// copy stream that records what it is asked, yields the plain loader's batches and positions (epoch ends,
// seek, errors included) and orders every upload as device_loader.cpp promises; tagged [cuda], real
// uploads of pinned batches to a GPU give the same values and leave the pinned pool at its reserve.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/data/device_loader.h"
#include "support/catch.h"
#include "support/index_dataset.h"

using namespace opsnn;
using namespace opsnn::data;
using opsnn::testing::IndexDataset;

namespace {

using Log = std::vector<std::string>;

class RecordingEvent final : public DeviceEvent {
 public:
  RecordingEvent(std::shared_ptr<Log> log, int id) : log_(std::move(log)), id_(id) {}
  void wait() override { log_->push_back("host waits " + std::to_string(id_)); }
  void make_compute_wait() override { log_->push_back("compute waits " + std::to_string(id_)); }

 private:
  std::shared_ptr<Log> log_;
  int id_;
};

// Copies at once (memcpy) and logs each call; event n is the n-th record().
class RecordingCopyStream final : public CopyStream {
 public:
  explicit RecordingCopyStream(std::shared_ptr<Log> log) : log_(std::move(log)) {}
  void wait_for_compute() override { log_->push_back("copies wait for compute"); }
  void copy_from_host(void* destination, const void* host_source, size_t bytes) override {
    std::memcpy(destination, host_source, bytes);
    log_->push_back("copy");
  }
  std::shared_ptr<DeviceEvent> record() override {
    log_->push_back("record " + std::to_string(events_));
    return std::make_shared<RecordingEvent>(log_, events_++);
  }

 private:
  std::shared_ptr<Log> log_;
  int events_ = 0;
};

LoaderOptions options_with(int64_t batch_size, int64_t workers) {
  LoaderOptions options;
  options.batch_size = batch_size;
  options.seed = 11;
  options.num_workers = workers;
  return options;
}

std::unique_ptr<DeviceLoader> recording_loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                                               std::shared_ptr<Log> log) {
  return std::make_unique<DeviceLoader>(std::make_unique<DataLoader>(std::move(dataset), options), kCPU,
                                        std::make_unique<RecordingCopyStream>(std::move(log)));
}

// Same batch (values, epoch, index) or both end markers.
void require_same(const std::optional<Batch>& batch, const std::optional<Batch>& expected) {
  REQUIRE(batch.has_value() == expected.has_value());
  if (!batch) return;
  REQUIRE(batch->inputs.to_vector<float>() == expected->inputs.to_vector<float>());
  REQUIRE(batch->labels.to_vector<int64_t>() == expected->labels.to_vector<int64_t>());
  REQUIRE(batch->epoch == expected->epoch);
  REQUIRE(batch->index == expected->index);
}

const Log kUpload{"copies wait for compute", "copy", "copy"};

}  // namespace

TEST_CASE("DeviceLoader: on the CPU the loader's batches pass through untouched", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(23);
  DeviceLoader loader(std::make_unique<DataLoader>(dataset, options_with(5, 1)), kCPU);
  DataLoader plain(dataset, options_with(5, 1));
  REQUIRE_FALSE(loader.asynchronous());
  REQUIRE(loader.batches_per_epoch() == 5);
  for (int call = 0; call < 13; ++call) {
    require_same(loader.next(), plain.next());
    REQUIRE(loader.position() == plain.position());
  }
}

TEST_CASE("DeviceLoader: asynchronous uploads yield the plain loader's batches and positions", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(23);  // 5 batches per epoch, the last of 3
  for (int64_t workers : {0, 2}) {
    INFO(workers << " workers");
    auto log = std::make_shared<Log>();
    auto loader = recording_loader(dataset, options_with(5, workers), log);
    DataLoader plain(dataset, options_with(5, workers));
    REQUIRE(loader->asynchronous());
    REQUIRE(loader->position() == plain.position());
    for (int call = 0; call < 20; ++call) {  // three epochs and a bit
      INFO("call " << call);
      require_same(loader->next(), plain.next());
      // With batch k+1 in flight the host loader is one ahead; the position is still batch k+1's.
      REQUIRE(loader->position() == plain.position());
    }
    // seek drops the upload in flight, ordering its release after its copies, and starts over there.
    const size_t before_seek = log->size();
    loader->seek({1, 3});
    plain.seek({1, 3});
    REQUIRE(log->size() == before_seek + 1);
    REQUIRE(log->back().rfind("compute waits ", 0) == 0);
    REQUIRE(loader->position() == plain.position());
    for (int call = 0; call < 4; ++call) require_same(loader->next(), plain.next());
  }
}

TEST_CASE("DeviceLoader: each upload waits for the compute queued before it, and compute waits for the upload",
          "[data]") {
  auto dataset = std::make_shared<IndexDataset>(10);  // 2 batches per epoch
  auto log = std::make_shared<Log>();
  auto loader = recording_loader(dataset, options_with(5, 1), log);
  auto expect_log = [&](std::vector<Log> parts) {
    Log expected;
    for (const Log& part : parts) expected.insert(expected.end(), part.begin(), part.end());
    REQUIRE(*log == expected);
    log->clear();
  };
  // Batch 0: its upload, then batch 1's (queued behind what compute holds now, not behind batch 0's
  // kernels, which come after next() returns), then compute waits for batch 0's copies.
  REQUIRE(loader->next().has_value());
  expect_log({kUpload, {"record 0"}, kUpload, {"record 1", "compute waits 0"}});
  // Batch 1, the epoch's last: looking ahead finds the end marker, which needs no copies.
  REQUIRE(loader->next().has_value());
  expect_log({{"compute waits 1"}});
  REQUIRE_FALSE(loader->next().has_value());
  expect_log({});
  REQUIRE(loader->position() == LoaderPosition{1, 0});
  REQUIRE(loader->next()->epoch == 1);
  expect_log({kUpload, {"record 2"}, kUpload, {"record 3", "compute waits 2"}});
  // Destruction with batch 1 of epoch 1 in flight: its tensors are released after its copies.
  loader.reset();
  expect_log({{"compute waits 3"}});
}

TEST_CASE("DeviceLoader: an error producing a batch surfaces when that batch is taken, and loading goes on", "[data]") {
  auto dataset = std::make_shared<IndexDataset>(40, /*poison_index=*/13);
  for (int64_t workers : {0, 1, 3}) {
    INFO(workers << " workers");
    LoaderOptions options = LoaderOptions::evaluation(5, workers);
    auto loader = recording_loader(dataset, options, std::make_shared<Log>());
    REQUIRE(loader->next()->inputs.to_vector<float>().front() == 0.0f);
    REQUIRE(loader->next()->inputs.to_vector<float>().front() == 5.0f);  // batch 2, poisoned, is in flight
    REQUIRE(loader->position() == LoaderPosition{0, 2});
    REQUIRE_THROWS_AS(loader->next(), DataError);
    REQUIRE(loader->position() == LoaderPosition{0, 3});
    REQUIRE(loader->next()->inputs.to_vector<float>().front() == 15.0f);
  }
}

TEST_CASE("cuda: pinned batches uploaded on a copy stream hold the host batches' values", "[cuda][data]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: asynchronous uploads are not tested");
    return;
  }
  const Device gpu(DeviceType::cuda, 0);
  auto dataset = std::make_shared<IndexDataset>(1003);  // 16 batches per epoch, the last of 43
  for (int64_t workers : {0, 2}) {
    INFO(workers << " workers");
    LoaderOptions options = options_with(64, workers);
    options.pin_memory = true;
    DeviceLoader loader(std::make_unique<DataLoader>(dataset, options), gpu);
    options.pin_memory = false;
    DataLoader plain(dataset, options);
    REQUIRE(loader.asynchronous());
    for (int call = 0; call < 40; ++call) {
      INFO("call " << call);
      std::optional<Batch> batch = loader.next();
      std::optional<Batch> expected = plain.next();
      REQUIRE(batch.has_value() == expected.has_value());
      REQUIRE(loader.position() == plain.position());
      if (!batch) continue;
      REQUIRE(batch->inputs.device() == gpu);
      REQUIRE(batch->labels.device() == gpu);
      REQUIRE(batch->buffer == nullptr);
      // Kernels queued on the compute queue (the copy back to the host here) see the whole batch.
      REQUIRE(batch->inputs.to_vector<float>() == expected->inputs.to_vector<float>());
      REQUIRE(batch->labels.to_vector<int64_t>() == expected->labels.to_vector<int64_t>());
    }
    REQUIRE(loader.host().pinned_buffer_count() == options.prefetch + 2);  // recycled, never grown
    // seek drops the upload in flight.
    loader.seek({1, 5});
    const Batch expected = plain.make_batch({1, 5});
    std::optional<Batch> batch = loader.next();
    REQUIRE(batch.has_value());
    REQUIRE(batch->inputs.to_vector<float>() == expected.inputs.to_vector<float>());
    REQUIRE(batch->labels.to_vector<int64_t>() == expected.labels.to_vector<int64_t>());
  }
}
