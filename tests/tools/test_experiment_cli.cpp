// Tests of tools/opsnn_experiment.cpp through the built program: a sweep end to end at a few steps
// (results.csv / results.md, grid-point names, seeds), a second invocation skipping finished runs, an
// interrupted run resumed from its checkpoint, a run folder of another config refused, --jobs in child
// processes, --collect and --dry-run, and exit code 2 with FILE:LINE:COL for every class of bad sweep file.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.h"
#include "support/run_program.h"
#include "support/temporary_folder.h"

#ifdef OPSNN_EXPERIMENT_EXE  // defined by tests/CMakeLists.txt when opsnn-experiment is built

namespace fs = std::filesystem;
using opsnn::testing::Outcome;

namespace {

struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-experiment-test") {}
};

Outcome run_experiment(const std::vector<std::string>& arguments, const fs::path& folder) {
  return opsnn::testing::run_program(OPSNN_EXPERIMENT_EXE, arguments, folder);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// A base config whose runs take a fraction of a second: tiny synthetic images, a narrow small_cnn.
const char* kTinyYaml = R"(model: {arch: small_cnn, width: 4}
data:
  dataset: synthetic
  batch_size: 16
  eval_batch_size: 64
  synthetic: {train_size: 96, test_size: 64, channels: 1, height: 8, width: 8, num_classes: 4, seed: 3}
train: {epochs: 1, device: cpu}
optimizer: {name: adam, lr: 0.01}
logging: {every_steps: 1, progress: plain}
checkpoint: {every_steps: 2, every_epochs: 0}
)";

// Two variants crossed with a two-point grid, two seeds: eight runs.
const char* kSweepYaml = R"(base: tiny.yaml
set: {train.max_steps: 100}
variants:
  adam: {optimizer.name: adam}
  sgd: {optimizer.name: sgd, optimizer.momentum: 0.9}
grid: {optimizer.lr: [1.0e-2, 3.0e-3]}
seeds: [0, 1]
name: tiny_sweep
)";

const std::vector<std::string> kVariants = {"adam_lr=0.01", "adam_lr=0.003", "sgd_lr=0.01", "sgd_lr=0.003"};

std::vector<nlohmann::json> records(const fs::path& run, const std::string& event) {
  std::vector<nlohmann::json> found;
  std::ifstream file(run / "metrics.jsonl");
  for (std::string line; std::getline(file, line);) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, false);  // a line cut short is skipped
    if (record.is_object() && record["event"] == event) found.push_back(record);
  }
  return found;
}

}  // namespace

TEST_CASE("experiment: --help documents every option, --version, usage errors exit 2", "[cli]") {
  TemporaryFolder folder;
  Outcome help = run_experiment({"--help"}, folder.path);
  REQUIRE(help.exit_code == 0);
  for (const char* option :
       {"--config", "--set", "--out", "--jobs", "--dry-run", "--collect", "--no-plot", "--version"})
    CHECK_THAT(help.output, Catch::Contains(option));
  CHECK_THAT(help.output, Catch::Contains("exit codes"));
  Outcome version = run_experiment({"--version"}, folder.path);
  REQUIRE(version.exit_code == 0);
  CHECK_THAT(version.output, Catch::StartsWith("opsnn-experiment "));

  write_text(folder.path / "tiny.yaml", kTinyYaml);
  write_text(folder.path / "sweep.yaml", kSweepYaml);
  struct BadCall {
    std::vector<std::string> arguments;
    std::string expected;
  };
  const std::vector<BadCall> calls = {
      {{}, "give --config SWEEP.yaml"},
      {{"--config", "sweep.yaml", "--collect", "runs"}, "exclude each other"},
      {{"--config", "sweep.yaml", "--config", "other.yaml"}, "--config given twice"},
      {{"--config", ""}, "--config needs a value"},
      {{"--config", "sweep.yaml", "--jobs", "0"}, "--jobs must be in [1, 1024]"},
      {{"--config", "sweep.yaml", "--jobs", "two"}, "--jobs"},
      {{"--config", "sweep.yaml", "--set", ""}, "--set needs a value"},
      {{"--config", "sweep.yaml", "--bogus"}, "--bogus"},
      {{"--collect", "runs", "--set", "optimizer.lr=0.1"}, "--collect takes only --no-plot"},
      {{"--config", "sweep.yaml", "--set", "train.seed=4"}, "'train.seed' cannot be overridden here"},
      {{"--config", "sweep.yaml", "--set", "optimizer.lrr=0.1"},
       "--set optimizer.lrr=0.1: unknown key 'optimizer.lrr'"},
      {{"--config", "sweep.yaml", "--set", "optimizer.lr=-1"}, "--set optimizer.lr=-1: key 'optimizer.lr'"},
      {{"--config", "missing.yaml"}, "missing.yaml: cannot read sweep file"},
  };
  for (const BadCall& call : calls) {
    Outcome outcome = run_experiment(call.arguments, folder.path);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 2);
    CHECK_THAT(outcome.output, Catch::Contains(call.expected));
  }
  CHECK_FALSE(fs::exists(folder.path / "runs"));  // nothing trained
}

