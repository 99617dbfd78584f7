// Tests of tools/plot_metrics.py on generated metrics.jsonl files: an experiment folder (mean curve per
// variant, min-max and std bands, x = step, epoch, time) and plain run folders each give a PNG; a folder
// without runs is refused. Returns early with a note where no python3 with matplotlib is found.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/catch.h"
#include "support/run_program.h"
#include "support/temporary_folder.h"

namespace fs = std::filesystem;
using opsnn::testing::Outcome;

namespace {

// The python3 on PATH, else the distribution's, that has matplotlib; "" when neither has it.
std::string python_with_matplotlib() {
  for (const char* candidate : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(candidate) + " -c 'import matplotlib' > /dev/null 2>&1").c_str()) == 0)
      return candidate;
  return "";
}

// A run's metrics.jsonl: train records every 5 steps, an eval per epoch of 20 steps, a summary.
void write_run(const fs::path& dir, double loss_offset, int steps) {
  fs::create_directories(dir);
  std::ofstream file(dir / "metrics.jsonl");
  for (int step = 5; step <= steps; step += 5)
    file << "{\"event\":\"train\",\"step\":" << step << ",\"epoch\":" << (step - 1) / 20 + 1
         << ",\"loss\":" << loss_offset + 2.0 / step << ",\"lr\":0.01,\"grad_norm\":1.5,\"loss_scale\":1.0,"
         << "\"samples_per_s\":1000,\"step_ms\":" << 10 + step % 3 << ",\"data_wait_ms\":0.1}\n";
  for (int step = 20; step <= steps; step += 20)
    file << "{\"event\":\"eval\",\"step\":" << step << ",\"epoch\":" << step / 20 << ",\"test_loss\":" << 1.0 / step
         << ",\"test_acc\":" << 0.5 + 0.001 * step - loss_offset << ",\"samples\":100}\n";
  file << "{\"event\":\"summary\",\"step\":" << steps << ",\"epoch\":" << steps / 20
       << ",\"steps_per_epoch\":20,\"interrupted\":false}\n";
}

bool is_png(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  char magic[8] = {};
  file.read(magic, 8);
  return file.gcount() == 8 && std::string(magic + 1, 3) == "PNG";
}

}  // namespace

TEST_CASE("plot_metrics.py: an experiment folder and plain run folders give a PNG", "[tools]") {
  const std::string python = python_with_matplotlib();
  if (python.empty()) {
    WARN("skipped: no python3 with matplotlib (apt install python3-matplotlib)");
    return;
  }
  opsnn::testing::TemporaryFolder folder("opsnn-plot-test");
  const std::string script = std::string(OPSNN_SOURCE_DIR) + "/tools/plot_metrics.py";
  for (const char* variant : {"adam", "sgd"})
    for (int seed = 0; seed < 3; ++seed)
      write_run(folder.path / "exp" / variant / ("seed" + std::to_string(seed)), 0.01 * seed + (variant[0] == 's'),
                seed == 2 ? 40 : 60);  // a shorter seed: the mean is over the steps all seeds logged
  fs::create_directories(folder.path / "exp/not_a_variant");

  struct Call {
    std::vector<std::string> arguments;
    std::string png;
  };
  const std::vector<Call> calls = {
      {{script, "--experiment", "exp", "--out", "a.png"}, "a.png"},
      {{script, "exp", "--out", "b.png", "--band", "std", "--x", "epoch"}, "b.png"},  // detected as an experiment
      {{script, "--experiment", "exp", "--out", "c.png", "--x", "time", "--title", "two\nlines"}, "c.png"},
      {{script, "exp/adam/seed0", "exp/sgd/seed1", "--out", "d.png", "--x", "epoch"}, "d.png"},  // plain runs
      {{script, "exp/adam/seed0", "--out", "e.png", "--layout", "columns"}, "e.png"},
  };
  for (const Call& call : calls) {
    Outcome outcome = opsnn::testing::run_program(python, call.arguments, folder.path);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 0);
    CHECK(is_png(folder.path / call.png));
  }
  Outcome experiment = opsnn::testing::run_program(python, calls[0].arguments, folder.path);
  CHECK_THAT(experiment.output, Catch::Contains("2 variant(s), 6 run(s), band min-max"));

  fs::create_directories(folder.path / "empty");
  Outcome empty = opsnn::testing::run_program(python, {script, "--experiment", "empty", "--out", "x.png"}, folder.path);
  CHECK(empty.exit_code != 0);
  CHECK_THAT(empty.output, Catch::Contains("empty: no run folders"));
  CHECK_FALSE(fs::exists(folder.path / "x.png"));
  Outcome both = opsnn::testing::run_program(python, {script, "--experiment", "exp", "exp/adam/seed0"}, folder.path);
  CHECK(both.exit_code != 0);
  CHECK_THAT(both.output, Catch::Contains("not both"));
}

TEST_CASE("fused_step_record.py: the committed benchmark JSON gives the fused_step record and bad JSON fails",
          "[tools]") {
  const std::string python = python_with_matplotlib();
  if (python.empty()) {
    WARN("skipped: no python3 with matplotlib (apt install python3-matplotlib)");
    return;
  }
  opsnn::testing::TemporaryFolder folder("opsnn-fused-record-test");
  const std::string script = std::string(OPSNN_SOURCE_DIR) + "/tools/fused_step_record.py";
  const fs::path committed = fs::path(OPSNN_SOURCE_DIR) / "configs/experiments/fused_step";
  const Outcome made = opsnn::testing::run_program(
      python, {script, (committed / "opsnn_bench_optim_cuda.json").string(), "record", "--date", "2026-12-02"},
      folder.path);
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  CHECK(is_png(folder.path / "record" / "curves.png"));
  // The committed record is what the script makes of the committed JSON.
  for (const char* file : {"results.md", "results.csv"}) {
    std::ifstream made_file(folder.path / "record" / file), committed_file(committed / file);
    const std::string a((std::istreambuf_iterator<char>(made_file)), std::istreambuf_iterator<char>());
    const std::string b((std::istreambuf_iterator<char>(committed_file)), std::istreambuf_iterator<char>());
    CHECK(a == b);
  }
  std::ofstream(folder.path / "bad.json") << "{\"rows\": [{\"problem\": \"1e6\"}]";
  const Outcome bad =
      opsnn::testing::run_program(python, {script, "bad.json", "out", "--date", "2026-12-02"}, folder.path);
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, Catch::Contains("bad.json: not opsnn-bench optim JSON"));
}
