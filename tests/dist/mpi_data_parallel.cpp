// Distributed tests on the MPI backend, run by ctest as `mpirun -np 2 opsnn-dist-tests` (every rank runs
// every case; collectives pair them up). Each case compares what the ranks computed together against
// what one process computes alone, or the ranks against each other.
#include <cmath>
#include <cstring>
#include <functional>

#include "opsnn/autograd/node.h"
#include "opsnn/dist/data_parallel.h"
#include "opsnn/dist/dist.h"
#include "opsnn/models/models.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/topk.h"
#include "support/catch.h"

namespace {

using opsnn::DType;
using opsnn::Tensor;
namespace dist = opsnn::dist;
namespace optim = opsnn::optim;

// The world communicator of the test program (short timeout: a case that loses its partner fails fast).
dist::Communicator& world() {
  static std::shared_ptr<dist::Communicator> communicator = [] {
    dist::InitOptions options;
    options.backend = "mpi";
    options.timeout_seconds = 120.0;
    return dist::init(options);
  }();
  return *communicator;
}

constexpr int64_t kFeatures = 12, kClasses = 5, kRankBatch = 8, kSteps = 50;

// A fixed problem: 2 x kRankBatch samples, the same on every rank (seeded).
struct Problem {
  Tensor inputs, labels;
};
Problem make_problem(int64_t samples) {
  opsnn::Generator generator(1234);
  Problem problem;
  problem.inputs = Tensor::normal({samples, kFeatures}, 0.0, 1.0, generator);
  std::vector<int64_t> labels(static_cast<size_t>(samples));
  for (int64_t i = 0; i < samples; ++i) labels[static_cast<size_t>(i)] = (i * 7 + 3) % kClasses;
  problem.labels = Tensor::from_vector(labels, {samples});
  return problem;
}

std::shared_ptr<opsnn::nn::Module> make_mlp() {
  opsnn::models::ModelOptions options;
  options.arch = "mlp";
  options.in_channels = kFeatures;  // [N, kFeatures] inputs: flatten keeps them
  options.image_size = 1;
  options.hidden = {16, 16};
  options.num_classes = kClasses;
  opsnn::Generator generator(7);
  return opsnn::models::build_model(options, generator);
}

// Rows [begin, begin + count) of a 2-d tensor, as a copy.
Tensor rows(const Tensor& tensor, int64_t begin, int64_t count) {
  std::vector<float> values = tensor.to_vector<float>();
  const int64_t width = tensor.numel() / tensor.size(0);
  std::vector<float> part(values.begin() + begin * width, values.begin() + (begin + count) * width);
  return Tensor::from_vector(part, {count, width});
}
Tensor label_rows(const Tensor& labels, int64_t begin, int64_t count) {
  std::vector<int64_t> values = labels.to_vector<int64_t>();
  std::vector<int64_t> part(values.begin() + begin, values.begin() + begin + count);
  return Tensor::from_vector(part, {count});
}

// This rank's kRankBatch samples of the 2 x kRankBatch problem (rank r takes rows [r B, (r + 1) B)).
Problem rank_batch(const dist::Communicator& comm) {
  const Problem problem = make_problem(2 * kRankBatch);
  return {rows(problem.inputs, comm.rank() * kRankBatch, kRankBatch),
          label_rows(problem.labels, comm.rank() * kRankBatch, kRankBatch)};
}

optim::OptimizerOptions options_for(const std::string& name) {
  optim::OptimizerOptions options(name == "sgd" ? 0.05 : name == "lion" ? 1e-3 : 1e-2);
  if (name == "sgd") options.momentum(0.9);
  if (name == "adamw" || name == "lamb" || name == "lion") options.weight_decay(0.01);
  return options;
}

struct Trained {
  std::vector<float> params;
  std::vector<uint8_t> near_zero_lion_c;  // Lion: |c| < 1e-6 at some step (its sign may flip with the order)
  optim::StepState state;
};

// kSteps steps on `inputs`: alone (communicator null) or data-parallel over the ranks.
Trained train(const std::string& name, const Tensor& inputs, const Tensor& labels, dist::Communicator* communicator,
              const optim::OptimizerOptions& options, int zero_stage = 0) {
  auto model = make_mlp();
  auto optimizer = optim::make_optimizer(name, model->named_parameters(), options);
  std::unique_ptr<dist::DataParallel> parallel;
  std::shared_ptr<dist::Communicator> shared(communicator, [](dist::Communicator*) {});
  // Buckets of a few hundred elements: several of them, launched while backward still runs.
  dist::DataParallelOptions buckets;
  buckets.bucket_mb = 0.0005;
  buckets.first_bucket_mb = 0.0002;
  buckets.zero_stage = zero_stage;
  if (communicator) {
    parallel = std::make_unique<dist::DataParallel>(*model, *optimizer, shared, buckets);
    REQUIRE(parallel->buckets().size() >= 3);
  }
  Trained trained;
  const int64_t n = optimizer->arena().padded_elements();
  trained.near_zero_lion_c.assign(static_cast<size_t>(n), 0);
  for (int64_t step = 0; step < kSteps; ++step) {
    Tensor loss = opsnn::ops::cross_entropy(model->forward(inputs), labels);
    if (parallel) {
      parallel->backward(optimizer->scale_loss(loss));
      parallel->synchronize_gradients();
    } else {
      optimizer->scale_loss(loss).backward();
    }
    if (name == "lion" && zero_stage == 0) {  // c = beta1 * m + (1 - beta1) * g, which Lion takes the sign of
      const std::vector<float> g = optimizer->arena().grads().to_vector<float>();
      const std::vector<float> m = optimizer->arena().state(0).to_vector<float>();
      for (int64_t i = 0; i < n; ++i) {
        const double c = 0.9 * m[static_cast<size_t>(i)] + 0.1 * g[static_cast<size_t>(i)];
        if (std::fabs(c) < 1e-6) trained.near_zero_lion_c[static_cast<size_t>(i)] = 1;
      }
    }
    trained.state = parallel ? parallel->step() : optimizer->step();  // step() does not reduce again
    optimizer->zero_grad();
  }
  trained.params = optimizer->arena().params().to_vector<float>();
  return trained;
}

}  // namespace