TEST_CASE("experiment: a sweep runs every variant, grid point and seed, then writes results.csv and results.md",
          "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyYaml);
  write_text(folder.path / "sweep.yaml", kSweepYaml);
  const std::vector<std::string> arguments = {"--config", "sweep.yaml",        "--out",    "exp",
                                              "--set",    "train.max_steps=4", "--no-plot"};

  Outcome dry = run_experiment({"--config", "sweep.yaml", "--out", "exp", "--dry-run"}, folder.path);
  INFO(dry.output);
  REQUIRE(dry.exit_code == 0);
  CHECK_THAT(dry.output, Catch::Contains("1/8 adam_lr=0.01/seed0 -> exp/adam_lr=0.01/seed0: new"));
  CHECK_THAT(dry.output, Catch::Contains("8/8 sgd_lr=0.003/seed1"));
  CHECK_THAT(dry.output, Catch::Contains("8 runs (4 variants x 2 seeds), 0 finished, 8 to run"));
  CHECK_FALSE(fs::exists(folder.path / "exp"));

  Outcome first = run_experiment(arguments, folder.path);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.output, Catch::Contains("[1/8] adam_lr=0.01/seed0: new"));
  CHECK_THAT(first.output, Catch::Contains("[8/8] sgd_lr=0.003/seed1"));
  for (const std::string& variant : kVariants) {
    for (int seed : {0, 1}) {
      const fs::path run = folder.path / "exp" / variant / ("seed" + std::to_string(seed));
      const std::vector<nlohmann::json> summaries = records(run, "summary");
      REQUIRE(summaries.size() == 1);
      CHECK(summaries[0]["step"] == 4);  // the command line's --set beats the sweep's set:
      CHECK(summaries[0]["seed"] == seed);
      CHECK(summaries[0]["optimizer"] == (variant.rfind("adam", 0) == 0 ? "adam" : "sgd"));
    }
  }
  const std::string config = read_text(folder.path / "exp/sgd_lr=0.003/seed1/config.yaml");
  CHECK_THAT(config, Catch::Contains("lr: 0.003"));
  CHECK_THAT(config, Catch::Contains("momentum: 0.9"));
  CHECK_THAT(config, Catch::Contains("seed: 1"));

  const std::vector<std::string> csv = lines_of(read_text(folder.path / "exp/results.csv"));
  REQUIRE(csv.size() == 5);
  CHECK_THAT(csv[0], Catch::StartsWith("variant,n,optimizer,precision,topk_density,steps,final_test_acc_mean"));
  CHECK_THAT(csv[0], Catch::EndsWith("git_revision,machine,date,command"));
  for (size_t i = 0; i < kVariants.size(); ++i) CHECK_THAT(csv[i + 1], Catch::StartsWith(kVariants[i] + ",2,"));
  CHECK_THAT(csv[3], Catch::StartsWith("sgd_lr=0.01,2,sgd,fp32,null,4,"));
  const std::string md = read_text(folder.path / "exp/results.md");
  CHECK_THAT(md, Catch::Contains("# Experiment tiny_sweep"));
  CHECK_THAT(md, Catch::Contains("Machine: "));
  CHECK_THAT(md, Catch::Contains("cores); date: "));
  CHECK_THAT(md, Catch::Contains("command: `"));
  CHECK_THAT(md, Catch::Contains("--set train.max_steps=4"));
  CHECK_THAT(md, Catch::Contains("| adam_lr=0.01 | 2 | "));
  CHECK_THAT(md, Catch::Contains(" ± "));
  CHECK_THAT(md, Catch::Contains("| sgd_lr=0.003 | seed1 | sgd | fp32 | - | 4 | "));
  CHECK_THAT(md, Catch::Contains("fnv1a64:"));
  // Each run's peak RSS, noted by the runner, in MiB (a tiny run needs more than 1 MiB, less than 64 GiB).
  const std::string note = read_text(folder.path / "exp/adam_lr=0.01/seed0/experiment.json");
  REQUIRE_THAT(note, Catch::StartsWith("{\"peak_rss_bytes\":"));
  const double rss = nlohmann::json::parse(note)["peak_rss_bytes"].get<double>();
  CHECK(rss > 1 << 20);
  CHECK(rss < 64.0 * (1 << 30));
  CHECK_THAT(csv[0], Catch::Contains(",peak_rss_mib_mean,"));

  // A second invocation trains nothing: every run has the summary of its config.
  const std::string metrics_before = read_text(folder.path / "exp/adam_lr=0.01/seed0/metrics.jsonl");
  Outcome second = run_experiment(arguments, folder.path);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, Catch::Contains("8 runs, 8 finished (skipped), 0 to run"));
  CHECK(read_text(folder.path / "exp/adam_lr=0.01/seed0/metrics.jsonl") == metrics_before);
  Outcome dry_again = run_experiment(
      {"--config", "sweep.yaml", "--out", "exp", "--set", "train.max_steps=4", "--dry-run"}, folder.path);
  CHECK_THAT(dry_again.output, Catch::Contains("1/8 adam_lr=0.01/seed0 -> exp/adam_lr=0.01/seed0: finished"));

  // --collect writes the same tables from the folders alone.
  fs::remove(folder.path / "exp/results.csv");
  Outcome collected = run_experiment({"--collect", "exp", "--no-plot"}, folder.path);
  INFO(collected.output);
  REQUIRE(collected.exit_code == 0);
  CHECK_THAT(collected.output, Catch::Contains("8 runs, 4 variants with a finished run"));
  const std::vector<std::string> recollected = lines_of(read_text(folder.path / "exp/results.csv"));
  REQUIRE(recollected.size() == 5);
  CHECK_THAT(recollected[1], Catch::StartsWith("adam_lr=0.003,2,"));  // by name: no sweep order to follow

  // A changed sweep meets folders of another config: refused, nothing overwritten.
  Outcome changed =
      run_experiment({"--config", "sweep.yaml", "--out", "exp", "--set", "train.max_steps=6"}, folder.path);
  INFO(changed.output);
  CHECK(changed.exit_code == 1);
  CHECK_THAT(changed.output, Catch::Contains("exp/adam_lr=0.01/seed0: holds a run of another config"));
  CHECK(read_text(folder.path / "exp/adam_lr=0.01/seed0/metrics.jsonl") == metrics_before);
}

