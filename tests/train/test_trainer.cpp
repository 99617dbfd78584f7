// Tests of src/train/trainer.cpp and its hooks: bit-identical resume (dense, row-sparse, dlrm on Criteo rows
// and top-k runs),
// lazy sparse embedding updates, the top-k density in metrics, grad accumulation, interruption, the
// refusal of low precision and pinned batches on the CPU, and (tag [e2e]) short real trainings on
// Fashion-MNIST and CTR.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "opsnn/nn/module.h"
#include "opsnn/ops/backend.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/train/trainer.h"
#include "support/catch.h"
#include "support/criteo_files.h"
#include "support/temporary_folder.h"
#include "support/trainer_runs.h"

using namespace opsnn;
using namespace opsnn::train;
namespace fs = std::filesystem;
using opsnn::testing::quiet_options;

namespace {

// One temporary folder per test, named after this file.
struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-trainer-test") {}
};

// Tiny synthetic images (6 batches per epoch) through a narrow small_cnn: a step takes about a millisecond.
// The test configs pin train.device: cpu, since bit-identical resume is a CPU promise and auto picks a GPU.
const char* kSmallCnnYaml = R"(
run: {name: tiny_cnn}
model: {arch: small_cnn, width: 4}
data:
  dataset: synthetic
  batch_size: 16
  eval_batch_size: 64
  synthetic: {train_size: 96, test_size: 64, channels: 1, height: 8, width: 8, num_classes: 4, noise: 0.5, seed: 3}
train: {epochs: 0, max_steps: 8, seed: 1, device: cpu}
optimizer: {name: adam, lr: 0.01}
scheduler: {name: warmup_cosine, warmup_steps: 3}
logging: {every_steps: 2, progress: plain}
checkpoint: {every_epochs: 0, keep_last: 0}
)";

// CTR rows with small vocabularies (10 batches per epoch); the embedding table gets row-sparse gradients.
const char* kCtrYaml = R"(
run: {name: tiny_ctr}
model: {arch: ctr, embedding_dim: 4, hidden_sizes: [8]}
data:
  dataset: ctr_synthetic
  batch_size: 32
  eval_batch_size: 256
  ctr: {train_size: 320, test_size: 256, vocab_sizes: [400, 20, 5], seed: 2}
train: {epochs: 0, max_steps: 8, seed: 1, device: cpu}
optimizer: {name: adam, lr: 0.01}
logging: {every_steps: 2, progress: plain}
checkpoint: {every_epochs: 0, keep_last: 0}
)";

// DLRM on generated Criteo rows (data.root set per test; 12 batches per epoch of the 360 training rows).
const char* kDlrmYaml = R"(
run: {name: tiny_dlrm}
model: {arch: dlrm, embedding_dim: 4, hash_buckets: 64, bottom_mlp: [8, 4], top_mlp: [8]}
data:
  dataset: criteo
  batch_size: 30
  eval_batch_size: 256
train: {epochs: 0, max_steps: 8, seed: 1, device: cpu}
optimizer: {name: adam, lr: 0.01}
logging: {every_steps: 2, progress: plain}
checkpoint: {every_epochs: 0, keep_last: 0}
)";

TrainConfig make_config(const char* yaml, std::vector<std::string> overrides = {}) {
  return load_config_text(yaml, "test.yaml", overrides);
}

std::map<std::string, std::vector<float>> snapshot(Trainer& trainer) {
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, tensor] : trainer.model().state_dict()) values["model." + name] = tensor.to_vector<float>();
  for (const auto& [name, tensor] : trainer.optimizer().state_dict())
    values["optimizer." + name] = tensor.to_vector<float>();
  return values;
}