TEST_CASE("MPI communicator collectives", "[dist]") {
  dist::Communicator& comm = world();
  REQUIRE(comm.size() == 2);
  const int rank = comm.rank();
  Tensor values = Tensor::from_vector<float>({1.0f + rank, 10.0f * (rank + 1)}, {2});
  comm.all_reduce(values, dist::ReduceOp::sum, "test sum");
  CHECK(values.to_vector<float>() == std::vector<float>{3.0f, 30.0f});
  Tensor average = Tensor::from_vector<double>({2.0 * rank}, {1});
  comm.all_reduce(average, dist::ReduceOp::avg, "test avg");
  CHECK(average.to_vector<double>()[0] == 1.0);
  Tensor largest = Tensor::from_vector<int64_t>({rank * 5 - 3}, {1});
  comm.all_reduce(largest, dist::ReduceOp::max, "test max");
  CHECK(largest.to_vector<int64_t>()[0] == 2);

  Tensor gathered = Tensor::zeros({4}, DType::f32);
  comm.all_gather(Tensor::from_vector<float>({float(rank), float(rank) + 0.5f}, {2}), gathered, "test all-gather");
  CHECK(gathered.to_vector<float>() == std::vector<float>{0.0f, 0.5f, 1.0f, 1.5f});

  Tensor input = Tensor::from_vector<float>({1.0f, 2.0f, 3.0f, 4.0f}, {4});
  Tensor part = Tensor::zeros({2}, DType::f32);
  comm.reduce_scatter(input, part, dist::ReduceOp::sum, "test reduce-scatter");
  CHECK(part.to_vector<float>() == (rank == 0 ? std::vector<float>{2.0f, 4.0f} : std::vector<float>{6.0f, 8.0f}));

  Tensor broadcast = Tensor::from_vector<int64_t>({rank == 1 ? 42 : 0}, {1});
  comm.broadcast(broadcast, 1, "test broadcast");
  CHECK(broadcast.to_vector<int64_t>()[0] == 42);

  Tensor reduced = Tensor::from_vector<float>({float(rank + 1)}, {1});
  comm.reduce_async(reduced, 0, dist::ReduceOp::sum, "test reduce")->wait();
  CHECK(reduced.to_vector<float>()[0] == (rank == 0 ? 3.0f : 2.0f));  // only the root receives
  comm.barrier("test barrier");
  CHECK(comm.stats().calls >= 8);
}