TEST_CASE("experiment: an interrupted run resumes from its latest checkpoint", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyYaml);
  write_text(folder.path / "sweep.yaml", "base: tiny.yaml\nseeds: [5]\n");
  const std::vector<std::string> arguments = {"--config", "sweep.yaml",        "--out",    "exp",
                                              "--set",    "train.max_steps=4", "--no-plot"};
  REQUIRE(run_experiment(arguments, folder.path).exit_code == 0);
  const fs::path run = folder.path / "exp/base/seed5";
  REQUIRE(fs::is_directory(run / "checkpoints/step_00000004"));
  // As if killed after the checkpoint at step 2: the later checkpoint and the summary never written.
  fs::remove_all(run / "checkpoints/step_00000004");
  std::string kept;
  for (const std::string& line : lines_of(read_text(run / "metrics.jsonl")))
    if (line.find("\"summary\"") == std::string::npos && line.find("\"step\":3") == std::string::npos &&
        line.find("\"step\":4") == std::string::npos)
      kept += line + "\n";
  write_text(run / "metrics.jsonl", kept + "{\"event\":\"train\",\"st");  // and a line cut short

  Outcome resumed = run_experiment(arguments, folder.path);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("[1/1] base/seed5: unfinished, resumes from its latest checkpoint"));
  CHECK_THAT(read_text(run / "train.log"), Catch::Contains("resumed from"));
  CHECK_THAT(read_text(run / "train.log"), Catch::Contains("at step 2"));
  REQUIRE(records(run, "summary").size() == 1);
  CHECK(records(run, "summary")[0]["step"] == 4);
  CHECK(records(run, "summary")[0]["seed"] == 5);
  CHECK(fs::is_directory(run / "checkpoints/step_00000004"));
  // The line cut short stays on its own: the records after it are whole.
  CHECK_THAT(read_text(run / "metrics.jsonl"), Catch::Contains("{\"event\":\"train\",\"st\n"));
  CHECK(records(run, "train").back()["step"] == 4);
  CHECK_THAT(read_text(folder.path / "exp/results.csv"), Catch::Contains("\nbase,1,adam,"));
}

