// Tests of tools/opsnn_train.cpp through the built program: --help, --version, --print-config, exit code 2
// with key and line for each class of bad input, exit 1 for missing data and truncated checkpoints,
// the run folder and metrics.jsonl contract, SIGINT (save a checkpoint, exit 130) and --eval-only (one eval
// record, the checkpoint untouched; exit 2 without --resume, 1 without a checkpoint).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "opsnn/core/storage.h"
#include "opsnn/train/checkpoint.h"
#include "opsnn/train/config.h"
#include "support/catch.h"
#include "support/image_files.h"
#include "support/run_program.h"
#include "support/temporary_folder.h"

#ifdef OPSNN_TRAIN_EXE  // defined by tests/CMakeLists.txt when opsnn-train is built (OPSNN_BUILD_TOOLS)

using namespace opsnn;
using namespace opsnn::train;
namespace fs = std::filesystem;

namespace {

// One temporary folder per test, named after this file.
struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-cli-test") {}
};

using opsnn::testing::Outcome;

// Runs opsnn-train with `arguments` in `folder`, capturing its output.
Outcome run_train(const std::vector<std::string>& arguments, const fs::path& folder) {
  return opsnn::testing::run_program(OPSNN_TRAIN_EXE, arguments, folder);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
}

// A run that takes a fraction of a second: tiny synthetic images, a narrow small_cnn.
const char* kTinyRunYaml = R"(run:
  name: tiny
model:
  arch: small_cnn
  width: 4
data:
  dataset: synthetic
  batch_size: 16
  eval_batch_size: 64
  synthetic: {train_size: 96, test_size: 64, channels: 1, height: 8, width: 8, num_classes: 4, seed: 3}
train:
  epochs: 2
  seed: 1
  device: cpu
optimizer:
  name: adam
  lr: 0.01
logging:
  every_steps: 2
  progress: plain
)";

}  // namespace

TEST_CASE("cli: --help documents every option, --version prints the version", "[cli]") {
  TemporaryFolder folder;
  Outcome help = run_train({"--help"}, folder.path);
  REQUIRE(help.exit_code == 0);
  for (const char* option :
       {"--config", "--set", "--out", "--resume", "--eval-only", "--print-config", "--help", "--version"})
    CHECK_THAT(help.output, Catch::Contains(option));
  CHECK_THAT(help.output, Catch::Contains("exit codes"));
  Outcome version = run_train({"--version"}, folder.path);
  REQUIRE(version.exit_code == 0);
  CHECK_THAT(version.output, Catch::StartsWith("opsnn-train ") && Catch::Contains("."));
}

TEST_CASE("cli: --print-config prints the resolved config with overrides and exits", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  Outcome printed = run_train({"--config", "tiny.yaml", "--set", "optimizer.lr=0.125", "--print-config"}, folder.path);
  REQUIRE(printed.exit_code == 0);
  TrainConfig expected = load_config((folder.path / "tiny.yaml").string(), {"optimizer.lr=0.125"});
  TrainConfig reloaded = load_config_text(printed.output, "printed.yaml");
  CHECK(reloaded == expected);
  CHECK(reloaded.optimizer.lr == 0.125);
  CHECK_FALSE(fs::exists(folder.path / "runs"));  // nothing trained
  // Without --config: the embedded quickstart.
  Outcome embedded = run_train({"--print-config"}, folder.path);
  REQUIRE(embedded.exit_code == 0);
  CHECK(load_config_text(embedded.output, "embedded.yaml") == load_default_config());
}