TEST_CASE("2 ranks x batch B/2 equal 1 rank x batch B after 50 steps", "[dist]") {
  dist::Communicator& comm = world();
  const Problem problem = make_problem(2 * kRankBatch);
  const Problem mine = rank_batch(comm);
  const Tensor& mine_inputs = mine.inputs;
  const Tensor& mine_labels = mine.labels;
  for (const std::string name : {"sgd", "adam", "adamw", "lamb", "lion"}) {
    INFO("optimizer " << name);
    const optim::OptimizerOptions options = options_for(name);
    const Trained alone = train(name, problem.inputs, problem.labels, nullptr, options);
    const Trained together = train(name, mine_inputs, mine_labels, &comm, options);
    REQUIRE(alone.params.size() == together.params.size());
    double scale = 0.0;
    for (float p : alone.params) scale = std::max(scale, std::fabs(static_cast<double>(p)));
    int64_t mismatches = 0, excused = 0;
    double worst = 0.0;
    for (size_t i = 0; i < alone.params.size(); ++i) {
      const double error = std::fabs(static_cast<double>(alone.params[i]) - together.params[i]);
      if (error <= 1e-5 * scale) continue;
      if (alone.near_zero_lion_c[i] || together.near_zero_lion_c[i]) {
        ++excused;
        continue;
      }
      ++mismatches;
      worst = std::max(worst, error);
    }
    INFO("largest parameter " << scale << ", worst error " << worst << ", Lion elements excused " << excused);
    CHECK(mismatches == 0);
    CHECK(alone.state.step == kSteps);
    CHECK(together.state.step == kSteps);
    // The ranks hold the same parameters to the bit.
    Tensor hashes = Tensor::zeros({2}, DType::i64);
    const int64_t mine = static_cast<int64_t>(
        dist::tensor_hash(Tensor::from_vector(together.params, {static_cast<int64_t>(together.params.size())})));
    comm.all_gather(Tensor::from_vector<int64_t>({mine}, {1}), hashes, "test hashes");
    CHECK(hashes.to_vector<int64_t>()[0] == hashes.to_vector<int64_t>()[1]);
  }
}

TEST_CASE("A 2-rank data-parallel run repeats bit for bit", "[dist]") {
  dist::Communicator& comm = world();
  const Problem mine = rank_batch(comm);
  const Tensor& inputs = mine.inputs;
  const Tensor& labels = mine.labels;
  const Trained first = train("adamw", inputs, labels, &comm, options_for("adamw"));
  const Trained second = train("adamw", inputs, labels, &comm, options_for("adamw"));
  CHECK(std::memcmp(first.params.data(), second.params.data(), first.params.size() * sizeof(float)) == 0);
}

