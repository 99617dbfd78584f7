// Tests of tools/make_criteo_sample.py: it writes the lines of tests/support/criteo_files.h for the same
// seed and first line, plain and gzip, which the criteo dataset reads; bad arguments exit 2. Returns early
// with a note where no python3 is found.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "opsnn/data/criteo.h"
#include "support/catch.h"
#include "support/criteo_files.h"
#include "support/run_program.h"
#include "support/temporary_folder.h"

namespace fs = std::filesystem;
using opsnn::testing::Outcome;

namespace {

std::string python3() {
  for (const char* candidate : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(candidate) + " -c 'import gzip' > /dev/null 2>&1").c_str()) == 0) return candidate;
  return "";
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("make_criteo_sample.py writes the test helper's lines plain and gzip", "[tools]") {
  const std::string python = python3();
  if (python.empty()) {
    WARN("skipped: no python3");
    return;
  }
  opsnn::testing::TemporaryFolder folder("opsnn-criteo-sample-test");
  const std::string script = std::string(OPSNN_SOURCE_DIR) + "/tools/make_criteo_sample.py";
  Outcome plain = opsnn::testing::run_program(
      python, {script, "--out", "plain", "--lines", "500", "--seed", "5", "--first", "10"}, folder.path);
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  CHECK(read_text(folder.path / "plain" / "train.txt") == opsnn::testing::criteo_text(5, 10, 500));

  Outcome gzip =
      opsnn::testing::run_program(python, {script, "--out", "gzip", "--lines", "300", "--gzip"}, folder.path);
  INFO(gzip.output);
  REQUIRE(gzip.exit_code == 0);
  opsnn::data::CriteoOptions options;
  options.root = (folder.path / "gzip").string();
  const opsnn::data::CriteoSplits splits = opsnn::data::load_criteo(options);
  CHECK(splits.train->report().train.gzip);
  CHECK(splits.train->report().train.good_lines == 300);
  CHECK(splits.test->label(29) == opsnn::testing::criteo_line(0, 299).label);

  Outcome bad = opsnn::testing::run_program(python, {script, "--out", "x", "--lines", "0"}, folder.path);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains("--lines must be at least 1"));
}