TEST_CASE("cli: each class of bad input exits 2 with the key and the line", "[cli]") {
  TemporaryFolder folder;
  struct BadConfig {
    const char* what;
    std::string yaml;
    std::vector<std::string> expected;  // pieces the message must hold
  };
  const std::vector<BadConfig> cases = {
      {"malformed YAML", "optimizer:\n  name: adam\n   lr: 0.1\n", {"bad.yaml:3:", "malformed YAML"}},
      {"unknown key", "optimizer:\n  name: adam\n  lrr: 0.1\n", {"bad.yaml:3:3", "optimizer.lrr", "optimizer.lr"}},
      {"wrong type", "data:\n  batch_size: abc\n", {"bad.yaml:2:15", "data.batch_size", "integer"}},
      {"out of range", "optimizer:\n  lr: -0.5\n", {"bad.yaml:2:", "optimizer.lr", "-0.5"}},
      {"unknown model", "model:\n  arch: resnet7\n", {"bad.yaml:2:", "model.arch", "resnet7"}},
      {"unknown optimizer", "optimizer:\n  name: adamax\n", {"bad.yaml:2:", "optimizer.name", "adamax"}},
      {"unknown dataset", "data:\n  dataset: imagenet\n", {"bad.yaml:2:", "data.dataset", "imagenet"}},
  };
  for (const BadConfig& bad : cases) {
    INFO(bad.what);
    write_text(folder.path / "bad.yaml", bad.yaml);
    Outcome outcome = run_train({"--config", "bad.yaml"}, folder.path);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 2);
    for (const std::string& piece : bad.expected) CHECK_THAT(outcome.output, Catch::Contains(piece));
    CHECK_THAT(outcome.output, !Catch::Contains("terminate called"));
  }

  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  struct BadCall {
    const char* what;
    std::vector<std::string> arguments;
    std::vector<std::string> expected;
  };
  const std::vector<BadCall> calls = {
      {"missing config file", {"--config", "no-such.yaml"}, {"no-such.yaml"}},
      {"--set without '='", {"--config", "tiny.yaml", "--set", "optimizer.lr"}, {"optimizer.lr"}},
      {"--set of an unknown key",
       {"--config", "tiny.yaml", "--set", "optimizer.lrr=0.1"},
       {"optimizer.lrr", "optimizer.lr"}},
      {"--set of a wrong type", {"--config", "tiny.yaml", "--set", "train.epochs=many"}, {"train.epochs", "many"}},
      {"unknown flag", {"--config", "tiny.yaml", "--frobnicate"}, {"--frobnicate", "--help"}},
      {"flag without its value", {"--config"}, {"--config"}},
      // Empty values used to count as not given: the embedded quickstart, a fresh start, the default folder.
      {"empty --config", {"--config", ""}, {"--config needs a value, got an empty one"}},
      {"empty --config=", {"--config="}, {"--config needs a value"}},
      {"empty --resume=", {"--config", "tiny.yaml", "--resume="}, {"--resume needs a value"}},
      {"empty --out=", {"--config", "tiny.yaml", "--out="}, {"--out needs a value"}},
      {"empty --set", {"--config", "tiny.yaml", "--set", ""}, {"--set needs a value, got an empty one"}},
      // A repeated flag used to take the last value silently.
      {"--config twice",
       {"--config", "tiny.yaml", "--config=other.yaml"},
       {"--config given twice ('tiny.yaml' and 'other.yaml')"}},
      {"--out twice", {"--config", "tiny.yaml", "--out", "a", "--out", "b"}, {"--out given twice"}},
      {"--resume twice", {"--config", "tiny.yaml", "--resume", "auto", "--resume", "auto"}, {"--resume given twice"}},
      {"a stray argument", {"tiny.yaml"}, {"tiny.yaml"}},
      {"bf16 on the cpu", {"--config", "tiny.yaml", "--set", "train.precision=bf16"}, {"train.precision", "bf16"}},
      {"a device index beyond int",
       {"--config", "tiny.yaml", "--set", "train.device=cuda:99999999999"},
       {"key 'train.device'", "cuda:99999999999"}},
      {"empty train.conv_algorithms",
       {"--config", "tiny.yaml", "--set", "train.conv_algorithms="},
       {"train.conv_algorithms"}},
      // Sizes that wrapped int64 (a crash) or asked for unbounded memory or time (std::bad_alloc, a hang).
      {"2^62 synthetic channels",
       {"--config", "tiny.yaml", "--set", "data.synthetic.channels=4611686018427387904", "--set",
        "data.synthetic.height=4", "--set", "data.synthetic.width=4"},
       {"data.synthetic.channels", "4611686018427387904", "[1, 65536]"}},
      {"ctr vocabularies summing past int64",
       {"--config", "tiny.yaml", "--set", "model.arch=ctr", "--set", "data.dataset=ctr_synthetic", "--set",
        "data.ctr.vocab_sizes=[9223372036854775807,9223372036854775807,3]"},
       {"data.ctr.vocab_sizes[0]", "[1, 67108864]"}},
      {"a trillion-value vocabulary",
       {"--config", "tiny.yaml", "--set", "model.arch=ctr", "--set", "data.dataset=ctr_synthetic", "--set",
        "data.ctr.vocab_sizes=[1e12]"},
       {"data.ctr.vocab_sizes[0]", "1e12"}},
      {"1e15 training samples",
       {"--config", "tiny.yaml", "--set", "data.synthetic.train_size=1e15"},
       {"data.synthetic.train_size", "[1, 2147483647]"}},
      {"1e11 test samples",
       {"--config", "tiny.yaml", "--set", "data.synthetic.test_size=1e11"},
       {"data.synthetic.test_size", "[1, 2147483647]"}},
      {"an embedding table larger than the host's memory (9e12 bytes)",
       {"--config", "tiny.yaml", "--set", "model.arch=ctr", "--set", "data.dataset=ctr_synthetic", "--set",
        "data.ctr.vocab_sizes=[1000,1285]", "--set", "model.embedding_dim=1000000000"},
       {"key 'model'", "ran out of memory", "9140000000000 bytes", "make the model smaller"}},
      {"1e12 ctr test rows",
       {"--config", "tiny.yaml", "--set", "model.arch=ctr", "--set", "data.dataset=ctr_synthetic", "--set",
        "data.ctr.test_size=1e12"},
       {"data.ctr.test_size", "[1, 2147483647]"}},
  };
  for (const BadCall& call : calls) {
    INFO(call.what);
    Outcome outcome = run_train(call.arguments, folder.path);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 2);
    for (const std::string& piece : call.expected) CHECK_THAT(outcome.output, Catch::Contains(piece));
  }
}