TEST_CASE("experiment: SIGINT saves a checkpoint and exits 130, the next invocation resumes", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyYaml);
  write_text(folder.path / "quick.yaml",
             "base: tiny.yaml\nset: {train.epochs: 0, train.max_steps: 100000000, checkpoint.every_steps: 0}\n");
  const fs::path run = folder.path / "runs/quick/base/seed0";  // default out_dir: runs/<file stem>
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::chdir(folder.path.c_str()) != 0) ::_exit(99);
    FILE* sink = std::freopen("/dev/null", "w", stderr);
    FILE* out = std::freopen("/dev/null", "w", stdout);
    (void)sink;
    (void)out;
    ::execl(OPSNN_EXPERIMENT_EXE, OPSNN_EXPERIMENT_EXE, "--config", "quick.yaml", "--no-plot",
            static_cast<char*>(nullptr));
    ::_exit(98);
  }
  bool started = false;
  for (int i = 0; i < 600 && !started; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    started = read_text(run / "metrics.jsonl").find("\"train\"") != std::string::npos;
  }
  ::kill(child, SIGINT);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(started);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(fs::is_directory(run / "checkpoints"));
  const std::vector<nlohmann::json> summaries = records(run, "summary");
  REQUIRE(summaries.size() == 1);
  CHECK(summaries[0]["interrupted"] == true);
  Outcome dry = run_experiment({"--config", "quick.yaml", "--dry-run"}, folder.path);
  CHECK_THAT(dry.output, Catch::Contains("base/seed0 -> runs/quick/base/seed0: unfinished, resumes from its latest"));
}

TEST_CASE("experiment: --jobs 2 runs in child processes with their output in the run folders", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyYaml);
  write_text(folder.path / "sweep.yaml", kSweepYaml);
  Outcome outcome = run_experiment(
      {"--config", "sweep.yaml", "--out", "exp", "--set", "train.max_steps=2", "--jobs", "2", "--no-plot"},
      folder.path);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  CHECK_THAT(outcome.output, Catch::Contains("[8/8 done]"));
  for (const std::string& variant : kVariants) {
    for (const char* seed : {"seed0", "seed1"}) {
      const fs::path run = folder.path / "exp" / variant / seed;
      CHECK(fs::is_regular_file(run / "experiment.log"));
      REQUIRE(records(run, "summary").size() == 1);
      CHECK(records(run, "summary")[0]["step"] == 2);
    }
  }
  CHECK(lines_of(read_text(folder.path / "exp/results.csv")).size() == 5);
  Outcome again = run_experiment(
      {"--config", "sweep.yaml", "--out", "exp", "--set", "train.max_steps=2", "--jobs", "2", "--no-plot"},
      folder.path);
  CHECK_THAT(again.output, Catch::Contains("8 finished (skipped), 0 to run"));
}

