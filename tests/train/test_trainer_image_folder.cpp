// The trainer on data.dataset image_folder: a few steps of small_cnn on a tiny photo tree generated here
// (classes.txt in the run folder, a bad image warned about in train.log), bit-identical resume of the
// random crops and flips, and on_bad_image: error stopping the run with the file's name.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/nn/module.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/train/trainer.h"
#include "support/catch.h"
#include "support/image_files.h"
#include "support/temporary_folder.h"
#include "support/trainer_runs.h"

using namespace opsnn;
using namespace opsnn::train;
using opsnn::testing::encode_jpeg;
using opsnn::testing::encode_rgb_png;
using opsnn::testing::gradient_pixels;
using opsnn::testing::MetricsCurve;
using opsnn::testing::quiet_options;
using opsnn::testing::read_metrics_curve;
using opsnn::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-trainer-image-folder-test") {}
};

const char* kImageFolderYaml = R"(
run: {name: tiny_folder}
model: {arch: small_cnn, width: 4}
data:
  dataset: image_folder
  batch_size: 4
  eval_batch_size: 8
  image_size: 16
  augment: {flip: true}
train: {epochs: 0, max_steps: 6, seed: 1, device: cpu}
optimizer: {name: adam, lr: 0.01}
logging: {every_steps: 2, progress: plain}
checkpoint: {every_epochs: 0, keep_last: 0}
)";

// Three classes of tinted photos (JPEG and PNG, landscape and portrait): 6 training and 2 validation
// images each, and one corrupt training file.
fs::path make_photos(const fs::path& root) {
  const std::vector<std::string> classes = {"a_red", "b_green", "c_blue"};
  for (size_t label = 0; label < classes.size(); ++label) {
    for (int i = 0; i < 8; ++i) {
      const int width = i % 2 ? 30 : 40, height = i % 2 ? 40 : 30;
      std::vector<uint8_t> pixels = gradient_pixels(width, height, i);
      for (size_t p = 0; p < pixels.size(); p += 3) pixels[p + label] = 255;
      const std::string split = i < 6 ? "train" : "val";
      const fs::path stem = root / split / classes[label] / ("img" + std::to_string(i));
      if (i % 3 == 0)
        write_bytes(stem.string() + ".png", encode_rgb_png(pixels, width, height));
      else
        write_bytes(stem.string() + ".JPEG", encode_jpeg(pixels, width, height, TJPF_RGB, 95));
    }
  }
  write_bytes(root / "train/b_green/broken.jpg", {0xFF, 0xD8, 0xFF, 0xDB, 0, 4, 9});
  return root / "train/b_green/broken.jpg";
}

TrainConfig config_for(const fs::path& root, std::vector<std::string> overrides = {}) {
  overrides.push_back("data.root=" + root.string());
  return load_config_text(kImageFolderYaml, "image_folder.yaml", overrides);
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::map<std::string, std::vector<float>> snapshot(Trainer& trainer) {
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, tensor] : trainer.model().state_dict()) values["model." + name] = tensor.to_vector<float>();
  for (const auto& [name, tensor] : trainer.optimizer().state_dict())
    values["optimizer." + name] = tensor.to_vector<float>();
  return values;
}

}  // namespace

TEST_CASE("trainer: small_cnn trains on a generated image folder and writes classes.txt", "[train][image]") {
  TemporaryFolder folder;
  const fs::path broken = make_photos(folder.path / "photos");
  const fs::path run = folder.path / "run";
  Trainer trainer(config_for(folder.path / "photos"), quiet_options(run));
  const TrainSummary summary = trainer.fit();
  CHECK(summary.steps == 6);
  REQUIRE(summary.final_eval.has_value());
  CHECK(summary.final_eval->samples == 6);
  CHECK(read_text(run / "classes.txt") == "a_red\nb_green\nc_blue\n");
  const MetricsCurve curve = read_metrics_curve(run);
  CHECK(curve.losses.size() >= 3);
  const std::string log = read_text(run / "train.log");
  CHECK_THAT(log, Catch::Contains("3 classes, 19 images"));
  CHECK_THAT(log, Catch::Contains("[warning]") && Catch::Contains(broken.string()) &&
                      Catch::Contains("data.on_bad_image: skip"));
  // Datasets without class names write none.
  TemporaryFolder other;
  TrainConfig synthetic = config_for(folder.path / "photos", {"data.dataset=synthetic", "train.max_steps=1"});
  Trainer plain(synthetic, quiet_options(other.path));
  CHECK_FALSE(fs::exists(other.path / "classes.txt"));
}