TEST_CASE("cli: an unavailable train.device exits 2 naming the key, auto falls back to the CPU", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  std::vector<std::string> unavailable = {"cuda:99"};
  if (cuda_device_count() == 0) unavailable.push_back("cuda");
  for (const std::string& device : unavailable) {
    INFO(device);
    Outcome outcome =
        run_train({"--config", "tiny.yaml", "--set", "train.device=" + device, "--out", "run"}, folder.path);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 2);
    CHECK_THAT(outcome.output,
               Catch::Contains("train.device") && Catch::Contains(device) && Catch::Contains("not available"));
    CHECK_THAT(outcome.output, !Catch::Contains("terminate called"));
    CHECK(!fs::exists(folder.path / "run"));  // found before anything is written
  }
  if (cuda_device_count() == 0) {
    Outcome outcome = run_train({"--config", "tiny.yaml", "--set", "train.device=auto", "--out", "auto"}, folder.path);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 0);
    CHECK_THAT(opsnn::testing::read_text(folder.path / "auto" / "train.log"), Catch::Contains("cpu"));
  }
}

TEST_CASE("cli: OPSNN_CPU_KERNELS picks the CPU kernels - an unknown value exits non-zero naming it", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  auto run_with = [&](const std::string& value, const std::string& out) {
    return opsnn::testing::run_program(
        "env", {"OPSNN_CPU_KERNELS=" + value, OPSNN_TRAIN_EXE, "--config", "tiny.yaml", "--out", out}, folder.path);
  };
  Outcome bad = run_with("avx1024", "bad");
  INFO(bad.output);
  CHECK(bad.exit_code >= 1);
  CHECK_THAT(bad.output, Catch::Contains("OPSNN_CPU_KERNELS=avx1024") && Catch::Contains("unknown"));
  CHECK_THAT(bad.output, !Catch::Contains("terminate called"));
  Outcome portable = run_with("portable", "portable");
  INFO(portable.output);
  CHECK(portable.exit_code == 0);
  CHECK_THAT(opsnn::testing::read_text(folder.path / "portable" / "train.log"),
             Catch::Contains("CPU kernels: portable"));
}

TEST_CASE("cli: OPSNN_HUGE_PAGES and OPSNN_CPU_ENGINE - a bad value exits 2 naming it", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  auto run_with = [&](const std::string& value, const std::string& out) {
    return opsnn::testing::run_program(
        "env", {"OPSNN_HUGE_PAGES=" + value, OPSNN_TRAIN_EXE, "--config", "tiny.yaml", "--out", out}, folder.path);
  };
  Outcome bad = run_with("yes", "bad");
  INFO(bad.output);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains("OPSNN_HUGE_PAGES=yes") && Catch::Contains("expected 0 or 1"));
  CHECK(!fs::exists(folder.path / "bad"));  // found before anything is written
  Outcome engine = opsnn::testing::run_program(
      "env", {"OPSNN_CPU_ENGINE=mkl", OPSNN_TRAIN_EXE, "--config", "tiny.yaml", "--out", "engine"}, folder.path);
  INFO(engine.output);
  CHECK(engine.exit_code == 2);
  CHECK_THAT(engine.output,
             Catch::Contains("OPSNN_CPU_ENGINE=mkl") && Catch::Contains("expected eigen, onednn or auto"));
  CHECK(!fs::exists(folder.path / "engine"));
  for (const char* value : {"0", "1"}) {
    Outcome outcome = run_with(value, std::string("pages") + value);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 0);
    CHECK_THAT(opsnn::testing::read_text(folder.path / (std::string("pages") + value) / "train.log"),
               Catch::Contains(std::string("huge pages for large CPU buffers ") + (value[0] == '1' ? "on" : "off")));
  }
}

