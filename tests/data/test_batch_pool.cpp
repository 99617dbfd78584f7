// BatchPool: buffers are reused rather than reallocated, batches held at the same time never share memory
// (across threads too), a buffer waits for the copies reading it before taking another batch, and batches
// outlive their pool. Run on pageable memory; the [cuda] tests in test_device_loader.cpp cover pinned.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "opsnn/data/batch_pool.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::data;

namespace {

// Samples of shape [3] (f32) with i64 labels; the pool only reads shapes and dtypes.
class ShapeOnlyDataset final : public Dataset {
 public:
  std::string name() const override { return "shape-only"; }
  int64_t size() const override { return 100; }
  Shape sample_shape() const override { return {3}; }
  int64_t num_classes() const override { return 2; }
  void get_batch(std::span<const int64_t>, const Tensor&, const Tensor&) const override {}
};

// A copy that finishes when the test says so: wait() blocks until then.
class ManualEvent final : public DeviceEvent {
 public:
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    passed_.wait(lock, [&] { return done_; });
    ++waits_;
  }
  void make_compute_wait() override {}
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    passed_.notify_all();
  }
  int waits() {
    std::lock_guard<std::mutex> lock(mutex_);
    return waits_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable passed_;
  bool done_ = false;
  int waits_ = 0;
};

const void* address_of(const Batch& batch) { return batch.inputs.data_ptr(); }

}  // namespace

TEST_CASE("BatchPool: a batch views a buffer of the pool, sized to its sample count", "[data]") {
  ShapeOnlyDataset dataset;
  BatchPool pool(dataset, 5, HostMemory::pageable, 2);
  REQUIRE(pool.buffer_count() == 2);
  Batch full = pool.acquire(5);
  CHECK(full.inputs.shape() == Shape{5, 3});
  CHECK(full.labels.shape() == Shape{5});
  CHECK(full.inputs.dtype() == DType::f32);
  CHECK(full.labels.dtype() == DType::i64);
  CHECK((full.inputs.is_contiguous() && full.labels.is_contiguous()));
  CHECK_FALSE(full.inputs.storage()->pinned());
  REQUIRE(full.buffer != nullptr);
  Batch partial = pool.acquire(2);  // an epoch's last batch: the start of a full buffer
  CHECK(partial.inputs.shape() == Shape{2, 3});
  CHECK(partial.labels.shape() == Shape{2});
  CHECK_THROWS_WITH(pool.acquire(6), Catch::Contains("does not fit"));
}

TEST_CASE("BatchPool: buffers given back are reused, never reallocated in a steady state", "[data]") {
  ShapeOnlyDataset dataset;
  BatchPool pool(dataset, 4, HostMemory::pageable, 3);
  std::set<const void*> addresses;
  // A loader's pattern: a few batches queued ahead, the oldest taken and dropped, a new one made.
  std::vector<Batch> queued;
  for (int i = 0; i < 3; ++i) queued.push_back(pool.acquire(4));
  for (int round = 0; round < 200; ++round) {
    addresses.insert(address_of(queued.front()));
    queued.erase(queued.begin());
    queued.push_back(pool.acquire(round % 5 == 0 ? 1 : 4));
  }
  CHECK(pool.buffer_count() == 3);
  CHECK(addresses.size() == 3);
  // The buffer given back first is the one taken next.
  const void* oldest = address_of(queued.front());
  queued.erase(queued.begin());
  CHECK(address_of(pool.acquire(4)) == oldest);
}

TEST_CASE("BatchPool: batches held at the same time never share memory, the pool grows instead of blocking", "[data]") {
  ShapeOnlyDataset dataset;
  BatchPool pool(dataset, 4, HostMemory::pageable, 2);
  std::vector<Batch> held;
  for (int i = 0; i < 7; ++i) {
    held.push_back(pool.acquire(4));
    held.back().inputs.fill_(static_cast<double>(i));
    held.back().labels.fill_(static_cast<double>(i));
  }
  CHECK(pool.buffer_count() == 7);
  std::set<const void*> addresses;
  for (int i = 0; i < 7; ++i) {
    INFO("batch " << i);
    addresses.insert(held[static_cast<size_t>(i)].inputs.data_ptr());
    addresses.insert(held[static_cast<size_t>(i)].labels.data_ptr());
    for (float value : held[static_cast<size_t>(i)].inputs.to_vector<float>()) CHECK(value == static_cast<float>(i));
    for (int64_t label : held[static_cast<size_t>(i)].labels.to_vector<int64_t>()) CHECK(label == i);
  }
  CHECK(addresses.size() == 14);
  // A view keeps its buffer out of the pool as the batch would.
  Tensor view = held[0].inputs.slice(0, 1, 3);
  const void* viewed = held[0].inputs.data_ptr();
  held.clear();
  for (int i = 0; i < 6; ++i) held.push_back(pool.acquire(4));
  for (const Batch& batch : held) CHECK(batch.inputs.data_ptr() != viewed);
  CHECK(pool.buffer_count() == 7);
  for (float value : view.to_vector<float>()) CHECK(value == 0.0f);
}

