// Tests of the trainer's evaluation of a checkpoint (TrainerOptions::eval_only, opsnn-train --eval-only)
// and of top-5 accuracy in every evaluation: the numbers of a checkpoint equal those its training run
// logged, nothing in the checkpoint or the run's config.yaml changes, the optimizer settings may differ,
// an eval-only Trainer refuses to train or save, and top-5 is counted as a sort of each row would.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "opsnn/autograd/node.h"
#include "opsnn/core/error.h"
#include "opsnn/data/loader.h"
#include "opsnn/nn/module.h"
#include "opsnn/train/checkpoint.h"
#include "opsnn/train/trainer.h"
#include "support/catch.h"
#include "support/temporary_folder.h"
#include "support/trainer_runs.h"
#include "train/setup.h"

using namespace opsnn;
using namespace opsnn::train;
namespace fs = std::filesystem;
using opsnn::testing::quiet_options;

namespace {

struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-eval-only-test") {}
};

// 10 classes of tiny noisy synthetic images: after one epoch neither top-1 nor top-5 is 0 or 1.
const char* kTenClassYaml = R"(
run: {name: ten_classes}
model: {arch: small_cnn, width: 4}
data:
  dataset: synthetic
  batch_size: 16
  eval_batch_size: 48
  synthetic: {train_size: 160, test_size: 120, channels: 1, height: 8, width: 8, num_classes: 10, noise: 1.5, seed: 3}
train: {epochs: 1, seed: 1, device: cpu}
optimizer: {name: adam, lr: 0.01}
logging: {every_steps: 5, progress: plain}
checkpoint: {every_epochs: 1, keep_last: 0}
)";

TrainConfig make_config(std::vector<std::string> overrides = {}) {
  return load_config_text(kTenClassYaml, "ten.yaml", overrides);
}

std::vector<nlohmann::json> eval_records(const fs::path& run_dir) {
  std::ifstream file(run_dir / "metrics.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(file, line);) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record["event"] == "eval") records.push_back(record);
  }
  return records;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// Every file of a folder with its bytes.
std::map<std::string, std::string> folder_contents(const fs::path& folder) {
  std::map<std::string, std::string> contents;
  for (const auto& entry : fs::recursive_directory_iterator(folder))
    if (entry.is_regular_file()) contents[fs::relative(entry.path(), folder).string()] = read_bytes(entry.path());
  return contents;
}

// Top-1 and top-5 hits of `model` on the config's test split (in the trainer's evaluation batches), from
// a full sort of each row (ties: the lower class index first).
std::pair<int64_t, int64_t> count_hits(nn::Module& model, const TrainConfig& config) {
  const Datasets datasets = make_datasets(config);
  data::DataLoader loader(datasets.test, data::LoaderOptions::evaluation(config.data.eval_batch_size, 0));
  autograd::NoGradGuard no_grad;
  model.eval();
  int64_t top1 = 0, top5 = 0;
  while (std::optional<data::Batch> batch = loader.next()) {
    const Tensor logits = model.forward(batch->inputs);
    const std::vector<float> values = logits.to_vector<float>();
    const std::vector<int64_t> labels = batch->labels.to_vector<int64_t>();
    const int64_t classes = logits.size(1);
    for (int64_t i = 0; i < batch->size(); ++i) {
      std::vector<int64_t> order(static_cast<size_t>(classes));
      std::iota(order.begin(), order.end(), 0);
      const float* row = values.data() + i * classes;
      std::stable_sort(order.begin(), order.end(), [row](int64_t a, int64_t b) { return row[a] > row[b]; });
      const int64_t label = labels[static_cast<size_t>(i)];
      top1 += order[0] == label;
      top5 += std::find(order.begin(), order.begin() + 5, label) != order.begin() + 5;
    }
  }
  model.train();
  return {top1, top5};
}

}  // namespace