TEST_CASE("cli: a missing data root exits 1 naming the path", "[cli]") {
  TemporaryFolder folder;
  Outcome outcome = run_train({"--set", "data.root=/nonexistent/fashion-data", "--out", "run"}, folder.path);
  INFO(outcome.output);
  CHECK(outcome.exit_code == 1);
  CHECK_THAT(outcome.output, Catch::Contains("/nonexistent/fashion-data"));
}

TEST_CASE("cli: configs/resnet18_cifar10.yaml with data.root at Fashion-MNIST's default exits 1 saying what to set",
          "[cli]") {
  TemporaryFolder folder;
  Outcome outcome = run_train({"--config", std::string(OPSNN_SOURCE_DIR) + "/configs/resnet18_cifar10.yaml", "--set",
                               "data.root=/usr/share/datasets/fashion-mnist", "--set", "train.device=cpu", "--set",
                               "train.precision=fp32", "--out", "run"},
                              folder.path);
  INFO(outcome.output);
  CHECK(outcome.exit_code == 1);
  CHECK_THAT(outcome.output, Catch::Contains("/usr/share/datasets/fashion-mnist") &&
                                 Catch::Contains("data.root is left at Fashion-MNIST's default; set data.root to the "
                                                 "CIFAR-10 folder"));
}

TEST_CASE("cli: configs/resnet50_imagenet.yaml trains on the CPU from a folder of JPEGs with the documented --set",
          "[cli][image]") {
  TemporaryFolder folder;
  for (int i = 0; i < 8; ++i) {
    std::string name = "p";  // p<i>.JPEG appended piece by piece: `"p" + std::string` trips GCC 12's -Wrestrict
    name += std::to_string(i);
    name += ".JPEG";
    opsnn::testing::write_bytes(folder.path / "images" / (i < 6 ? "train" : "val") / (i % 2 ? "cat" : "dog") / name,
                                opsnn::testing::encode_jpeg(opsnn::testing::gradient_pixels(48, 36, i), 48, 36));
  }
  // The recipe as written, on the CPU in fp32 as its header says, shrunk to one small step.
  Outcome outcome = run_train({"--config", std::string(OPSNN_SOURCE_DIR) + "/configs/resnet50_imagenet.yaml",
                               "--set",    "train.device=cpu",
                               "--set",    "train.precision=fp32",
                               "--set",    "data.root=" + (folder.path / "images").string(),
                               "--set",    "train.max_steps=1",
                               "--set",    "train.epochs=0",
                               "--set",    "data.batch_size=2",
                               "--set",    "data.eval_batch_size=2",
                               "--set",    "data.image_size=32",
                               "--set",    "data.num_workers=1",
                               "--set",    "data.prefetch=2",
                               "--set",    "scheduler.warmup_epochs=0",
                               "--set",    "checkpoint.enabled=false",
                               "--out",    "run"},
                              folder.path);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  std::ifstream classes(folder.path / "run" / "classes.txt");
  CHECK(std::string(std::istreambuf_iterator<char>(classes), std::istreambuf_iterator<char>()) == "cat\ndog\n");
}