namespace {

// Three data-parallel steps with loss scaling from 1024 in which rank 1 alone meets an overflow at step 1,
// by `inject` (which may replace its batch or write its gradient arena before backward): every rank
// skips that step, backs off to 512 and keeps its parameters, and the ranks stay equal.
void check_inf_on_rank_1(const std::string& name, int zero_stage,
                         const std::function<void(optim::Optimizer&, Tensor&)>& inject) {
  dist::Communicator& comm = world();
  const Problem mine = rank_batch(comm);
  const Tensor& inputs = mine.inputs;
  const Tensor& labels = mine.labels;
  auto model = make_mlp();
  optim::OptimizerOptions options(1e-2);
  options.loss_scaling(optim::LossScalingOptions().enabled(true).initial_scale(1024.0));
  auto optimizer = optim::make_optimizer(name, model->named_parameters(), options);
  std::shared_ptr<dist::Communicator> shared(&comm, [](dist::Communicator*) {});
  dist::DataParallelOptions parallel_options;
  parallel_options.zero_stage = zero_stage;
  dist::DataParallel parallel(*model, *optimizer, shared, parallel_options);
  for (int step = 0; step < 3; ++step) {
    Tensor batch = inputs;
    if (step == 1 && comm.rank() == 1) inject(*optimizer, batch);
    const std::vector<float> before = optimizer->arena().params().to_vector<float>();
    parallel.backward(optimizer->scale_loss(opsnn::ops::cross_entropy(model->forward(batch), labels)));
    const optim::StepState state = parallel.step();
    optimizer->zero_grad();
    CHECK(state.skipped_steps == (step == 0 ? 0 : 1));
    if (step == 1) {
      CHECK(state.step == 1);
      CHECK(state.loss_scale == 512.0f);
      CHECK(optimizer->arena().params().to_vector<float>() == before);
    }
  }
  parallel.check_consistency(3);  // same weights and step state on both ranks (throws otherwise)
  CHECK(optimizer->step_state().step == 2);
}

}  // namespace

TEST_CASE("An inf on one rank makes every rank skip the step and back off the loss scale alike", "[dist]") {
  check_inf_on_rank_1("adam", 0, [](optim::Optimizer&, Tensor& batch) {  // an overflow in one sample
    std::vector<float> values = batch.to_vector<float>();
    values[3] = INFINITY;
    batch = Tensor::from_vector(values, batch.shape());
  });
}

TEST_CASE("distributed.check_every_steps stops every rank when the ranks' weights differ", "[dist]") {
  dist::Communicator& comm = world();
  auto model = make_mlp();
  auto optimizer = optim::make_optimizer("sgd", model->named_parameters(), optim::OptimizerOptions(0.1));
  std::shared_ptr<dist::Communicator> shared(&comm, [](dist::Communicator*) {});
  dist::DataParallel parallel(*model, *optimizer, shared);
  parallel.check_consistency(0);  // equal after the broadcast
  if (comm.rank() == 1) {
    Tensor params = optimizer->arena().params();
    std::vector<float> values = params.to_vector<float>();
    values[0] += 1.0f;
    params.copy_(Tensor::from_vector(values, params.shape()));
  }
  CHECK_THROWS_WITH(parallel.check_consistency(1), Catch::Contains("rank 1 differ from rank 0's"));
}

TEST_CASE("Gradient accumulation synchronizes only the last micro-batch", "[dist]") {
  dist::Communicator& comm = world();
  const Problem problem = make_problem(4 * kRankBatch);
  // Rank r's two micro-batches; one process sees all four at once.
  const Tensor first = rows(problem.inputs, comm.rank() * 2 * kRankBatch, kRankBatch);
  const Tensor second = rows(problem.inputs, comm.rank() * 2 * kRankBatch + kRankBatch, kRankBatch);
  const Tensor first_labels = label_rows(problem.labels, comm.rank() * 2 * kRankBatch, kRankBatch);
  const Tensor second_labels = label_rows(problem.labels, comm.rank() * 2 * kRankBatch + kRankBatch, kRankBatch);
  auto model = make_mlp();
  auto optimizer = optim::make_optimizer("sgd", model->named_parameters(), optim::OptimizerOptions(0.1));
  std::shared_ptr<dist::Communicator> shared(&comm, [](dist::Communicator*) {});
  dist::DataParallel parallel(*model, *optimizer, shared);
  const int64_t calls = comm.stats().calls;
  parallel.backward(opsnn::ops::scale(opsnn::ops::cross_entropy(model->forward(first), first_labels), 0.5), false);
  CHECK(comm.stats().calls == calls);  // nothing sent for the first micro-batch
  parallel.backward(opsnn::ops::scale(opsnn::ops::cross_entropy(model->forward(second), second_labels), 0.5), true);
  parallel.synchronize_gradients();
  CHECK(comm.stats().calls == calls + static_cast<int64_t>(parallel.buckets().size()));
  const std::vector<float> together = optimizer->arena().grads().to_vector<float>();

  auto reference = make_mlp();
  auto reference_optimizer = optim::make_optimizer("sgd", reference->named_parameters(), optim::OptimizerOptions(0.1));
  opsnn::ops::cross_entropy(reference->forward(problem.inputs), problem.labels).backward();
  const std::vector<float> alone = reference_optimizer->arena().grads().to_vector<float>();
  double scale = 0.0;
  for (float g : alone) scale = std::max(scale, std::fabs(static_cast<double>(g)));
  for (size_t i = 0; i < alone.size(); ++i) REQUIRE(std::fabs(alone[i] - together[i]) <= 1e-5 * scale);
}