TEST_CASE("experiment: override values reach the config as written, plain and quoted", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyYaml);
  write_text(folder.path / "sweep.yaml", R"(base: tiny.yaml
set: {data.root: "/data: a #1", optimizer.betas: [0.8, 0.95], data.shuffle: false, logging.level: 'warn'}
variants: {x: {optimizer.eps: 1.0e-6}}
)");
  Outcome dry = run_experiment({"--config", "sweep.yaml", "--dry-run"}, folder.path);
  INFO(dry.output);
  REQUIRE(dry.exit_code == 0);
  CHECK_THAT(dry.output, Catch::Contains("1/1 x/seed0 -> runs/"));
  Outcome trained = run_experiment(
      {"--config", "sweep.yaml", "--out", "exp", "--set", "train.max_steps=1", "--no-plot"}, folder.path);
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  const std::string config = read_text(folder.path / "exp/x/seed0/config.yaml");
  CHECK_THAT(config, Catch::Contains("root: \"/data: a #1\""));
  CHECK_THAT(config, Catch::Contains("betas: [0.8, 0.95]"));
  CHECK_THAT(config, Catch::Contains("shuffle: false"));
  CHECK_THAT(config, Catch::Contains("level: warn"));
  CHECK_THAT(config, Catch::Contains("eps: 1e-06"));
}

TEST_CASE("experiment: --collect of a folder without runs exits 1", "[cli]") {
  TemporaryFolder folder;
  fs::create_directories(folder.path / "empty/adam");
  Outcome empty = run_experiment({"--collect", "empty"}, folder.path);
  CHECK(empty.exit_code == 1);
  CHECK_THAT(empty.output, Catch::Contains("empty: no run folders"));
  Outcome missing = run_experiment({"--collect", "missing"}, folder.path);
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.output, Catch::Contains("missing: not a folder"));
}