TEST_CASE("cli: a missing or corrupt train.conv_algorithms file exits 1 naming it, auto without one trains", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  write_text(folder.path / "corrupt.json", "{\"format\": \"opsnn-conv-algorithms\", \"format_version\": 1, \"entr");
  fs::create_directories(folder.path / "cfg-dir");
  write_text(folder.path / "foreign.json",
             "{\"format\": \"opsnn-checkpoint\", \"format_version\": 1, \"entries\": []}");
  struct BadFile {
    const char* what;
    std::string value;
    std::vector<std::string> expected;
  };
  const std::vector<BadFile> files = {
      {"missing", "no-such-algorithms.json", {"train.conv_algorithms", "no-such-algorithms.json", "does not exist"}},
      {"truncated", "corrupt.json", {"corrupt.json", "not valid JSON"}},
      {"another format", "foreign.json", {"foreign.json", "field \"format\"", "opsnn-conv-algorithms"}},
      {"a directory", "cfg-dir", {"cfg-dir", "is not a regular file"}},
  };
  for (const BadFile& bad : files) {
    INFO(bad.what);
    Outcome outcome = run_train(
        {"--config", "tiny.yaml", "--set", "train.conv_algorithms=" + bad.value, "--out", "run"}, folder.path);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 1);
    for (const std::string& piece : bad.expected) CHECK_THAT(outcome.output, Catch::Contains(piece));
    CHECK_THAT(outcome.output, !Catch::Contains("terminate called"));
  }
  // auto with no file in the run folder and search both train; a CPU run writes no choices.
  for (const char* setting : {"auto", "search"}) {
    INFO(setting);
    const std::string out = std::string("run-") + setting;
    Outcome outcome = run_train(
        {"--config", "tiny.yaml", "--set", std::string("train.conv_algorithms=") + setting, "--out", out}, folder.path);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 0);
    CHECK_FALSE(fs::exists(folder.path / out / "conv_algorithms.json"));
  }
  // A well-formed file is read on the CPU too (its GPU entries are skipped there).
  write_text(folder.path / "empty.json",
             "{\"format\": \"opsnn-conv-algorithms\", \"format_version\": 1, \"entries\": []}");
  Outcome outcome = run_train(
      {"--config", "tiny.yaml", "--set", "train.conv_algorithms=empty.json", "--out", "run-file"}, folder.path);
  INFO(outcome.output);
  CHECK(outcome.exit_code == 0);
  CHECK_THAT(outcome.output, Catch::Contains("convolution algorithms from empty.json: 0 used, 0 skipped"));
}

TEST_CASE("cli: a run writes config.yaml, train.log, metrics.jsonl and checkpoints, bad checkpoints exit 1", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  Outcome outcome = run_train({"--config", "tiny.yaml", "--out", "run"}, folder.path);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  const fs::path run = folder.path / "run";
  CHECK(load_config((run / "config.yaml").string()) == load_config((folder.path / "tiny.yaml").string()));
  CHECK(fs::file_size(run / "train.log") > 0);

  std::ifstream metrics(run / "metrics.jsonl");
  int train_lines = 0, eval_lines = 0, lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    INFO(line);
    nlohmann::json record = nlohmann::json::parse(line);  // throws (fails the test) on a malformed line
    REQUIRE(record.is_object());
    REQUIRE(record["event"].is_string());
    REQUIRE(record["step"].is_number_integer());
    REQUIRE(record["epoch"].is_number_integer());
    if (record["event"] == "train") {
      ++train_lines;
      for (const char* field : {"loss", "lr", "grad_norm", "loss_scale", "samples_per_s", "step_ms", "data_wait_ms"})
        CHECK(record[field].is_number());
      // The wait for batches is part of the step's time.
      CHECK(record["data_wait_ms"].get<double>() >= 0.0);
      CHECK(record["data_wait_ms"].get<double>() <= record["step_ms"].get<double>());
      CHECK(record["loss_scale"].get<double>() == 1.0);
      CHECK(record["lr"].get<double>() == Approx(0.01));
    } else if (record["event"] == "eval") {
      ++eval_lines;
      CHECK(record["test_loss"].is_number());
      CHECK(record["test_acc"].get<double>() >= 0.0);
      CHECK(record["test_acc"].get<double>() <= 1.0);
    }
  }
  CHECK(train_lines == 7);  // step 1, then every 2 steps of 12
  CHECK(eval_lines == 2);   // one per epoch
  std::vector<CheckpointEntry> checkpoints = list_checkpoints(run);
  REQUIRE(checkpoints.size() == 2);
  CHECK(checkpoints.back().step == 12);

  // Resuming the finished run trains nothing more and succeeds.
  Outcome resumed = run_train({"--config", "tiny.yaml", "--out", "run", "--resume", "auto"}, folder.path);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from"));

  // A checkpoint truncated anywhere is refused with the file's name and exit code 1, never a crash.
  // (Only state.json's final newline may go: the content is unchanged, checkpoint.cpp accepts that.)
  const fs::path original = checkpoints.back().path;
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "state.json"}) {
    uintmax_t size = fs::file_size(original / file);
    uintmax_t last_content_byte = std::string(file) == "state.json" ? size - 2 : size - 1;
    for (uintmax_t cut : {uintmax_t{0}, uintmax_t{7}, uintmax_t{8}, size / 3, size / 2, last_content_byte}) {
      INFO(file << " cut at byte " << cut << " of " << size);
      const fs::path broken = folder.path / "broken";
      fs::remove_all(broken);
      fs::copy(original, broken);
      fs::resize_file(broken / file, cut);
      Outcome refused = run_train({"--config", "tiny.yaml", "--out", "run2", "--resume", broken.string()}, folder.path);
      INFO(refused.output);
      CHECK(refused.exit_code == 1);
      CHECK_THAT(refused.output, Catch::Contains("cannot resume from") && Catch::Contains(file));
    }
  }
}