std::vector<nlohmann::json> read_metrics(const fs::path& run_dir) {
  std::ifstream file(run_dir / "metrics.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(file, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// 2N steps straight against N steps, a checkpoint, a new Trainer resuming from it, and N more steps.
void check_bit_identical_resume(const char* yaml, std::vector<std::string> overrides, int64_t half) {
  overrides.push_back("train.max_steps=" + std::to_string(2 * half));
  TemporaryFolder folder;
  std::vector<double> straight_losses;
  std::map<std::string, std::vector<float>> straight_state;
  {
    Trainer straight(make_config(yaml, overrides), quiet_options(folder.path / "straight"));
    straight.train_steps(2 * half);
    REQUIRE(straight.step() == 2 * half);
    straight_losses = straight.step_losses();
    straight_state = snapshot(straight);
  }
  fs::path checkpoint;
  {
    Trainer first(make_config(yaml, overrides), quiet_options(folder.path / "split"));
    first.train_steps(half);
    for (int64_t i = 0; i < half; ++i)
      REQUIRE(first.step_losses()[static_cast<size_t>(i)] == straight_losses[static_cast<size_t>(i)]);
    checkpoint = first.save_checkpoint();
  }
  Trainer second(make_config(yaml, overrides), quiet_options(folder.path / "split", checkpoint.string()));
  REQUIRE(second.step() == half);
  second.train_steps(half);
  REQUIRE(second.step() == 2 * half);
  for (int64_t i = 0; i < half; ++i) {
    INFO("step " << half + i + 1);
    REQUIRE(second.step_losses()[static_cast<size_t>(i)] == straight_losses[static_cast<size_t>(half + i)]);
  }
  std::map<std::string, std::vector<float>> resumed_state = snapshot(second);
  REQUIRE(resumed_state.size() == straight_state.size());
  for (const auto& [name, values] : straight_state) {
    INFO(name);
    REQUIRE(resumed_state.count(name) == 1);
    REQUIRE(resumed_state[name] == values);  // bit-identical floats
  }
}

}  // namespace

TEST_CASE("resume: N + N steps with a checkpoint equal 2N steps straight, bit for bit (small_cnn)", "[trainer]") {
  SECTION("checkpoint inside an epoch") { check_bit_identical_resume(kSmallCnnYaml, {}, 4); }
  SECTION("checkpoint after the last batch of an epoch, before its end is seen") {
    check_bit_identical_resume(kSmallCnnYaml, {"train.eval_every_steps=0"}, 6);
  }
  SECTION("sgd with nesterov momentum, clipping and two micro-batches per step") {
    check_bit_identical_resume(
        kSmallCnnYaml,
        {"optimizer.name=sgd", "optimizer.lr=0.05", "optimizer.momentum=0.9", "optimizer.nesterov=true",
         "optimizer.settings.max_grad_norm=0.5", "train.grad_accumulation=2"},
        3);
  }
}

TEST_CASE("resume: ctr with row-sparse embedding gradients is bit-identical (lazy adam, sparse sgd)", "[trainer]") {
  SECTION("lazy adam") { check_bit_identical_resume(kCtrYaml, {}, 4); }
  SECTION("sparse sgd with momentum: the per-row momentum start flags are checkpointed") {
    check_bit_identical_resume(kCtrYaml, {"optimizer.name=sgd", "optimizer.lr=0.1", "optimizer.momentum=0.9"}, 4);
  }
}

TEST_CASE("resume: dlrm on criteo rows with row-sparse table gradients is bit-identical", "[trainer]") {
  TemporaryFolder data;
  opsnn::testing::write_criteo_file(data.path / "train.txt", opsnn::testing::criteo_text(11, 0, 400));
  SECTION("inside an epoch") { check_bit_identical_resume(kDlrmYaml, {"data.root=" + data.path.string()}, 5); }
  SECTION("across an epoch end") {
    check_bit_identical_resume(kDlrmYaml, {"data.root=" + data.path.string(), "train.eval_every_steps=4"}, 12);
  }
}

TEST_CASE("resume: top-k sparsification state (accumulator, velocity, variance) is checkpointed", "[trainer]") {
  check_bit_identical_resume(
      kSmallCnnYaml,
      {"optimizer.name=sgd", "optimizer.lr=0.05", "optimizer.momentum=0.9",
       "optimizer.settings.sparsification.method=topk", "optimizer.settings.sparsification.density=0.05",
       "optimizer.settings.sparsification.warmup_steps=4"},
      4);
}

TEST_CASE("ctr: lazy adam leaves untouched embedding rows and their moments exactly as they were", "[trainer]") {
  TemporaryFolder folder;
  Trainer trainer(make_config(kCtrYaml), quiet_options(folder.path));
  REQUIRE(trainer.bayes_test_loss().has_value());
  Tensor table;
  for (const auto& [name, tensor] : trainer.model().named_parameters())
    if (name == "embedding.weight") table = tensor;
  REQUIRE(table.defined());
  REQUIRE(table.sparse_grad());
  std::vector<float> before = table.to_vector<float>();
  trainer.train_steps(3);
  std::vector<float> after = table.to_vector<float>();
  std::vector<float> exp_avg = trainer.optimizer().state_dict().at("embedding.weight.exp_avg").to_vector<float>();
  int64_t width = table.size(1), untouched = 0, touched = 0;
  for (int64_t row = 0; row < table.size(0); ++row) {
    bool moved = false, has_moment = false;
    for (int64_t k = 0; k < width; ++k) {
      size_t i = static_cast<size_t>(row * width + k);
      moved |= after[i] != before[i];
      has_moment |= exp_avg[i] != 0.0f;
    }
    REQUIRE(moved == has_moment);  // a row moves exactly when a batch touched it
    (moved ? touched : untouched) += 1;
  }
  CHECK(touched > 20);
  CHECK(untouched > 100);  // 3 batches of 32 rows cannot touch most of the 400 ids of field 0
}

TEST_CASE("trainer: model.sparse_embeddings false gives the ctr and dlrm tables dense gradients", "[trainer]") {
  TemporaryFolder folder, data;
  opsnn::testing::write_criteo_file(data.path / "train.txt", opsnn::testing::criteo_text(11, 0, 100));
  const TrainConfig ctr = make_config(kCtrYaml, {"model.sparse_embeddings=false"});
  const TrainConfig dlrm = make_config(kDlrmYaml, {"data.root=" + data.path.string(), "model.sparse_embeddings=false"});
  for (const TrainConfig* config : {&ctr, &dlrm}) {
    INFO(config->model.arch);
    Trainer trainer(*config, quiet_options(folder.path / config->model.arch));
    Tensor table;
    for (const auto& [name, tensor] : trainer.model().named_parameters())
      if (name == "embedding.weight") table = tensor;
    REQUIRE(table.defined());
    CHECK_FALSE(table.sparse_grad());
    CHECK(trainer.optimizer().sparse_updater() == nullptr);
    trainer.train_steps(2);
    CHECK(trainer.step() == 2);
  }
  Trainer sparse(make_config(kDlrmYaml, {"data.root=" + data.path.string()}), quiet_options(folder.path / "sparse"));
  CHECK(sparse.optimizer().sparse_updater() != nullptr);
}

TEST_CASE("top-k: the achieved density is logged and follows the warm-up to the target", "[trainer]") {
  TemporaryFolder folder;
  TrainConfig config =
      make_config(kSmallCnnYaml,
                  {"optimizer.name=sgd", "optimizer.lr=0.05", "optimizer.momentum=0.9",
                   "optimizer.settings.sparsification.method=topk", "optimizer.settings.sparsification.density=0.02",
                   "optimizer.settings.sparsification.initial_density=0.5",
                   "optimizer.settings.sparsification.warmup_steps=4", "logging.every_steps=1", "train.max_steps=8"});
  Trainer trainer(config, quiet_options(folder.path));
  trainer.fit();
  std::vector<double> densities;
  for (const auto& record : read_metrics(folder.path))
    if (record["event"] == "train") densities.push_back(record.at("density").get<double>());
  REQUIRE(densities.size() == 8);
  CHECK(densities.front() == Approx(0.5).margin(0.05));
  for (size_t i = 4; i < densities.size(); ++i) CHECK(densities[i] == Approx(0.02).margin(0.01));
  for (size_t i = 1; i < 4; ++i) CHECK(densities[i] < densities[i - 1]);
}

TEST_CASE("top-k: momentum correction needs sgd with momentum, loss scaling is refused", "[trainer]") {
  TemporaryFolder folder;
  CHECK_THROWS_AS(Trainer(make_config(kSmallCnnYaml, {"optimizer.settings.sparsification.method=topk"}),
                          quiet_options(folder.path)),
                  ConfigError);
  CHECK_NOTHROW(Trainer(make_config(kSmallCnnYaml, {"optimizer.settings.sparsification.method=topk",
                                                    "optimizer.settings.sparsification.momentum_correction=false"}),
                        quiet_options(folder.path)));
  CHECK_THROWS_WITH(Trainer(make_config(kSmallCnnYaml, {"optimizer.name=sgd", "optimizer.momentum=0.9",
                                                        "optimizer.settings.sparsification.method=topk",
                                                        "optimizer.settings.loss_scaling.enabled=true"}),
                            quiet_options(folder.path)),
                    Catch::Contains("loss scaling"));
}

TEST_CASE("trainer: tf32, bf16 and fp16 on the CPU are config errors naming train.precision", "[trainer]") {
  TemporaryFolder folder;
  for (const char* precision : {"tf32", "bf16", "fp16"}) {
    INFO(precision);
    CHECK_THROWS_AS(Trainer(make_config(kSmallCnnYaml, {std::string("train.precision=") + precision}),
                            quiet_options(folder.path / precision)),
                    ConfigError);
    CHECK_THROWS_WITH(Trainer(make_config(kSmallCnnYaml, {std::string("train.precision=") + precision}),
                              quiet_options(folder.path / precision)),
                      Catch::Contains("train.precision"));
  }
}

TEST_CASE("trainer: data.pin_memory true on the CPU is a config error naming the key, auto and false train",
          "[trainer]") {
  TemporaryFolder folder;
  const TrainConfig pinned = make_config(kSmallCnnYaml, {"data.pin_memory=true"});
  CHECK_THROWS_AS(Trainer(pinned, quiet_options(folder.path / "pinned")), ConfigError);
  CHECK_THROWS_WITH(Trainer(pinned, quiet_options(folder.path / "pinned")),
                    Catch::Contains("key 'data.pin_memory'") && Catch::Contains("CUDA"));
  std::vector<double> losses;
  for (const char* setting : {"auto", "false"}) {
    INFO("data.pin_memory " << setting);
    Trainer trainer(make_config(kSmallCnnYaml, {std::string("data.pin_memory=") + setting}),
                    quiet_options(folder.path / setting));
    trainer.train_steps(4);
    if (losses.empty()) losses = trainer.step_losses();
    CHECK(trainer.step_losses() == losses);
  }
}

TEST_CASE("trainer: train.deterministic false holds for the run and is handed back after it", "[trainer]") {
  TemporaryFolder folder;
  REQUIRE(ops::conv_deterministic());
  {
    Trainer trainer(make_config(kSmallCnnYaml, {"train.deterministic=false"}), quiet_options(folder.path / "fast"));
    CHECK_FALSE(ops::conv_deterministic());
    trainer.train_steps(1);
    CHECK_FALSE(ops::conv_deterministic());
  }
  CHECK(ops::conv_deterministic());
}

TEST_CASE("trainer: model.channels_last is resolved (auto: false on the CPU), logged, and trains as NCHW does",
          "[trainer]") {
  TemporaryFolder folder;
  std::vector<double> nchw_losses;
  for (const char* setting : {"auto", "true"}) {
    INFO("model.channels_last " << setting);
    const fs::path run_dir = folder.path / setting;
    {
      Trainer trainer(
          make_config(kSmallCnnYaml, {"model.arch=resnet18", std::string("model.channels_last=") + setting}),
          quiet_options(run_dir));
      trainer.train_steps(3);
      if (nchw_losses.empty()) {
        nchw_losses = trainer.step_losses();
      } else {
        REQUIRE(trainer.step_losses().size() == nchw_losses.size());
        for (size_t i = 0; i < nchw_losses.size(); ++i)
          CHECK(std::fabs(trainer.step_losses()[i] - nchw_losses[i]) <= 1e-5 * std::fabs(nchw_losses[i]));
      }
    }
    std::ifstream log(run_dir / "train.log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    CHECK_THAT(text, Catch::Contains(std::string(setting) == "auto" ? "model.channels_last: false (auto"
                                                                    : "model.channels_last: true (as configured)"));
  }
}

TEST_CASE("trainer: epochs, grad accumulation, evaluation, checkpoints and the summary", "[trainer]") {
  TemporaryFolder folder;
  // 6 batches per epoch, 4 micro-batches per step: steps of 4 and 2 batches, so 2 steps per epoch.
  TrainConfig config = make_config(kSmallCnnYaml, {"train.max_steps=0", "train.epochs=2", "train.grad_accumulation=4",
                                                   "checkpoint.every_epochs=1", "logging.every_steps=1"});
  Trainer trainer(config, quiet_options(folder.path));
  TrainSummary summary = trainer.fit();
  CHECK(summary.steps == 4);
  CHECK(summary.epochs_completed == 2);
  CHECK_FALSE(summary.interrupted);
  REQUIRE(summary.final_eval.has_value());
  CHECK(summary.final_eval->samples == 64);
  CHECK(fs::exists(fs::path(summary.last_checkpoint) / "model.safetensors"));
  int evals = 0;
  for (const auto& record : read_metrics(folder.path)) evals += record["event"] == "eval";
  CHECK(evals == 2);  // one per epoch; the final state was already evaluated at the end of epoch 2
  CHECK(fs::exists(folder.path / "checkpoints" / "step_00000002"));
  CHECK(fs::exists(folder.path / "checkpoints" / "step_00000004"));
  CHECK(fs::exists(folder.path / "config.yaml"));
  CHECK(fs::file_size(folder.path / "train.log") > 0);
}

TEST_CASE("trainer: run lengths that would overflow or degenerate are config errors naming the key", "[trainer]") {
  TemporaryFolder folder;
  // 6 batches per epoch: 7 micro-batches per step would end every step at the epoch end with the
  // gradient divided by 7.
  CHECK_THROWS_MATCHES(Trainer(make_config(kSmallCnnYaml, {"train.grad_accumulation=7"}), quiet_options(folder.path)),
                       ConfigError,
                       Catch::Matchers::Message("test.yaml: key 'train.grad_accumulation': 7 must be in [1, 6], the "
                                                "batches in an epoch (96 training samples at data.batch_size 16)"));
  CHECK_NOTHROW(Trainer(make_config(kSmallCnnYaml, {"train.grad_accumulation=6"}), quiet_options(folder.path)));
  // Configs built in code skip the schema's bounds; the trainer still refuses what would wrap around.
  TrainConfig epochs = make_config(kSmallCnnYaml, {"train.epochs=1", "train.max_steps=0"});
  epochs.train.epochs = int64_t{1} << 62;
  CHECK_THROWS_WITH(Trainer(epochs, quiet_options(folder.path)),
                    Catch::StartsWith("test.yaml: key 'train.epochs': 4611686018427387904 epochs of 6 steps each"));
  TrainConfig keep = make_config(kSmallCnnYaml);
  keep.checkpoint.keep_last = 4294967297;  // was narrowed to int: 1
  CHECK_THROWS_WITH(Trainer(keep, quiet_options(folder.path)),
                    "test.yaml: key 'checkpoint.keep_last': 4294967297 must be in [0, 2147483647]");
}

TEST_CASE("trainer: rules of the config alone and the device are checked before the run folder is written",
          "[trainer]") {
  TemporaryFolder folder;
  const fs::path run_dir = folder.path / "run";
  TrainConfig steps = make_config(kSmallCnnYaml);
  steps.train.max_steps = -1;  // built in code: no schema bound
  CHECK_THROWS_MATCHES(Trainer(steps, quiet_options(run_dir)), ConfigError,
                       Catch::Matchers::Message("test.yaml: key 'train.max_steps': -1 must be >= 0"));
  CHECK_FALSE(fs::exists(run_dir));
  TrainConfig keep = make_config(kSmallCnnYaml);
  keep.checkpoint.keep_last = -1;
  CHECK_THROWS_MATCHES(
      Trainer(keep, quiet_options(run_dir)), ConfigError,
      Catch::Matchers::Message("test.yaml: key 'checkpoint.keep_last': -1 must be in [0, 2147483647]"));
  CHECK_FALSE(fs::exists(run_dir));
  CHECK_THROWS_AS(Trainer(make_config(kSmallCnnYaml, {"train.precision=bf16"}), quiet_options(run_dir)), ConfigError);
  CHECK_FALSE(fs::exists(run_dir));
}

TEST_CASE("trainer: model.num_classes below the dataset's class count is a config error before training", "[trainer]") {
  TemporaryFolder folder;
  // kSmallCnnYaml's synthetic images have 4 classes; 3 outputs failed only at the first loss.
  CHECK_THROWS_MATCHES(Trainer(make_config(kSmallCnnYaml, {"model.num_classes=3"}), quiet_options(folder.path)),
                       ConfigError,
                       Catch::Matchers::Message("test.yaml: key 'model.num_classes': 3 is fewer than the 4 classes of "
                                                "synthetic (its labels go up to 3); use 0 to take the dataset's "
                                                "count"));
  CHECK_NOTHROW(Trainer(make_config(kSmallCnnYaml, {"model.num_classes=6"}), quiet_options(folder.path)));
}

TEST_CASE("trainer: a batch larger than the training set with drop_last is a config error", "[trainer]") {
  TemporaryFolder folder;
  CHECK_THROWS_MATCHES(
      Trainer(make_config(kSmallCnnYaml, {"data.batch_size=97", "data.drop_last=true"}), quiet_options(folder.path)),
      ConfigError,
      Catch::Matchers::Message("test.yaml: key 'data.batch_size': 97 is more than the 96 training "
                               "samples of synthetic, and data.drop_last: true drops the one partial "
                               "batch, leaving none; use a smaller batch_size or drop_last: false"));
  // Without drop_last the one short batch trains.
  CHECK_NOTHROW(Trainer(make_config(kSmallCnnYaml, {"data.batch_size=97"}), quiet_options(folder.path)));
}

TEST_CASE("trainer: schedule and top-k errors found at setup name the config file and the keys written", "[trainer]") {
  TemporaryFolder folder;
  // kSmallCnnYaml: warmup_cosine over max_steps 8, 6 steps per epoch.
  CHECK_THROWS_MATCHES(
      Trainer(make_config(kSmallCnnYaml, {"scheduler.warmup_steps=8"}), quiet_options(folder.path)), ConfigError,
      Catch::Matchers::Message("test.yaml: key 'scheduler.warmup_steps': the warm-up (8 steps) must end "
                               "before the run does (8 steps from train.epochs and train.max_steps) for "
                               "scheduler.name warmup_cosine"));
  CHECK_THROWS_WITH(Trainer(make_config(kSmallCnnYaml, {"scheduler.warmup_steps=0", "scheduler.warmup_epochs=2"}),
                            quiet_options(folder.path)),
                    Catch::StartsWith("test.yaml: key 'scheduler.warmup_epochs': the warm-up (12 steps)"));
  TrainConfig huge = make_config(kSmallCnnYaml, {"scheduler.warmup_steps=0"});
  huge.scheduler.warmup_epochs = 1e19;  // beyond the schema's bound; llround used to give INT64_MIN
  CHECK_THROWS_WITH(Trainer(huge, quiet_options(folder.path)),
                    Catch::StartsWith("test.yaml: key 'scheduler.warmup_epochs': ") &&
                        Catch::Contains("more steps than a 64-bit count holds"));
  CHECK_THROWS_WITH(Trainer(make_config(kSmallCnnYaml, {"optimizer.settings.sparsification.method=topk"}),
                            quiet_options(folder.path)),
                    Catch::StartsWith("test.yaml: key 'optimizer.settings.sparsification.momentum_correction': "));
}

TEST_CASE("trainer: a stop request saves a checkpoint and --resume auto continues from it", "[trainer]") {
  TemporaryFolder folder;
  std::atomic<bool> stop{true};
  TrainerOptions options = quiet_options(folder.path);
  options.stop_requested = &stop;
  {
    Trainer trainer(make_config(kSmallCnnYaml), options);
    trainer.train_steps(3);
    REQUIRE(trainer.step() == 0);  // the stop is honoured before any step
    stop = false;
    trainer.train_steps(3);
    stop = true;
    TrainSummary summary = trainer.fit();
    CHECK(summary.interrupted);
    CHECK(summary.steps == 3);
    CHECK(fs::exists(folder.path / "checkpoints" / "step_00000003" / "state.json"));
  }
  Trainer resumed(make_config(kSmallCnnYaml), quiet_options(folder.path, "auto"));
  CHECK(resumed.step() == 3);
  TrainSummary summary = resumed.fit();
  CHECK(summary.steps == 8);
  CHECK_FALSE(summary.interrupted);
}

TEST_CASE("trainer: a checkpoint of another model is refused with DataError naming it", "[trainer]") {
  TemporaryFolder folder;
  fs::path checkpoint;
  {
    Trainer cnn(make_config(kSmallCnnYaml), quiet_options(folder.path / "cnn"));
    checkpoint = cnn.save_checkpoint();
  }
  CHECK_THROWS_AS(Trainer(make_config(kCtrYaml), quiet_options(folder.path / "ctr", checkpoint.string())), DataError);
  CHECK_THROWS_WITH(Trainer(make_config(kCtrYaml), quiet_options(folder.path / "ctr", checkpoint.string())),
                    Catch::Contains(checkpoint.string()));
  CHECK_THROWS_AS(
      Trainer(make_config(kSmallCnnYaml), quiet_options(folder.path / "x", (folder.path / "nope").string())),
      DataError);
}

// ---- end to end: real data, short budgets ----

TEST_CASE("e2e: the quickstart's small CNN reaches > 75% Fashion-MNIST test accuracy in 300 steps", "[e2e]") {
  TemporaryFolder folder;
  TrainConfig config = load_config(std::string(OPSNN_SOURCE_DIR) + "/configs/quickstart.yaml",
                                   {"train.max_steps=300", "checkpoint.enabled=false", "data.eval_batch_size=1000"});
  Trainer trainer(config, quiet_options(folder.path));
  TrainSummary summary = trainer.fit();
  REQUIRE(summary.final_eval.has_value());
  CHECK(summary.final_eval->samples == 10000);
  CHECK(summary.final_eval->accuracy > 0.75);
  CHECK(summary.steps == 300);
}

TEST_CASE("e2e: ctr_synthetic with lazy adam gets within 5% of its Bayes-optimal log-loss", "[e2e]") {
  TemporaryFolder folder;
  TrainConfig config = make_config(R"(
run: {name: ctr_e2e}
model: {arch: ctr, embedding_dim: 8, hidden_sizes: [32]}
data:
  dataset: ctr_synthetic
  batch_size: 256
  eval_batch_size: 4096
  ctr: {train_size: 60000, test_size: 20000, vocab_sizes: [200, 100, 50, 20, 10, 5], seed: 0}
train: {epochs: 3, seed: 0, device: cpu}
optimizer: {name: adam, lr: 3.0e-3}
logging: {every_steps: 100, progress: plain}
checkpoint: {enabled: false}
)");
  Trainer trainer(config, quiet_options(folder.path));
  TrainSummary summary = trainer.fit();
  REQUIRE(summary.bayes_test_loss.has_value());
  REQUIRE(summary.final_eval.has_value());
  INFO("test loss " << summary.final_eval->loss << ", Bayes " << *summary.bayes_test_loss);
  CHECK(summary.final_eval->loss >= *summary.bayes_test_loss * 0.98);  // cannot beat the planted model
  CHECK(summary.final_eval->loss < *summary.bayes_test_loss * 1.05);
}
