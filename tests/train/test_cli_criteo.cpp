// opsnn-train on Criteo-format data (tests/support/criteo_files.h, written at test time): the shipped
// configs/dlrm_criteo.yaml, with a smaller table and a few hundred steps, trains DLRM on a planted signal
// to a test log-loss well below the constant predictor's (bad lines reported as FILE:LINE in train.log
// and counted); and the exit codes of a missing data folder and of dlrm or criteo paired with the wrong
// partner.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/catch.h"
#include "support/criteo_files.h"
#include "support/run_program.h"
#include "support/temporary_folder.h"
#include "support/trainer_runs.h"

#ifdef OPSNN_TRAIN_EXE  // defined by tests/CMakeLists.txt when opsnn-train is built (OPSNN_BUILD_TOOLS)

namespace fs = std::filesystem;
using opsnn::testing::Outcome;

namespace {

struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-cli-criteo-test") {}
};

Outcome run_train(const std::vector<std::string>& arguments, const fs::path& folder) {
  return opsnn::testing::run_program(OPSNN_TRAIN_EXE, arguments, folder);
}

using opsnn::testing::read_text;

const std::string kConfig = std::string(OPSNN_SOURCE_DIR) + "/configs/dlrm_criteo.yaml";

}  // namespace

TEST_CASE("cli: configs/dlrm_criteo.yaml trains DLRM on Criteo-format data below the constant predictor",
          "[cli][e2e]") {
  TemporaryFolder folder;
  // 45000 generated lines, two bad ones among the first: the last 10% of the good lines are the test split.
  const int64_t lines = 45000;
  std::string text = opsnn::testing::criteo_text(21, 0, 2);
  text += "1\t2\t3\n";
  text += opsnn::testing::criteo_text(21, 2, 3);
  text += opsnn::testing::criteo_line(21, 5).text.substr(2) + "\n";  // the label dropped: 39 fields
  text += opsnn::testing::criteo_text(21, 5, lines - 5);
  opsnn::testing::write_criteo_file(folder.path / "data" / "criteo" / "train.txt.gz",
                                    opsnn::testing::criteo_gzip(text));
  double clicks = 0.0;
  for (int64_t i = lines - lines / 10; i < lines; ++i) clicks += opsnn::testing::criteo_line(21, i).label;
  const double rate = clicks / static_cast<double>(lines / 10);
  const double constant_loss = opsnn::testing::criteo_log_loss(rate, rate);

  // The config as shipped (data.root data/criteo, one epoch at batch 128 with lazy Adam, DLRM's MLPs) with
  // 2^12 rows per field instead of 2^18: 317 steps over the 40500 training rows.
  Outcome outcome = run_train({"--config", kConfig, "--set", "model.hash_buckets=4096", "--set",
                               "logging.every_steps=50", "--set", "logging.progress=plain", "--out", "run"},
                              folder.path);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  const std::string log = read_text(folder.path / "run" / "train.log");
  // data.root as the config gives it, relative to the current folder.
  CHECK_THAT(log,
             Catch::Contains("data/criteo/train.txt.gz:3: 3 tab-separated fields, expected 40") &&
                 Catch::Contains("data/criteo/train.txt.gz:7: 39 tab-separated fields, expected 40") &&
                 Catch::Contains("data/criteo/train.txt.gz: 45002 lines read, 45000 rows kept, 2 bad lines skipped") &&
                 Catch::Contains("40500 training rows") && Catch::Contains("4500 test rows"));
  CHECK_THAT(outcome.output, Catch::Contains("data/criteo/train.txt.gz:3: 3 tab-separated fields"));
  CHECK_THAT(log, Catch::Contains("row-sparse embedding gradients: lazy adam"));

  const opsnn::testing::MetricsCurve curve = opsnn::testing::read_metrics_curve(folder.path / "run");
  REQUIRE(curve.losses.size() >= 6);
  // The generated data's labels follow sigmoid(-1 + w1[C1] + w2[C2] + 0.8 (log(1 + I1) - 2.3)): knowing
  // I1 alone gets about 0.04 below the constant predictor, the planted probabilities about 0.17. A model
  // that learned nothing from the categorical features (embeddings not trained, wrong rows, a broken
  // interaction) stays near the first; 0.08 below needs C1 and C2's embeddings.
  std::printf("dlrm on generated Criteo data: test log-loss %.4f after one epoch, constant predictor %.4f\n",
              curve.test_loss, constant_loss);
  CHECK(std::isfinite(curve.test_loss));
  CHECK(curve.test_loss < constant_loss - 0.08);
  CHECK(curve.losses.back() < curve.losses.front());
}

TEST_CASE("cli: dlrm_criteo.yaml without its data exits 1 naming the folder and wrong pairings exit 2", "[cli]") {
  TemporaryFolder folder;
  Outcome missing = run_train({"--config", kConfig, "--out", "run"}, folder.path);
  INFO(missing.output);
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.output, Catch::Contains("criteo root 'data/criteo' does not exist"));

  Outcome image_data =
      run_train({"--config", kConfig, "--set", "data.dataset=fashion_mnist", "--out", "run"}, folder.path);
  INFO(image_data.output);
  CHECK(image_data.exit_code == 2);
  CHECK_THAT(image_data.output,
             Catch::Contains("key 'model.arch': model 'dlrm' needs data.dataset criteo (it is fashion_mnist)"));

  Outcome ctr_model = run_train({"--config", kConfig, "--set", "model.arch=ctr", "--out", "run"}, folder.path);
  INFO(ctr_model.output);
  CHECK(ctr_model.exit_code == 2);
  CHECK_THAT(ctr_model.output, Catch::Contains("model 'ctr' needs data.dataset ctr_synthetic (it is criteo); criteo "
                                               "goes with model 'dlrm'"));

  Outcome bottom = run_train({"--config", kConfig, "--set", "model.embedding_dim=32", "--out", "run"}, folder.path);
  INFO(bottom.output);
  CHECK(bottom.exit_code == 2);
  CHECK_THAT(bottom.output,
             Catch::Contains("key 'model.bottom_mlp': ends in 16 but must end in model.embedding_dim (32)"));
}

#endif  // OPSNN_TRAIN_EXE