TEST_CASE("cli: a checkpoint whose content is valid but wrong for the run exits 1 naming the file and field", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  // Checkpoints every 3 steps: step_00000003 stands at batch 3 of epoch 0 (6 batches of 16 per epoch).
  Outcome trained = run_train({"--config", "tiny.yaml", "--out", "run", "--set", "checkpoint.every_steps=3", "--set",
                               "checkpoint.keep_last=0", "--set", "train.epochs=1"},
                              folder.path);
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  const fs::path original = folder.path / "run" / "checkpoints" / "step_00000003";
  REQUIRE(fs::is_directory(original));
  const fs::path edited = folder.path / "edited";

  // A copy of the checkpoint with `change` applied to state.json and its CRCs made to match, as
  // a writer of that content would have; then a resume from it.
  auto resume_edited = [&](const std::function<void(nlohmann::json&)>& change,
                           const std::function<void(std::string & model_bytes)>& change_model = {},
                           std::vector<std::string> extra_arguments = {}) {
    fs::remove_all(edited);
    fs::copy(original, edited);
    if (change_model) {
      std::string bytes = read_file_bytes(edited / "model.safetensors");
      change_model(bytes);
      write_text(edited / "model.safetensors", bytes);
    }
    nlohmann::json state = nlohmann::json::parse(read_file_bytes(edited / "state.json"));
    state.erase("state_crc32");
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      std::string bytes = read_file_bytes(edited / file);
      state["files"][file] = {{"size_bytes", bytes.size()}, {"crc32", crc32_of(bytes)}};
    }
    change(state);
    state["state_crc32"] = crc32_of(state.dump());
    write_text(edited / "state.json", state.dump(2));
    std::vector<std::string> arguments = {"--config", "tiny.yaml", "--out", "run2", "--resume", edited.string()};
    arguments.insert(arguments.end(), extra_arguments.begin(), extra_arguments.end());
    return run_train(arguments, folder.path);
  };
  const std::string state_json = (edited / "state.json").string();
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> change;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"a negative epoch", [](nlohmann::json& s) { s["epoch"] = -1; }, {"field \"epoch\": negative epoch -1"}},
      {"a far-off loader epoch",
       [](nlohmann::json& s) { s["data_loader"]["epoch"] = int64_t{1000000000000000}; },
       {"field \"data_loader.epoch\": epoch 1000000000000000 is neither the completed epochs"}},
      {"far-off epochs",
       [](nlohmann::json& s) { s["epoch"] = s["data_loader"]["epoch"] = int64_t{1000000000000000}; },
       {"field \"data_loader.epoch\": epoch 1000000000000000 cannot be reached in 3 steps"}},
      {"a negative batch",
       [](nlohmann::json& s) { s["data_loader"]["batch_in_epoch"] = -1; },
       {"field \"data_loader.batch_in_epoch\": negative value -1"}},
      {"a far-off batch",
       [](nlohmann::json& s) { s["data_loader"]["batch_in_epoch"] = int64_t{1000000000000000}; },
       {"field \"data_loader.batch_in_epoch\": batch 1000000000000000 is beyond the 6 batches per epoch"}},
      {"an accuracy above 1",
       [](nlohmann::json& s) { s["extra"]["best_test_accuracy"] = 7.5; },
       {"field \"extra.best_test_accuracy\": expected an accuracy in [0, 1], found 7.5"}},
      {"an accuracy that is text",
       [](nlohmann::json& s) { s["extra"]["best_test_accuracy"] = "high"; },
       {"field \"extra.best_test_accuracy\": expected a number"}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Outcome refused = resume_edited(c.change);
    INFO(refused.output);
    CHECK(refused.exit_code == 1);
    CHECK_THAT(refused.output, Catch::Contains("cannot resume from " + edited.string() + ": " + state_json + ": "));
    for (const std::string& piece : c.expected) CHECK_THAT(refused.output, Catch::Contains(piece));
    CHECK_THAT(refused.output, !Catch::Contains("type_error"));
  }
  // The unedited copy resumes, so the refusals above are about the edits.
  Outcome resumed = resume_edited([](nlohmann::json&) {});
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);

  // A config whose epoch has fewer batches than the saved position: say which checkpoint and why.
  Outcome smaller = resume_edited([](nlohmann::json&) {}, {}, {"--set", "data.batch_size=60000"});
  INFO(smaller.output);
  CHECK(smaller.exit_code == 1);
  CHECK_THAT(smaller.output, Catch::Contains("cannot resume from " + edited.string()) &&
                                 Catch::Contains("batch 3 is beyond the 1 batches per epoch of this config "
                                                 "(data.batch_size or the dataset changed?)"));

  // A model tensor whose header says I32 (same size as F32): its bits would load as huge floats.
  Outcome retyped = resume_edited([](nlohmann::json&) {},
                                  [](std::string& bytes) {
                                    size_t at = bytes.find("\"dtype\":\"F32\"");
                                    REQUIRE(at != std::string::npos);
                                    bytes.replace(at, 13, "\"dtype\":\"I32\"");
                                  });
  INFO(retyped.output);
  CHECK(retyped.exit_code == 1);
  CHECK_THAT(retyped.output, Catch::Contains((edited / "model.safetensors").string() + ": load_state_dict") &&
                                 Catch::Contains("dtype mismatch") &&
                                 Catch::Contains("state dict has i32, module has f32"));

  // Another file of the folder given to --resume: what was expected, and no binary bytes echoed.
  Outcome wrong_file = run_train(
      {"--config", "tiny.yaml", "--out", "run2", "--resume", (original / "model.safetensors").string()}, folder.path);
  INFO(wrong_file.output);
  CHECK(wrong_file.exit_code == 1);
  CHECK_THAT(wrong_file.output, Catch::Contains("expected a checkpoint folder or its state.json"));
  CHECK(std::all_of(wrong_file.output.begin(), wrong_file.output.end(),
                    [](char c) { return c == '\n' || (c >= 0x20 && c < 0x7f) || c == '\x1b'; }));

  // State nested 100000 deep (its CRC's dump() recursed once per level and crashed).
  fs::remove_all(edited);
  fs::copy(original, edited);
  write_text(edited / "state.json",
             "{\"state_crc32\":1,\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  Outcome deep = run_train({"--config", "tiny.yaml", "--out", "run2", "--resume", edited.string()}, folder.path);
  INFO(deep.output);
  CHECK(deep.exit_code == 1);
  CHECK_THAT(deep.output, Catch::Contains(state_json + ": nested deeper than 64 levels"));
}

