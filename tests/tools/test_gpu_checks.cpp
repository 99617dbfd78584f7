// Tests of tools/device/gpu_checks.sh on stand-in programs (shell scripts in place of opsnn-tests and
// opsnn-bench): the steps run in the given order with their arguments intact, the table gives each
// one's exit code and result line, a failure or a step the budget leaves out makes the exit code 1, and a
// bad command line is refused with exit 2 before anything runs.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/catch.h"
#include "support/run_program.h"
#include "support/temporary_folder.h"

namespace {

void write_program(const std::filesystem::path& path, const std::string& body) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << "#!/bin/bash\n" << body;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

}  // namespace

TEST_CASE("gpu_checks.sh: steps in order, a table of results, failures and refusals in the exit code", "[tools]") {
  opsnn::testing::TemporaryFolder folder("opsnn-gpu-checks-test");
  const std::string script = std::string(OPSNN_SOURCE_DIR) + "/tools/device/gpu_checks.sh";
  // A build folder whose name has a space, as every path must survive the script's quoting.
  const std::filesystem::path build = folder.path / "stand in build";
  write_program(build / "tests" / "opsnn-tests",
                "echo \"arguments: $# [$1] in $OPSNN_BINARY_DIR\" >> \"$(dirname \"$0\")/../calls.txt\"\n"
                "[[ $1 == '[ok]' ]] && { echo 'All tests passed (3 assertions in 1 test case)'; exit 0; }\n"
                "echo 'test cases: 2 | 1 passed | 1 failed'; exit 1\n");
  write_program(build / "opsnn-bench",
                "echo \"bench: $*\" >> \"$(dirname \"$0\")/calls.txt\"\n"
                "echo '  7400.0 images/s, 34.6 ms/step, peak GPU memory 10.40 GiB'\n");
  const std::string logs = (folder.path / "logs").string();

  // The tests find the tools through OPSNN_BINARY_DIR, which the script sets to the build folder.
  opsnn::testing::Outcome run =
      opsnn::testing::run_program("env",
                                  {"-u", "OPSNN_BINARY_DIR", "bash", script, "--build", build.string(), "--logs", logs,
                                   "tests=[ok]", "tests=a spec with spaces", "resnet-tf32"},
                                  folder.path);
  INFO(run.output);
  CHECK(run.exit_code == 1);  // the second step failed
  CHECK(run.output.find("| tests=[ok] | 0 | ") != std::string::npos);
  CHECK(run.output.find("| All tests passed (3 assertions in 1 test case) |") != std::string::npos);
  CHECK(run.output.find("| tests=a spec with spaces | 1 | ") != std::string::npos);
  CHECK(run.output.find("| test cases: 2 \\| 1 passed \\| 1 failed |") != std::string::npos);
  CHECK(run.output.find("| resnet-tf32 | 0 | ") != std::string::npos);
  CHECK(run.output.find("| 7400.0 images/s, 34.6 ms/step, peak GPU memory 10.40 GiB |") != std::string::npos);
  {
    std::ifstream calls(build / "calls.txt");
    const std::string text((std::istreambuf_iterator<char>(calls)), std::istreambuf_iterator<char>());
    CHECK(text == "arguments: 1 [[ok]] in " + build.string() + "\narguments: 1 [a spec with spaces] in " +
                      build.string() +
                      "\n"
                      "bench: resnet50 --precision tf32 --steps 30 --warmup 5 --cuda-graph\n");
  }
  std::ifstream summary(folder.path / "logs" / "summary.md");
  const std::string table((std::istreambuf_iterator<char>(summary)), std::istreambuf_iterator<char>());
  CHECK(table.find("| step | exit | seconds | result |") == 0);

  // The profile step: Nsight Compute (a stand-in first on PATH, printing a one-kernel CSV) on opsnn-bench,
  // then profile_categories.py on the CSV it left in the logs.
  if (std::system("python3 -c 'import csv' > /dev/null 2>&1") == 0) {
    const std::filesystem::path tools = folder.path / "stand in tools";
    write_program(tools / "ncu",
                  "echo \"ncu: $*\" >> \"$(dirname \"$0\")/calls.txt\"\n"
                  "printf '\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\\n\"\",\"\",\"nsecond\"\\n'\n"
                  "printf '\"0\",\"sm90_xmma_fprop_implicit_gemm_bf16bf16\",\"2,000\"\\n'\n");
    opsnn::testing::Outcome profiled = opsnn::testing::run_program(
        "env",
        {"PATH=" + tools.string() + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin"), "bash", script,
         "--build", build.string(), "--logs", logs, "profile-bf16"},
        folder.path);
    INFO(profiled.output);
    CHECK(profiled.exit_code == 0);
    CHECK(profiled.output.find("| profile-bf16 | 0 | ") != std::string::npos);
    CHECK(profiled.output.find("\\| total \\| 1 \\| 0.00 \\| 100% \\|") != std::string::npos);
    CHECK(std::filesystem::exists(folder.path / "logs" / "ncu-bf16.csv"));
    std::ifstream calls(tools / "calls.txt");
    std::string line;
    std::getline(calls, line);
    CHECK(line.find("--csv --page raw " + build.string() + "/opsnn-bench resnet50 --precision bf16 --steps 3") !=
          std::string::npos);
  }

  // No budget left: the step is skipped, said in the table, and the exit code is 1.
  opsnn::testing::Outcome skipped = opsnn::testing::run_program(
      "bash", {script, "--build", build.string(), "--logs", logs, "--budget", "0", "tests=[ok]"}, folder.path);
  INFO(skipped.output);
  CHECK(skipped.exit_code == 1);
  CHECK(skipped.output.find("| tests=[ok] | - | - | skipped: 0 s left of the budget |") != std::string::npos);

  // Refusals, each naming what is wrong, before any step runs.
  struct Refusal {
    std::vector<std::string> arguments;
    std::string message;
  };
  const std::vector<Refusal> refusals = {
      {{"--build", build.string(), "bogus"}, "unknown step 'bogus'"},
      {{"--build", build.string(), "tests"}, "step 'tests' needs a test spec: tests=SPEC"},
      {{"--build", build.string(), "--budget", "ten", "cuda"}, "--budget must be whole seconds, not 'ten'"},
      {{"--build", build.string(), "--fast", "cuda"}, "unknown option '--fast'"},
      {{"--build", build.string()}, "name at least one step"},
      {{"--build", (folder.path / "missing").string(), "cuda"}, "/missing/tests/opsnn-tests (build first"},
  };
  std::filesystem::remove(build / "calls.txt");
  for (const Refusal& refusal : refusals) {
    std::vector<std::string> arguments = {script, "--logs", logs};
    arguments.insert(arguments.end(), refusal.arguments.begin(), refusal.arguments.end());
    opsnn::testing::Outcome refused = opsnn::testing::run_program("bash", arguments, folder.path);
    INFO(refusal.message << "\n" << refused.output);
    CHECK(refused.exit_code == 2);
    CHECK(refused.output.find(refusal.message) != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(build / "calls.txt"));
}