namespace {

// kSteps data-parallel SGD steps with top-k at `density` (0: no sparsification), exchanging as asked.
std::vector<float> train_topk(double density, dist::DataParallelOptions::TopKExchange exchange,
                              dist::ExchangeReport* last = nullptr) {
  dist::Communicator& comm = world();
  const Problem mine = rank_batch(comm);
  const Tensor& inputs = mine.inputs;
  const Tensor& labels = mine.labels;
  auto model = make_mlp();
  optim::OptimizerOptions options(0.1);
  if (density > 0) {
    optim::TopKOptions topk;
    topk.density = density;
    options.sparsification(topk);
  }
  auto optimizer = optim::make_optimizer("sgd", model->named_parameters(), options);
  std::shared_ptr<dist::Communicator> shared(&comm, [](dist::Communicator*) {});
  dist::DataParallelOptions parallel_options;
  parallel_options.topk_exchange = exchange;
  dist::DataParallel parallel(*model, *optimizer, shared, parallel_options);
  if (density > 0) CHECK(parallel.exchanges_pairs() == (exchange == dist::DataParallelOptions::TopKExchange::pairs));
  for (int64_t step = 0; step < kSteps; ++step) {
    parallel.backward(opsnn::ops::cross_entropy(model->forward(inputs), labels));
    parallel.step();
    optimizer->zero_grad();
  }
  if (last) *last = parallel.last_exchange();
  return optimizer->arena().params().to_vector<float>();
}

}  // namespace

TEST_CASE("Top-k across ranks at density 1 is exactly dense data parallel", "[dist]") {
  const std::vector<float> dense = train_topk(0.0, dist::DataParallelOptions::TopKExchange::automatic);
  const std::vector<float> pairs = train_topk(1.0, dist::DataParallelOptions::TopKExchange::pairs);
  CHECK(std::memcmp(dense.data(), pairs.data(), dense.size() * sizeof(float)) == 0);
}

TEST_CASE("Top-k pairs exchanged by all-gather give the dense sum of the ranks' selections", "[dist]") {
  dist::ExchangeReport report;
  const std::vector<float> pairs = train_topk(0.1, dist::DataParallelOptions::TopKExchange::pairs, &report);
  const std::vector<float> dense = train_topk(0.1, dist::DataParallelOptions::TopKExchange::dense);
  CHECK(std::memcmp(dense.data(), pairs.data(), dense.size() * sizeof(float)) == 0);
  CHECK(report.sparse);
  // About 10% of the arena per rank (the sampled threshold keeps within 20% of k), 12 bytes per pair.
  CHECK(report.pairs_per_rank > 0);
  CHECK(report.sent_bytes <= static_cast<int64_t>(0.1 * 1.2 * (report.dense_bytes / 4) * 12) + 8 + 12);
  // The ranks apply the identical union update.
  Tensor hashes = Tensor::zeros({2}, DType::i64);
  const int64_t mine =
      static_cast<int64_t>(dist::tensor_hash(Tensor::from_vector(pairs, {static_cast<int64_t>(pairs.size())})));
  world().all_gather(Tensor::from_vector<int64_t>({mine}, {1}), hashes, "test hashes");
  CHECK(hashes.to_vector<int64_t>()[0] == hashes.to_vector<int64_t>()[1]);
  // And it is not the dense result: the selection did something.
  const std::vector<float> unsparsified = train_topk(0.0, dist::DataParallelOptions::TopKExchange::automatic);
  CHECK(std::memcmp(unsparsified.data(), pairs.data(), pairs.size() * sizeof(float)) != 0);
}