TEST_CASE("experiment: each class of bad sweep file exits 2 with its place and key", "[cli]") {
  TemporaryFolder folder;
  write_text(folder.path / "tiny.yaml", kTinyYaml);
  struct BadSweep {
    const char* what;
    std::string yaml;
    std::vector<std::string> expected;  // pieces the message must hold
  };
  const std::vector<BadSweep> cases = {
      {"malformed YAML", "base: tiny.yaml\nset: {a: [1, 2}\n", {"sweep.yaml:2:", "malformed YAML"}},
      {"not a mapping", "- base\n", {"sweep.yaml:1:1", "expected a mapping (base, set, variants"}},
      {"misspelt top-level key",
       "base: tiny.yaml\nvariant: {a: {}}\n",
       {"sweep.yaml:2:1", "unknown key 'variant' (did you mean 'variants'?)"}},
      {"config key at the top level",
       "base: tiny.yaml\noptimizer.lr: 0.1\n",
       {"sweep.yaml:2:1", "config keys go under set:"}},
      {"unknown top-level key",
       "base: tiny.yaml\nzzzzzz: 1\n",
       {"sweep.yaml:2:1", "the keys of a sweep file are: base, set, variants"}},
      {"duplicate key",
       "base: tiny.yaml\nseeds: [0]\nseeds: [1]\n",
       {"sweep.yaml:3:1", "duplicate key 'seeds' (first set at sweep.yaml:2:1)"}},
      {"missing base", "seeds: [0]\n", {"sweep.yaml: key 'base' is missing"}},
      {"base not found", "base: nowhere.yaml\n", {"sweep.yaml:1:7", "key 'base'", "cannot find the base config"}},
      {"base not a path", "base: [tiny.yaml]\n", {"sweep.yaml:1:7", "key 'base'", "expected a name or path"}},
      {"base empty", "base:\n", {"sweep.yaml:1:1", "key 'base'", "got nothing"}},
      {"set not a mapping", "base: tiny.yaml\nset: 3\n", {"sweep.yaml:2:6", "key 'set'", "expected a mapping"}},
      {"unknown override key",
       "base: tiny.yaml\nset: {optimizer.lrr: 0.1}\n",
       {"sweep.yaml:2:7", "key 'set'", "unknown config key 'optimizer.lrr' (did you mean 'optimizer.lr'?)"}},
      {"override key in the wrong section",
       "base: tiny.yaml\nset: {lr: 0.1}\n",
       {"sweep.yaml:2:7", "unknown config key 'lr' (did you mean 'optimizer.lr'?)"}},
      {"override of a reserved key",
       "base: tiny.yaml\nset: {run.out_dir: x}\n",
       {"sweep.yaml:2:7", "'run.out_dir' cannot be overridden here"}},
      {"override of a whole section by a value",
       "base: tiny.yaml\nset: {optimizer: 3}\n",
       {"sweep.yaml:2:18", "'optimizer' is a section"}},
      {"override value of the wrong type",
       "base: tiny.yaml\nset: {data.batch_size: abc}\n",
       {"sweep.yaml:2:24", "key 'data.batch_size'", "integer"}},
      {"override value out of range",
       "base: tiny.yaml\nvariants:\n  a: {optimizer.lr: -1}\n",
       {"sweep.yaml:3:21", "key 'optimizer.lr'", "-1"}},
      {"nested override value",
       "base: tiny.yaml\nvariants:\n  a: {optimizer: {lrr: 1}}\n",
       {"sweep.yaml:3:19", "unknown config key 'optimizer.lrr'"}},
      {"key set twice",
       "base: tiny.yaml\nset: {optimizer.lr: 0.1, optimizer: {lr: 0.2}}\n",
       {"sweep.yaml:2:", "'optimizer.lr' is set twice"}},
      {"variants empty",
       "base: tiny.yaml\nvariants: {}\n",
       {"sweep.yaml:2:11", "key 'variants'", "got an empty mapping"}},
      {"variants nothing",
       "base: tiny.yaml\nvariants:\n",
       {"sweep.yaml:2:1", "key 'variants'", "expected a mapping of variant names"}},
      {"variants a list", "base: tiny.yaml\nvariants: [adam, sgd]\n", {"sweep.yaml:2:11", "key 'variants'"}},
      {"variant not a mapping",
       "base: tiny.yaml\nvariants: {adam: 3}\n",
       {"sweep.yaml:2:18", "key 'variants.adam'", "expected a mapping of config keys"}},
      {"variant name not a folder",
       "base: tiny.yaml\nvariants: {a/b: {}}\n",
       {"sweep.yaml:2:12", "key 'variants.a/b'", "a folder name"}},
      {"grid not a mapping", "base: tiny.yaml\ngrid: [0.1]\n", {"sweep.yaml:2:7", "key 'grid'", "expected a mapping"}},
      {"grid empty", "base: tiny.yaml\ngrid: {}\n", {"sweep.yaml:2:7", "key 'grid'", "empty mapping"}},
      {"grid values not a list",
       "base: tiny.yaml\ngrid: {optimizer.lr: 0.1}\n",
       {"sweep.yaml:2:22", "key 'grid.optimizer.lr'", "expected a non-empty list"}},
      {"grid values empty",
       "base: tiny.yaml\ngrid: {optimizer.lr: []}\n",
       {"sweep.yaml:2:22", "key 'grid.optimizer.lr'", "an empty list"}},
      {"grid value twice",
       "base: tiny.yaml\ngrid: {optimizer.lr: [0.1, 1.0e-1]}\n",
       {"sweep.yaml:2:28", "listed twice (first at sweep.yaml:2:23)"}},
      {"grid value a mapping",
       "base: tiny.yaml\ngrid: {optimizer.lr: [{a: 1}]}\n",
       {"sweep.yaml:2:23", "expected a value of optimizer.lr"}},
      {"grid value of the wrong type",
       "base: tiny.yaml\ngrid: {optimizer.lr: [0.1, fast]}\n",
       {"sweep.yaml:2:28", "key 'optimizer.lr'", "fast"}},
      {"grid over a section",
       "base: tiny.yaml\ngrid: {optimizer: [1]}\n",
       {"sweep.yaml:2:8", "'optimizer' is a section"}},
      {"grid unknown key",
       "base: tiny.yaml\ngrid: {optimizer.lrr: [1]}\n",
       {"sweep.yaml:2:8", "key 'grid.optimizer.lrr'", "did you mean 'optimizer.lr'"}},
      {"grid over the seed",
       "base: tiny.yaml\ngrid: {train.seed: [1, 2]}\n",
       {"sweep.yaml:2:8", "'train.seed' cannot be overridden here: seeds come from"}},
      {"variant and grid on one key",
       "base: tiny.yaml\nvariants: {a: {optimizer.lr: 0.1}}\ngrid: {optimizer.lr: [1]}\n",
       {"sweep.yaml:2:30", "'optimizer.lr' is also swept by grid:"}},
      {"seeds not a list", "base: tiny.yaml\nseeds: 3\n", {"sweep.yaml:2:8", "key 'seeds'", "non-empty list"}},
      {"seeds empty", "base: tiny.yaml\nseeds: []\n", {"sweep.yaml:2:8", "key 'seeds'", "an empty list"}},
      {"seed negative",
       "base: tiny.yaml\nseeds: [0, -1]\n",
       {"sweep.yaml:2:12", "key 'seeds[1]'", "expected an integer in [0, 2^64), got -1"}},
      {"seed twice", "base: tiny.yaml\nseeds: [2, 2]\n", {"sweep.yaml:2:12", "seed 2 is listed twice"}},
      {"name not a folder", "base: tiny.yaml\nname: a b\n", {"sweep.yaml:2:7", "key 'name'", "a folder name"}},
      {"out_dir not a path", "base: tiny.yaml\nout_dir: [x]\n", {"sweep.yaml:2:10", "key 'out_dir'"}},
      {"base config itself bad", "base: bad_base.yaml\n", {"bad_base.yaml:1:", "optimizer.lrr"}},
  };
  write_text(folder.path / "bad_base.yaml", "optimizer: {lrr: 1}\n");
  for (const BadSweep& bad : cases) {
    INFO(bad.what);
    write_text(folder.path / "sweep.yaml", bad.yaml);
    Outcome outcome = run_experiment({"--config", "sweep.yaml", "--dry-run"}, folder.path);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 2);
    for (const std::string& piece : bad.expected) CHECK_THAT(outcome.output, Catch::Contains(piece));
    CHECK_THAT(outcome.output, !Catch::Contains("terminate called"));
  }
}

TEST_CASE("experiment: every committed sweep file validates and names its runs", "[cli]") {
  TemporaryFolder folder;
  const fs::path experiments = fs::path(OPSNN_SOURCE_DIR) / "configs" / "experiments";
  int sweeps = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(experiments)) {
    const fs::path sweep = entry.path() / "sweep.yaml";
    if (!entry.is_directory() || !fs::exists(sweep)) continue;
    ++sweeps;
    const Outcome dry = run_experiment({"--config", sweep.string(), "--out", "dry", "--dry-run"}, folder.path);
    INFO(sweep.string() << ": " << dry.output);
    CHECK(dry.exit_code == 0);
    CHECK_THAT(dry.output, Catch::Contains(" to run"));
    // Its committed record sits beside it.
    CHECK(fs::exists(entry.path() / "results.md"));
    CHECK(fs::exists(entry.path() / "results.csv"));
  }
  CHECK(sweeps >= 2);  // cpu_quick and optimizers
}

#endif  // OPSNN_EXPERIMENT_EXE