TEST_CASE("cli: SIGINT saves a checkpoint and exits 130, --resume auto continues", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  const fs::path run = folder.path / "run";
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::chdir(folder.path.c_str()) != 0) ::_exit(99);
    FILE* sink = std::freopen("/dev/null", "w", stderr);
    (void)sink;
    ::execl(OPSNN_TRAIN_EXE, OPSNN_TRAIN_EXE, "--config", "tiny.yaml", "--out", "run", "--set", "train.epochs=0",
            "--set", "train.max_steps=100000000", "--set", "checkpoint.every_epochs=0", static_cast<char*>(nullptr));
    ::_exit(98);
  }
  // Wait until training is under way (a train record in metrics.jsonl), then interrupt.
  bool started = false;
  for (int i = 0; i < 600 && !started; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream metrics(run / "metrics.jsonl");
    std::string line;
    started = std::getline(metrics, line) && line.find("\"train\"") != std::string::npos;
  }
  ::kill(child, SIGINT);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(started);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  std::optional<fs::path> latest = find_latest_checkpoint(run);
  REQUIRE(latest.has_value());
  CheckpointData saved = load_checkpoint(*latest);
  CHECK(saved.step > 0);

  Outcome resumed =
      run_train({"--config", "tiny.yaml", "--out", "run", "--resume", "auto", "--set", "train.epochs=0", "--set",
                 "train.max_steps=" + std::to_string(saved.step + 2), "--set", "checkpoint.every_epochs=0"},
                folder.path);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(load_checkpoint(*find_latest_checkpoint(run)).step == saved.step + 2);
}