namespace {

// The largest |a - b| relative to the largest |a|.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0.0, worst = 0.0;
  for (float v : a) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("ZeRO-1 equals plain data parallel for SGD Adam AdamW LAMB and Lion", "[dist]") {
  dist::Communicator& comm = world();
  const Problem mine = rank_batch(comm);
  const Tensor& inputs = mine.inputs;
  const Tensor& labels = mine.labels;
  for (const std::string name : {"sgd", "adam", "adamw", "lamb", "lion"}) {
    for (const bool clip : {false, true}) {
      INFO("optimizer " << name << (clip ? " with clipping" : ""));
      optim::OptimizerOptions options = options_for(name);
      if (clip) options.max_grad_norm(0.05);  // below the norm of these gradients: every step clips
      const Trained plain = train(name, inputs, labels, &comm, options, 0);
      const Trained sharded = train(name, inputs, labels, &comm, options, 1);
      REQUIRE(plain.params.size() == sharded.params.size());
      CHECK(sharded.state.step == kSteps);
      // The element-wise rules see the same reduced gradients and scalars: the same bits. The norms (for
      // clipping, LAMB's trust ratios) are sums of per-slice partials, which may round differently for
      // the tensors a slice boundary cuts.
      if (name == "lamb" || clip)
        CHECK(relative_difference(plain.params, sharded.params) <= 1e-6);
      else
        CHECK(std::memcmp(plain.params.data(), sharded.params.data(), plain.params.size() * sizeof(float)) == 0);
      CHECK(std::fabs(plain.state.grad_norm - sharded.state.grad_norm) <= 1e-6 * plain.state.grad_norm);
    }
  }
}

TEST_CASE("ZeRO-1 keeps 1/world of the optimizer states and steps only its slice", "[dist]") {
  dist::Communicator& comm = world();
  auto model = make_mlp();
  auto optimizer = optim::make_optimizer("adam", model->named_parameters(), optim::OptimizerOptions(1e-2));
  const int64_t elements = optimizer->arena().padded_elements();
  std::shared_ptr<dist::Communicator> shared(&comm, [](dist::Communicator*) {});
  dist::DataParallelOptions options;
  options.zero_stage = 1;
  dist::DataParallel parallel(*model, *optimizer, shared, options);
  const optim::ArenaShardRange shard = parallel.shard();
  const int64_t half = (elements + 1) / 2, slice = (half + 31) / 32 * 32;
  CHECK(shard.begin == (comm.rank() == 0 ? 0 : slice));
  CHECK(shard.end == (comm.rank() == 0 ? slice : elements));
  CHECK(optimizer->arena().state(0).numel() == shard.end - shard.begin);
  CHECK(parallel.state_bytes_per_rank() == 2 * (shard.end - shard.begin) * 4);
  CHECK(optimizer->sharded());
  CHECK_THROWS_WITH(optimizer->arena().state_view(0, 0), Catch::Contains("sharded (ZeRO-1)"));
  CHECK_THROWS_WITH(optimizer->shard_states(0, elements, nullptr), Catch::Contains("no exchange"));
}

TEST_CASE("A ZeRO-1 state_dict is the whole state and resumes with another sharding bit for bit", "[dist]") {
  dist::Communicator& comm = world();
  const Problem mine = rank_batch(comm);
  const Tensor& inputs = mine.inputs;
  const Tensor& labels = mine.labels;
  std::shared_ptr<dist::Communicator> shared(&comm, [](dist::Communicator*) {});
  // `steps` steps of AdamW from `state` (if any) with ZeRO stage `zero`: its parameters and state dict.
  auto run = [&](int zero, int steps, const optim::StateDict* state, const std::vector<float>* params) {
    auto model = make_mlp();
    auto optimizer = optim::make_optimizer("adamw", model->named_parameters(), options_for("adamw"));
    if (params) optimizer->arena().params().copy_(Tensor::from_vector(*params, optimizer->arena().params().shape()));
    dist::DataParallelOptions options;
    options.zero_stage = zero;
    dist::DataParallel parallel(*model, *optimizer, shared, options);
    if (state) optimizer->load_state_dict(*state);  // after sharding: each rank keeps its part
    for (int step = 0; step < steps; ++step) {
      parallel.backward(opsnn::ops::cross_entropy(model->forward(inputs), labels));
      parallel.step();
      optimizer->zero_grad();
    }
    return std::make_pair(optimizer->arena().params().to_vector<float>(), optimizer->state_dict());
  };
  const auto [plain_params, plain_state] = run(0, 6, nullptr, nullptr);
  const auto [zero_params, zero_state] = run(1, 6, nullptr, nullptr);
  REQUIRE(plain_state.size() == zero_state.size());
  for (const auto& [key, tensor] : plain_state) {
    INFO(key);
    REQUIRE(zero_state.count(key) == 1);
    CHECK(tensor.to_vector<double>() == zero_state.at(key).to_vector<double>());
  }
  // 3 + 3 steps through a checkpoint, each way round, equal 6 uninterrupted ones to the bit.
  for (const auto& [first, second] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{1, 1}}) {
    INFO("zero_stage " << first << " then " << second);
    const auto [half_params, half_state] = run(first, 3, nullptr, nullptr);
    const auto [params, state] = run(second, 3, &half_state, &half_params);
    CHECK(std::memcmp(params.data(), zero_params.data(), params.size() * sizeof(float)) == 0);
    CHECK(state.at("step_state.step").item() == 6.0);
  }
}

