// A sharded optimizer (ZeRO-1, shard.h) on its own, CPU and GPU: it steps exactly its slice of the arena
// (the rest stays as it was), equals the unsharded optimizer there, sums its statistics through the
// exchange (once per step, twice for LAMB), refuses bad shards and CUDA-graph capture. The multi-rank
// behaviour is tested under mpirun (tests/dist/).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/shard.h"
#include "optim/optim_test_support.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::optim;

namespace {

// One rank alone: the sums are its own partials, the gather leaves the buffer as it is. Counts the sums.
class SoloExchange final : public ShardExchange {
 public:
  void sum(const Tensor& values) override {
    CHECK(values.dtype() == DType::f64);
    ++sums;
  }
  void gather(const Tensor&) override { ++gathers; }
  int sums = 0, gathers = 0;
};

// A tensor straddling the middle of the arena, tails after the 8-wide vectors, one spanning two chunks.
const std::vector<Shape> kShapes = {{37}, {5, 7}, {16384 + 101}, {3, 3, 3, 3}, {1000}, {1}, {8, 125}, {2000}};

NamedParameters parameters_on(Device device) {
  NamedParameters parameters;
  for (auto& [name, tensor] : testing::random_parameters(kShapes, 11)) {
    Tensor copy = tensor.to(device);
    copy.set_requires_grad(true);
    parameters.emplace_back(name, copy);
  }
  return parameters;
}

OptimizerOptions options_for(const std::string& name) {
  OptimizerOptions options(name == "sgd" ? 0.05 : 1e-2);
  if (name == "sgd") options.momentum(0.9);
  if (name != "sgd" && name != "adam") options.weight_decay(0.01);
  return options;
}

// Five steps with the same gradients into `optimizer` (gradient pattern fixed by the step).
void run_steps(Optimizer& optimizer, const NamedParameters& parameters) {
  for (int step = 0; step < 5; ++step) {
    testing::write_grads(parameters, testing::make_grads(parameters, step, 5, testing::GradPattern::normal));
    optimizer.step();
  }
}

}  // namespace

TEST_CASE("A sharded optimizer steps exactly its slice and equals the unsharded one there", "[optim][cuda]") {
  std::vector<Device> devices{kCPU};
  if (cuda_device_count() > 0) devices.push_back(Device(DeviceType::cuda, 0));
  for (const Device device : devices) {
    for (const std::string name : {"sgd", "adam", "adamw", "lamb", "lion"}) {
      INFO(name << " on " << device.str());
      const NamedParameters whole_parameters = parameters_on(device), shard_parameters = parameters_on(device);
      auto whole = make_optimizer(name, whole_parameters, options_for(name));
      auto sharded = make_optimizer(name, shard_parameters, options_for(name));
      const std::vector<float> initial = sharded->arena().params().to_vector<float>();
      const int64_t n = sharded->arena().padded_elements();
      const ArenaShardRange first = arena_shard_range(n, 0, 2);
      REQUIRE(first.begin == 0);
      REQUIRE(first.end % kArenaAlignmentElements == 0);
      REQUIRE(first.end >= n / 2);
      auto exchange = std::make_shared<SoloExchange>();
      sharded->shard_states(first.begin, first.end, exchange);
      REQUIRE(sharded->arena().state(0).numel() == first.end);
      run_steps(*whole, whole_parameters);
      run_steps(*sharded, shard_parameters);
      CHECK(exchange->sums == (name == "lamb" ? 10 : 5));
      const std::vector<float> expected = whole->arena().params().to_vector<float>();
      const std::vector<float> got = sharded->arena().params().to_vector<float>();
      // Outside the slice nothing moved; inside it, the element-wise rules match to the bit. LAMB's trust
      // ratio of the tensor the slice cuts comes from its part only (this rank alone): check the tensors
      // that lie wholly inside.
      for (int64_t i = first.end; i < n; ++i) REQUIRE(std::memcmp(&got[i], &initial[i], sizeof(float)) == 0);
      for (const ArenaSegment& segment : sharded->arena().segments()) {
        if (segment.offset + segment.numel > first.end) continue;
        for (int64_t i = segment.offset; i < segment.offset + segment.numel; ++i) {
          INFO(segment.name << " element " << i - segment.offset);
          if (name == "lamb")
            REQUIRE(std::fabs(got[i] - expected[i]) <= 1e-6 * std::max(1.0f, std::fabs(expected[i])));
          else
            REQUIRE(std::memcmp(&got[i], &expected[i], sizeof(float)) == 0);
        }
      }
      // A shard of the whole arena is the unsharded optimizer (every statistic is this rank's).
      const NamedParameters all_parameters = parameters_on(device);
      auto all = make_optimizer(name, all_parameters, options_for(name));
      all->shard_states(0, n, std::make_shared<SoloExchange>());
      run_steps(*all, all_parameters);
      const std::vector<float> all_params = all->arena().params().to_vector<float>();
      for (int64_t i = 0; i < n; ++i) {
        INFO("element " << i);
        if (name == "lamb" && device.is_cuda())  // the shard's tiles may be sized differently
          REQUIRE(std::fabs(all_params[i] - expected[i]) <= 1e-6 * std::max(1.0f, std::fabs(expected[i])));
        else
          REQUIRE(std::memcmp(&all_params[i], &expected[i], sizeof(float)) == 0);
      }
      const StateDict state = all->state_dict();
      CHECK(state.at("layer0.bias." + all->arena().state_names()[0]).numel() == 37);
      if (device.is_cuda()) CHECK_THROWS_WITH(all->capture_step(), Catch::Contains("sharded (ZeRO-1)"));
    }
  }
}

TEST_CASE("shard_states refuses misaligned shards a second sharding and top-k", "[optim]") {
  const NamedParameters parameters = parameters_on(kCPU);
  auto adam = make_optimizer("adam", parameters, OptimizerOptions(1e-3));
  const int64_t n = adam->arena().padded_elements();
  CHECK_THROWS_AS(adam->shard_states(3, n, std::make_shared<SoloExchange>()), UsageError);
  CHECK_THROWS_WITH(adam->shard_states(0, n + 32, std::make_shared<SoloExchange>()),
                    Catch::Contains("must be aligned multiples of 32 inside the arena"));
  adam->shard_states(32, n, std::make_shared<SoloExchange>());
  CHECK_THROWS_WITH(adam->shard_states(0, n, std::make_shared<SoloExchange>()), Catch::Contains("sharded already"));
  CHECK_THROWS_WITH(adam->arena().state_view(0, 0), Catch::Contains("no whole state on this rank"));

  OptimizerOptions topk(0.1);
  topk.sparsification(TopKOptions{});
  auto sparse = make_optimizer("sgd", parameters_on(kCPU), topk);
  CHECK_THROWS_WITH(sparse->shard_states(0, n, std::make_shared<SoloExchange>()), Catch::Contains("top-k"));
  CHECK_THROWS_WITH(arena_shard_range(100, 2, 2), Catch::Contains("rank 2 of 2"));
  // Consecutive aligned slices covering the arena; the last ones may be empty for a tiny arena.
  CHECK(arena_shard_range(100, 0, 3).end == 64);
  CHECK(arena_shard_range(100, 1, 3).begin == 64);
  CHECK(arena_shard_range(100, 1, 3).end == 100);
  CHECK(arena_shard_range(100, 2, 3).begin == 100);
  CHECK(arena_shard_range(100, 2, 3).end == 100);
}