TEST_CASE("BatchPool: threads acquiring and giving back concurrently never see each other's batches", "[data]") {
  ShapeOnlyDataset dataset;
  BatchPool pool(dataset, 8, HostMemory::pageable, 4);
  std::atomic<int> clashes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 300; ++round) {
        Batch batch = pool.acquire(8);
        const double stamp = t * 1000 + round;
        batch.inputs.fill_(stamp);
        std::this_thread::yield();
        for (float value : batch.inputs.to_vector<float>())
          if (value != static_cast<float>(stamp)) ++clashes;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(clashes.load() == 0);
  CHECK(pool.buffer_count() <= 4);  // four threads hold at most four buffers at once
}

TEST_CASE("BatchPool: a buffer is not handed out again before the copy reading it has finished", "[data]") {
  ShapeOnlyDataset dataset;
  BatchPool pool(dataset, 4, HostMemory::pageable, 1);
  auto copy = std::make_shared<ManualEvent>();
  const void* address = nullptr;
  {
    Batch batch = pool.acquire(4);
    address = address_of(batch);
    batch.buffer->release_after(copy);
  }  // the batch is gone, its upload is not
  std::atomic<bool> copy_finished{false}, acquired{false}, acquired_after_copy{false}, same_buffer{false};
  std::thread loader_thread([&] {  // Catch2 assertions stay on the test's thread
    Batch next = pool.acquire(4);
    acquired_after_copy = copy_finished.load();
    same_buffer = address_of(next) == address;
    acquired = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(acquired.load());
  copy_finished = true;
  copy->finish();
  loader_thread.join();
  CHECK(acquired.load());
  CHECK(acquired_after_copy.load());
  CHECK(same_buffer.load());
  CHECK(copy->waits() == 1);
  CHECK(pool.buffer_count() == 1);  // waited for the buffer rather than allocating another
}

TEST_CASE("BatchPool: shutdown - batches outlive their pool, whose memory waits for the last copies", "[data]") {
  ShapeOnlyDataset dataset;
  auto copy = std::make_shared<ManualEvent>();
  copy->finish();
  std::weak_ptr<Storage> storage;
  {
    Batch survivor;
    {
      BatchPool pool(dataset, 4, HostMemory::pageable, 3);
      Batch dropped = pool.acquire(4);
      survivor = pool.acquire(3);
      survivor.inputs.fill_(2.5);
      survivor.buffer->release_after(copy);
      storage = survivor.inputs.storage();
    }  // the pool is gone; the batch still views live memory
    for (float value : survivor.inputs.to_vector<float>()) CHECK(value == 2.5f);
    CHECK_FALSE(storage.expired());
    CHECK(copy->waits() == 0);
  }  // the last batch is gone: the pool's memory is freed, after the copy that read it
  CHECK(storage.expired());
  CHECK(copy->waits() == 1);
}

TEST_CASE("BatchPool: pinned buffers need a CUDA device", "[data]") {
  ShapeOnlyDataset dataset;
  if (pinned_memory_available()) {
    BatchPool pool(dataset, 4, HostMemory::pinned, 1);
    Batch batch = pool.acquire(4);
    CHECK(batch.inputs.storage()->pinned());
    CHECK(is_page_locked(batch.inputs.data_ptr()));
    CHECK(is_page_locked(batch.labels.data_ptr()));
  } else {
    CHECK_THROWS_AS(BatchPool(dataset, 4, HostMemory::pinned, 1), DeviceError);
  }
}