TEST_CASE("ZeRO-1: an inf on one rank in a slice another rank owns skips the step on every rank", "[dist]") {
  check_inf_on_rank_1("lamb", 1, [](optim::Optimizer& optimizer, Tensor&) {
    // Element 0 lies in rank 0's slice; backward accumulates onto it, and only rank 0 steps it.
    Tensor grads = optimizer.arena().grads();
    std::vector<float> values = grads.to_vector<float>();
    values[0] = INFINITY;
    grads.copy_(Tensor::from_vector(values, grads.shape()));
  });
}

TEST_CASE("ZeRO-1 refuses zero_stage 2 and top-k", "[dist]") {
  dist::Communicator& comm = world();
  std::shared_ptr<dist::Communicator> shared(&comm, [](dist::Communicator*) {});
  auto model = make_mlp();
  auto optimizer = optim::make_optimizer("sgd", model->named_parameters(), optim::OptimizerOptions(0.1));
  dist::DataParallelOptions options;
  options.zero_stage = 2;
  CHECK_THROWS_WITH(dist::DataParallel(*model, *optimizer, shared, options),
                    Catch::Contains("distributed.zero_stage = 2: expected 0"));
  auto sparse_model = make_mlp();
  optim::OptimizerOptions topk(0.1);
  topk.sparsification(optim::TopKOptions{});
  auto sparse_optimizer = optim::make_optimizer("sgd", sparse_model->named_parameters(), topk);
  options.zero_stage = 1;
  CHECK_THROWS_WITH(dist::DataParallel(*sparse_model, *sparse_optimizer, shared, options),
                    Catch::Contains("zero_stage = 1 with top-k"));
}