TEST_CASE("eval: top-5 accuracy is counted as a sort of each row would, and only for 5 classes or more", "[eval]") {
  TemporaryFolder folder;
  Trainer trainer(make_config(), quiet_options(folder.path / "run"));
  trainer.train_steps(4);
  const EvalResult result = trainer.evaluate();
  REQUIRE(result.samples == 120);
  REQUIRE(result.top5_accuracy.has_value());
  const auto [top1, top5] = count_hits(trainer.model(), trainer.config());
  CHECK(result.accuracy == static_cast<double>(top1) / 120.0);
  CHECK(*result.top5_accuracy == static_cast<double>(top5) / 120.0);
  CHECK(*result.top5_accuracy >= result.accuracy);
  const nlohmann::json record = eval_records(folder.path / "run").back();
  CHECK(record["test_acc_top5"].get<double>() == *result.top5_accuracy);
  CHECK_FALSE(record.contains("eval_only"));

  // 5 classes: the label is always among the top 5; 4 classes: no top-5 at all.
  Trainer five(make_config({"data.synthetic.num_classes=5"}), quiet_options(folder.path / "five"));
  CHECK(five.evaluate().top5_accuracy == 1.0);
  Trainer four(make_config({"data.synthetic.num_classes=4"}), quiet_options(folder.path / "four"));
  CHECK_FALSE(four.evaluate().top5_accuracy.has_value());
  CHECK_FALSE(eval_records(folder.path / "four").back().contains("test_acc_top5"));
}

TEST_CASE("eval_only: a checkpoint's numbers equal its run's, nothing changes, the optimizer may differ", "[eval]") {
  TemporaryFolder folder;
  const fs::path run = folder.path / "run";
  {
    Trainer trainer(make_config(), quiet_options(run));
    trainer.fit();
  }
  const std::vector<CheckpointEntry> checkpoints = list_checkpoints(run);
  REQUIRE(checkpoints.size() == 1);
  const nlohmann::json trained = eval_records(run).back();  // of the weights the checkpoint holds
  const auto checkpoint_files = folder_contents(run / "checkpoints");
  const std::string config_yaml = read_bytes(run / "config.yaml");

  TrainerOptions options = quiet_options(run, "auto");
  options.eval_only = true;
  // Another optimizer and training batch size: the evaluation reads the model only.
  Trainer evaluator(make_config({"optimizer.name=sgd", "data.batch_size=7"}), options);
  CHECK(evaluator.step() == checkpoints.back().step);
  const EvalResult result = evaluator.evaluate();
  CHECK(result.loss == trained["test_loss"].get<double>());
  CHECK(result.accuracy == trained["test_acc"].get<double>());
  CHECK(result.top5_accuracy == trained["test_acc_top5"].get<double>());

  const nlohmann::json record = eval_records(run).back();
  CHECK(record["eval_only"] == true);
  CHECK(record["checkpoint"] == checkpoints.back().path.string());
  CHECK(record["step"] == checkpoints.back().step);
  CHECK(record["test_acc"].get<double>() == result.accuracy);
  CHECK(eval_records(run).size() == 2);  // the run's one and this

  CHECK_THROWS_AS(evaluator.train_steps(1), UsageError);
  CHECK_THROWS_AS(evaluator.fit(), UsageError);
  CHECK_THROWS_AS(evaluator.save_checkpoint(), UsageError);
  CHECK(folder_contents(run / "checkpoints") == checkpoint_files);
  CHECK(read_bytes(run / "config.yaml") == config_yaml);  // the training run's record stays
}

TEST_CASE("eval_only: no checkpoint to evaluate is a usage error (none named) or a DataError (auto, none there)",
          "[eval]") {
  TemporaryFolder folder;
  TrainerOptions options = quiet_options(folder.path / "run");
  options.eval_only = true;
  CHECK_THROWS_AS(Trainer(make_config(), options), UsageError);
  CHECK_FALSE(fs::exists(folder.path / "run"));
  options.resume = "auto";
  CHECK_THROWS_WITH(Trainer(make_config(), options), Catch::Contains("nothing to evaluate: no checkpoint in " +
                                                                     (folder.path / "run" / "checkpoints").string()));
  options.resume = (folder.path / "absent").string();
  CHECK_THROWS_WITH(Trainer(make_config(), options), Catch::StartsWith("cannot evaluate " + options.resume + ": "));
}
