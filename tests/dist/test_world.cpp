// The single-process parts of distributed training: the launcher environment, the backend choice and its
// refusals, the TCP rendezvous, the loader's sharding and autograd's gradient-ready hook.
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "dist/rendezvous.h"
#include "opsnn/autograd/node.h"
#include "opsnn/core/error.h"
#include "opsnn/data/loader.h"
#include "opsnn/dist/dist.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"
#include "support/index_dataset.h"

namespace {

using opsnn::ConfigError;
using opsnn::Tensor;
namespace dist = opsnn::dist;

// Sets environment variables for a scope and restores what was there.
class Environment {
 public:
  Environment(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const char* name : kNames) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      unsetenv(name);
    }
    for (const auto& [name, value] : values) setenv(name, value, 1);
  }
  ~Environment() {
    for (const auto& [name, value] : saved_) {
      if (value)
        setenv(name, value->c_str(), 1);
      else
        unsetenv(name);
    }
  }

 private:
  static constexpr const char* kNames[] = {"OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                                           "WORLD_SIZE",
                                           "RANK",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

}  // namespace

TEST_CASE("The world comes from mpirun's or torchrun's environment", "[dist]") {
  {
    Environment environment({});
    CHECK_FALSE(dist::launched_distributed());
    CHECK(dist::world_from_environment().size == 1);
    CHECK(dist::world_from_environment().launcher == "none");
  }
  {
    Environment environment({{"OMPI_COMM_WORLD_SIZE", "4"},
                             {"OMPI_COMM_WORLD_RANK", "3"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    const dist::WorldInfo world = dist::world_from_environment();
    CHECK(world.launcher == "mpirun");
    CHECK(world.size == 4);
    CHECK(world.rank == 3);
    CHECK(world.local_rank == 1);
    CHECK(world.local_size == 2);
    CHECK(dist::rank_label() == " (rank 3 of 4)");
  }
  {
    Environment environment({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"LOCAL_RANK", "1"}});
    const dist::WorldInfo world = dist::world_from_environment();
    CHECK(world.launcher == "env");
    CHECK(world.rank == 1);
    CHECK(world.local_rank == 1);
    CHECK(world.local_size == 2);
    CHECK(dist::launched_distributed());
  }
}

TEST_CASE("Bad launcher variables are config errors naming the variable", "[dist]") {
  {
    Environment environment({{"WORLD_SIZE", "two"}, {"RANK", "0"}});
    CHECK_THROWS_MATCHES(dist::world_from_environment(), ConfigError,
                         Catch::Message("environment variable WORLD_SIZE='two': expected an integer in [1, 1048576]"));
  }
  {
    Environment environment({{"WORLD_SIZE", "2"}, {"RANK", "2"}});
    CHECK_THROWS_WITH(dist::world_from_environment(), Catch::Contains("RANK='2': expected an integer in [0, 1]"));
  }
  {
    Environment environment({{"WORLD_SIZE", "2"}});
    CHECK_THROWS_WITH(dist::world_from_environment(), Catch::Contains("RANK is not"));
  }
  {
    Environment environment({{"OMPI_COMM_WORLD_SIZE", "0"}});
    CHECK_THROWS_AS(dist::world_from_environment(), ConfigError);
  }
}

TEST_CASE("Backends that cannot work here are refused before anything starts", "[dist]") {
  {  // MPI ranks need mpirun
    Environment environment({{"WORLD_SIZE", "2"}, {"RANK", "0"}});
    dist::InitOptions options;
    options.backend = "mpi";
    CHECK_THROWS_WITH(dist::init(options), Catch::Contains("MPI ranks must be started by mpirun"));
  }
  {
    Environment environment({{"WORLD_SIZE", "1"}, {"RANK", "0"}});
    dist::InitOptions options;
    options.backend = "nccl";
    options.device = "cpu";
    CHECK_THROWS_AS(dist::init(options), ConfigError);
    options.backend = "gloo";
    CHECK_THROWS_WITH(dist::init(options), Catch::Contains("expected auto, nccl or mpi"));
    options.backend = "auto";
    options.timeout_seconds = 0.0;
    CHECK_THROWS_WITH(dist::init(options), Catch::Contains("timeout"));
  }
  CHECK(dist::resolve_backend("auto", "cpu") == dist::Backend::mpi);
  CHECK(dist::device_index_for({0, 4, 3, 4, "mpirun"}, dist::Backend::mpi, 2) == 1);  // MPI ranks share GPUs
  CHECK(dist::device_index_for({0, 4, 3, 4, "mpirun"}, dist::Backend::nccl, 4) == 3);
}

TEST_CASE("The TCP rendezvous hands rank 0's bytes to every rank", "[dist]") {
  const int port = 20000 + static_cast<int>(std::hash<std::thread::id>{}(std::this_thread::get_id()) % 20000);
  const std::vector<uint8_t> payload{1, 2, 3, 250};
  std::vector<uint8_t> got1, got2;
  std::thread rank1([&] { got1 = dist::rendezvous_broadcast(1, 3, "127.0.0.1", port, {}, 20.0); });
  std::thread rank2([&] { got2 = dist::rendezvous_broadcast(2, 3, "127.0.0.1", port, {}, 20.0); });
  const std::vector<uint8_t> got0 = dist::rendezvous_broadcast(0, 3, "127.0.0.1", port, payload, 20.0);
  rank1.join();
  rank2.join();
  CHECK(got0 == payload);
  CHECK(got1 == payload);
  CHECK(got2 == payload);
}

TEST_CASE("The TCP rendezvous gives up at its deadline naming the address", "[dist]") {
  // Rank 1 with no rank 0 listening: connection refused until the deadline.
  CHECK_THROWS_WITH(dist::rendezvous_broadcast(1, 2, "127.0.0.1", 9, {}, 0.3),
                    Catch::Contains("127.0.0.1:9 (MASTER_ADDR:MASTER_PORT)") && Catch::Contains("could not connect"));
  // Rank 0 whose peers never come.
  CHECK_THROWS_WITH(dist::rendezvous_broadcast(0, 2, "127.0.0.1", 0, {1}, 0.3), Catch::Contains("TCP port"));
  CHECK_THROWS_WITH(dist::rendezvous_broadcast(1, 2, "no-such-host.invalid", 29500, {}, 0.3),
                    Catch::Contains("cannot resolve MASTER_ADDR"));
}

TEST_CASE("Sharded loaders together see each sample once per epoch, as one loader of the global batch", "[dist]") {
  auto dataset = std::make_shared<opsnn::testing::IndexDataset>(23);
  for (bool drop_last : {false, true}) {
    INFO("drop_last " << drop_last);
    opsnn::data::LoaderOptions whole;
    whole.batch_size = 8;
    whole.seed = 5;
    whole.drop_last = drop_last;
    whole.num_workers = 0;
    opsnn::data::LoaderOptions half = whole;
    half.batch_size = 4;
    half.shard_count = 2;
    opsnn::data::DataLoader single(dataset, whole);
    half.shard_rank = 0;
    opsnn::data::DataLoader rank0(dataset, half);
    half.shard_rank = 1;
    opsnn::data::DataLoader rank1(dataset, half);
    REQUIRE(rank0.batches_per_epoch() == single.batches_per_epoch());
    CHECK(rank0.samples_per_epoch() + rank1.samples_per_epoch() == single.samples_per_epoch());
    for (int64_t epoch = 0; epoch < 2; ++epoch)
      for (int64_t b = 0; b < single.batches_per_epoch(); ++b) {
        std::vector<int64_t> both = rank0.batch_indices({epoch, b});
        const std::vector<int64_t> second = rank1.batch_indices({epoch, b});
        CHECK(std::abs(static_cast<int64_t>(both.size()) - static_cast<int64_t>(second.size())) <= 1);
        both.insert(both.end(), second.begin(), second.end());
        CHECK(both == single.batch_indices({epoch, b}));
      }
  }
  // A last global batch of 1 sample cannot feed 2 ranks: it is dropped.
  auto odd = std::make_shared<opsnn::testing::IndexDataset>(9);
  opsnn::data::LoaderOptions options;
  options.batch_size = 4;
  options.shard_count = 2;
  options.shard_rank = 1;
  options.num_workers = 0;
  opsnn::data::DataLoader loader(odd, options);
  CHECK(loader.batches_per_epoch() == 1);
  options.shard_rank = 2;
  CHECK_THROWS_AS(opsnn::data::DataLoader(odd, options), ConfigError);
}

TEST_CASE("The gradient-ready hook reports each leaf once, after its last use", "[dist][autograd]") {
  Tensor shared = Tensor::from_vector<float>({1.0f, 2.0f}, {2});
  Tensor other = Tensor::from_vector<float>({3.0f, 4.0f}, {2});
  Tensor unused = Tensor::from_vector<float>({5.0f}, {1});
  for (Tensor* t : {&shared, &other, &unused}) t->set_requires_grad(true);
  std::vector<const opsnn::TensorImpl*> reported;
  std::vector<float> shared_grad_when_reported;
  {
    opsnn::autograd::GradientReadyHook hook([&](const opsnn::TensorImpl& leaf) {
      reported.push_back(&leaf);
      if (&leaf == shared.impl()) shared_grad_when_reported = shared.grad().to_vector<float>();
    });
    // shared is used twice: it is final only after both uses delivered.
    Tensor y = opsnn::ops::mul(opsnn::ops::mul(shared, other), shared);
    opsnn::ops::sum(y).backward();
  }
  CHECK(reported.size() == 2);
  CHECK(std::count(reported.begin(), reported.end(), shared.impl()) == 1);
  CHECK(std::count(reported.begin(), reported.end(), other.impl()) == 1);
  CHECK(shared_grad_when_reported == std::vector<float>{6.0f, 16.0f});  // d(s^2 o)/ds = 2 s o
  // Without a hook nothing is reported (and the hook is gone after its scope).
  reported.clear();
  opsnn::ops::sum(opsnn::ops::mul(other, other)).backward();
  CHECK(reported.empty());
}
