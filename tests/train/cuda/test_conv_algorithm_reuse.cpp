// opsnn-train's train.conv_algorithms on the GPU: a run given another run's conv_algorithms.json (or
// rerun into its folder with auto) computes with the same convolution algorithms and repeats its loss
// curve bit for bit. Each run starts from an empty algorithm cache, as a new process would. In tests/
// train/cuda/ because it clears the CUDA backend's cache (src/ops/cuda/conv_algorithms.h); tagged [cuda].
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ops/cuda/conv_algorithms.h"
#include "opsnn/core/storage.h"
#include "opsnn/train/config.h"
#include "opsnn/train/trainer.h"
#include "support/catch.h"
#include "support/temporary_folder.h"
#include "support/trainer_runs.h"

using namespace opsnn;
using namespace opsnn::train;
namespace fs = std::filesystem;

namespace {

const char* kSmallCnnYaml = R"(
run: {name: small_cnn}
model: {arch: small_cnn}
data:
  dataset: synthetic
  batch_size: 64
  eval_batch_size: 500
  synthetic: {train_size: 12800, test_size: 1000, channels: 1, height: 16, width: 16, num_classes: 10, noise: 0.5, seed: 5}
train: {epochs: 0, max_steps: 60, seed: 7, device: cuda}
optimizer: {name: adam, lr: 0.001}
logging: {every_steps: 10, progress: plain}
checkpoint: {enabled: false}
)";

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

using Run = opsnn::testing::MetricsCurve;

Run train_with(const fs::path& out, const std::string& conv_algorithms) {
  ops::clear_conv_algorithm_cache();
  Trainer trainer(load_config_text(kSmallCnnYaml, "small_cnn.yaml", {"train.conv_algorithms=" + conv_algorithms}),
                  opsnn::testing::quiet_options(out));
  REQUIRE(trainer.fit().steps == 60);
  return opsnn::testing::read_metrics_curve(out);
}

}  // namespace

TEST_CASE("cuda: a run given another run's conv_algorithms.json repeats it bit for bit", "[cuda][trainer]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: reusing convolution choices is not tested");
    return;
  }
  opsnn::testing::TemporaryFolder folder("opsnn-conv-algorithms-test");
  const Run first = train_with(folder.path / "first", "search");
  const fs::path file = folder.path / "first" / "conv_algorithms.json";
  REQUIRE(fs::exists(file));
  const nlohmann::json saved = nlohmann::json::parse(read_text(file));
  const size_t entries = saved.at("entries").size();
  REQUIRE(entries >= 6);  // the small CNN's convolutions, three directions each, and evaluation's forwards
  REQUIRE(first.losses.size() >= 6);

  const Run second = train_with(folder.path / "second", file.string());
  CHECK(second.losses == first.losses);
  CHECK(second.test_loss == first.test_loss);
  CHECK_THAT(read_text(folder.path / "second" / "train.log"),
             Catch::Contains("convolution algorithms from " + file.string() + ": " + std::to_string(entries) +
                             " used, 0 skipped"));
  CHECK(nlohmann::json::parse(read_text(folder.path / "second" / "conv_algorithms.json")) == saved);

  // auto: a rerun into the first run's folder takes that folder's file.
  const Run rerun = train_with(folder.path / "first", "auto");
  CHECK(rerun.losses == first.losses);
  CHECK_THAT(read_text(folder.path / "first" / "train.log"),
             Catch::Contains(std::to_string(entries) + " used, 0 skipped"));
  ops::clear_conv_algorithm_cache();
}
