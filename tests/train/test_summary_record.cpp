// The summary record Trainer::fit() writes last into metrics.jsonl: what opsnn-experiment's tables read
// from it (config hash, optimizer, precision, top-k density, seed, skipped steps, final loss scale, steps
// per epoch, final train loss, opsnn version and git revision).
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "opsnn/train/checkpoint.h"
#include "opsnn/train/config.h"
#include "opsnn/train/trainer.h"
#include "opsnn/version.h"
#include "support/catch.h"
#include "support/temporary_folder.h"
#include "support/trainer_runs.h"

using namespace opsnn;
using namespace opsnn::train;

namespace {

const char* kTinyYaml = R"(model: {arch: small_cnn, width: 4}
data:
  dataset: synthetic
  batch_size: 16
  synthetic: {train_size: 64, test_size: 32, channels: 1, height: 8, width: 8, num_classes: 4}
train: {epochs: 1, seed: 7, device: cpu}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
checkpoint: {enabled: false}
)";

nlohmann::json last_summary(const std::filesystem::path& run) {
  std::ifstream file(run / "metrics.jsonl");
  nlohmann::json summary;
  for (std::string line; std::getline(file, line);) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record["event"] == "summary") summary = record;
  }
  return summary;
}

}  // namespace

TEST_CASE("summary record: config hash, settings, seed, skipped steps, loss scale and revision", "[trainer]") {
  opsnn::testing::TemporaryFolder folder("opsnn-summary-test");
  SECTION("dense sgd") {
    TrainConfig config = load_config_text(kTinyYaml, "tiny.yaml");
    Trainer trainer(config, opsnn::testing::quiet_options(folder.path / "run"));
    trainer.fit();
    const nlohmann::json summary = last_summary(folder.path / "run");
    REQUIRE(summary.is_object());
    CHECK(summary["config_hash"] == config_digest(emit_config(config)));
    CHECK(summary["optimizer"] == "sgd");
    CHECK(summary["precision"] == "fp32");
    CHECK(summary["topk_density"].is_null());
    CHECK(summary["seed"] == 7);
    CHECK(summary["skipped_steps"] == 0);
    CHECK(summary["final_loss_scale"] == 1.0);
    CHECK(summary["steps_per_epoch"] == 4);
    CHECK(summary["final_train_loss"].is_number());
    CHECK(summary["opsnn_version"] == std::string(opsnn::version()));
    CHECK(summary["git_revision"] == std::string(opsnn::git_revision()));
    CHECK(!summary["git_revision"].get<std::string>().empty());
    CHECK(!summary.contains("peak_memory_bytes"));  // the library does not track it
  }
  SECTION("top-k sparsification gives its density") {
    TrainConfig config = load_config_text(
        kTinyYaml, "tiny.yaml",
        {"optimizer.settings.sparsification.method=topk", "optimizer.settings.sparsification.density=0.1"});
    Trainer trainer(config, opsnn::testing::quiet_options(folder.path / "topk"));
    trainer.fit();
    CHECK(last_summary(folder.path / "topk")["topk_density"] == 0.1);
  }
}