TEST_CASE("trainer: image_folder crops and flips resume bit for bit", "[train][image]") {
  TemporaryFolder folder;
  make_photos(folder.path / "photos");
  const int64_t half = 3;
  std::vector<double> straight_losses;
  std::map<std::string, std::vector<float>> straight_state;
  {
    Trainer straight(config_for(folder.path / "photos", {"data.num_workers=2"}), quiet_options(folder.path / "a"));
    straight.train_steps(2 * half);
    straight_losses = straight.step_losses();
    straight_state = snapshot(straight);
  }
  fs::path checkpoint;
  {
    Trainer first(config_for(folder.path / "photos", {"data.num_workers=0"}), quiet_options(folder.path / "b"));
    first.train_steps(half);
    checkpoint = first.save_checkpoint();
  }
  Trainer second(config_for(folder.path / "photos", {"data.num_workers=1"}),
                 quiet_options(folder.path / "b", checkpoint.string()));
  second.train_steps(half);
  REQUIRE(second.step() == 2 * half);
  for (int64_t i = 0; i < half; ++i) {
    INFO("step " << half + i + 1);
    REQUIRE(second.step_losses()[static_cast<size_t>(i)] == straight_losses[static_cast<size_t>(half + i)]);
  }
  REQUIRE(snapshot(second) == straight_state);  // bit-identical floats
}

TEST_CASE("trainer: data.on_bad_image error stops the run naming the file", "[train][image]") {
  TemporaryFolder folder;
  const fs::path broken = make_photos(folder.path / "photos");
  // One epoch of every training sample reaches the broken file whatever the order.
  Trainer trainer(
      config_for(folder.path / "photos", {"data.on_bad_image=error", "train.max_steps=0", "train.epochs=1"}),
      quiet_options(folder.path / "run"));
  REQUIRE_THROWS_AS(trainer.fit(), DataError);
  Trainer again(config_for(folder.path / "photos", {"data.on_bad_image=error", "train.max_steps=0", "train.epochs=1"}),
                quiet_options(folder.path / "run2"));
  REQUIRE_THROWS_WITH(again.fit(), Catch::StartsWith(broken.string()) && Catch::Contains("corrupt JPEG"));
}

TEST_CASE("config: the image_folder keys are checked on load", "[config][image]") {
  auto error_of = [](const std::vector<std::string>& overrides) {
    try {
      load_config_text(kImageFolderYaml, "image_folder.yaml", overrides);
    } catch (const ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  using Catch::Contains;
  CHECK_THAT(error_of({"data.random_resized_crop.scale=[0.5, 0.2]"}),
             Contains("key 'data.random_resized_crop.scale': the lower bound must not exceed the upper"));
  CHECK_THAT(error_of({"data.random_resized_crop.scale=[0, 1]"}),
             Contains("key 'data.random_resized_crop.scale[0]': expected a number in (0, 1]"));
  CHECK_THAT(error_of({"data.random_resized_crop.ratio=[2, 1]"}), Contains("key 'data.random_resized_crop.ratio'"));
  CHECK_THAT(error_of({"data.image_size=0"}), Contains("key 'data.image_size': expected an integer in [1, 8192]"));
  CHECK_THAT(error_of({"data.on_bad_image=ignore"}), Contains("expected one of: skip, error"));
  const TrainConfig config = load_config_text(kImageFolderYaml, "image_folder.yaml",
                                              {"data.on_bad_image=error", "data.jpeg_dct_scaling=false"});
  CHECK(config.data.image_size == 16);
  CHECK(config.data.on_bad_image == "error");
  CHECK_FALSE(config.data.jpeg_dct_scaling);
  // The resolved config round-trips the new keys.
  CHECK(load_config_text(emit_config(config), "again.yaml") == config);
}