TEST_CASE("cli: --eval-only evaluates a checkpoint once and changes nothing, no checkpoint exits 2 or 1", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyRunYaml);
  const fs::path run = folder.path / "run";
  Outcome trained = run_train({"--config", "tiny.yaml", "--out", "run", "--set", "train.epochs=1"}, folder.path);
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  std::vector<CheckpointEntry> checkpoints = list_checkpoints(run);
  REQUIRE(checkpoints.size() == 1);
  auto read_all = [&]() {
    std::map<std::string, std::string> files;
    for (const char* file : {"model.safetensors", "optimizer.safetensors", "state.json"})
      files[file] = read_file_bytes(checkpoints.back().path / file);
    files["config.yaml"] = read_file_bytes(run / "config.yaml");
    return files;
  };
  auto eval_records = [&]() {
    std::vector<nlohmann::json> records;
    std::ifstream metrics(run / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      nlohmann::json record = nlohmann::json::parse(line);
      if (record["event"] == "eval") records.push_back(record);
    }
    return records;
  };
  const auto before = read_all();
  const nlohmann::json trained_eval = eval_records().back();

  for (const std::string& resume : {std::string("auto"), checkpoints.back().path.string()}) {
    INFO("--resume " << resume);
    // The checkpoint as found: in the run folder given (auto), or as named.
    const std::string found = resume == "auto" ? (fs::path("run") / "checkpoints" / "step_00000006").string() : resume;
    Outcome evaluated = run_train(
        {"--config", "tiny.yaml", "--out", "run", "--resume", resume, "--eval-only", "--set", "optimizer.name=sgd"},
        folder.path);
    INFO(evaluated.output);
    CHECK(evaluated.exit_code == 0);
    CHECK_THAT(evaluated.output, Catch::Contains("evaluating the model of " + found));
    CHECK_THAT(evaluated.output, Catch::Contains("eval at step 6 (epoch 1): test_loss") && Catch::Contains("test_acc"));
    CHECK_THAT(evaluated.output, !Catch::Contains("test_acc_top5"));  // 4 classes
    const nlohmann::json record = eval_records().back();
    CHECK(record["eval_only"] == true);
    CHECK(record["checkpoint"] == found);
    CHECK(record["step"] == 6);
    CHECK(record["epoch"] == trained_eval["epoch"]);
    CHECK(record["test_loss"] == trained_eval["test_loss"]);
    CHECK(record["test_acc"] == trained_eval["test_acc"]);
    CHECK(record["samples"] == 64);
    CHECK(read_all() == before);  // the checkpoint and the run's config.yaml
    CHECK(list_checkpoints(run).size() == 1);
  }
  CHECK(eval_records().size() == 3);

  // Top-5 where the model has 5 classes or more: on the console and in the record.
  Outcome five = run_train({"--config", "tiny.yaml", "--out", "five", "--set", "train.max_steps=2", "--set",
                            "train.epochs=0", "--set", "data.synthetic.num_classes=6"},
                           folder.path);
  REQUIRE(five.exit_code == 0);
  Outcome five_eval =
      run_train({"--config", "tiny.yaml", "--out", "five", "--set", "train.max_steps=2", "--set", "train.epochs=0",
                 "--set", "data.synthetic.num_classes=6", "--resume", "auto", "--eval-only"},
                folder.path);
  INFO(five_eval.output);
  CHECK(five_eval.exit_code == 0);
  CHECK_THAT(five_eval.output, Catch::Contains("test_acc_top5"));

  // No checkpoint: none named is a usage error (2); auto with none there, a missing or truncated one: 1.
  Outcome unnamed = run_train({"--config", "tiny.yaml", "--out", "run", "--eval-only"}, folder.path);
  INFO(unnamed.output);
  CHECK(unnamed.exit_code == 2);
  CHECK_THAT(unnamed.output, Catch::Contains("--eval-only needs --resume PATH|auto"));
  Outcome none = run_train({"--config", "tiny.yaml", "--out", "empty", "--resume", "auto", "--eval-only"}, folder.path);
  INFO(none.output);
  CHECK(none.exit_code == 1);
  CHECK_THAT(none.output, Catch::Contains("nothing to evaluate: no checkpoint in"));
  Outcome missing =
      run_train({"--config", "tiny.yaml", "--out", "run", "--resume", "no-such", "--eval-only"}, folder.path);
  INFO(missing.output);
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.output, Catch::Contains("cannot evaluate no-such"));
  const fs::path broken = folder.path / "broken";
  fs::copy(checkpoints.back().path, broken);
  fs::resize_file(broken / "model.safetensors", fs::file_size(broken / "model.safetensors") / 2);
  Outcome truncated =
      run_train({"--config", "tiny.yaml", "--out", "run", "--resume", broken.string(), "--eval-only"}, folder.path);
  INFO(truncated.output);
  CHECK(truncated.exit_code == 1);
  CHECK_THAT(truncated.output,
             Catch::Contains("cannot evaluate " + broken.string()) && Catch::Contains("model.safetensors"));
  CHECK(read_all() == before);
}

#endif  // OPSNN_TRAIN_EXE
