// The embedding check of issue 4: installs the built opsnn (`cmake --install`) to a temporary prefix,
// configures and builds tests/embedding (a separate CMake project using find_package(opsnn) and
// opsnn::opsnn) against it, runs the program (load a config, train a few steps, save a checkpoint) and
// checks the checkpoint it wrote.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "opsnn/train/checkpoint.h"
#include "support/catch.h"

namespace fs = std::filesystem;

namespace {

std::string quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs a shell command with its output in `log`; returns the exit code (-1 for a signal).
int run_logged(const std::string& command, const fs::path& log) {
  int status = std::system((command + " >> " + quote(log.string()) + " 2>&1 < /dev/null").c_str());
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("embedding: a program built against the installed package trains and saves a checkpoint", "[embed]") {
  const fs::path work = fs::temp_directory_path() / ("opsnn-embedding-test-" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  const fs::path prefix = work / "prefix", build = work / "build", run = work / "run", log = work / "log.txt";
  const std::string cmake = quote(OPSNN_CMAKE_COMMAND);

  INFO("log: " << log.string());
  REQUIRE(run_logged(cmake + " --install " + quote(OPSNN_BINARY_DIR) + " --prefix " + quote(prefix.string()), log) ==
          0);
  REQUIRE(fs::exists(prefix / "include" / "opsnn" / "train" / "trainer.h"));
  bool has_package_config = false;
  for (const auto& entry : fs::recursive_directory_iterator(prefix))
    has_package_config |= entry.path().filename() == "opsnnConfig.cmake";
  REQUIRE(has_package_config);
  // Configs, architecture files and docs are installed too, and the installed program's --help names
  // the installed reference config.
  const fs::path reference = prefix / "share" / "opsnn" / "configs" / "reference.yaml";
  CHECK(fs::exists(reference));
  CHECK(fs::exists(prefix / "share" / "opsnn" / "configs" / "quickstart.yaml"));
  CHECK(fs::exists(prefix / "share" / "opsnn" / "models" / "small_cnn.yaml"));
  CHECK(fs::exists(prefix / "share" / "opsnn" / "doc" / "optim.md"));
  REQUIRE(run_logged(quote((prefix / "bin" / "opsnn-train").string()) + " --help", log) == 0);
  CHECK_THAT(read_text(log), Catch::Contains(reference.lexically_normal().string()));

  // Only the install prefix tells CMake where opsnn is: the source and build trees are not consulted.
  const std::string configure = cmake + " -S " + quote(std::string(OPSNN_SOURCE_DIR) + "/tests/embedding") + " -B " +
                                quote(build.string()) + " -G " + quote(OPSNN_CMAKE_GENERATOR) +
                                " -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=" + quote(OPSNN_CXX_COMPILER) +
                                " -DCMAKE_PREFIX_PATH=" + quote(prefix.string());
  int configured = run_logged(configure, log);
  INFO(read_text(log));
  REQUIRE(configured == 0);
  REQUIRE(run_logged(cmake + " --build " + quote(build.string()) + " -j2", log) == 0);

  const fs::path program = build / "opsnn-embedding";
  REQUIRE(fs::exists(program));
  const std::string config = std::string(OPSNN_SOURCE_DIR) + "/tests/embedding/tiny.yaml";
  REQUIRE(run_logged(quote(program.string()) + " " + quote(config) + " " + quote(run.string()) + " 3", log) == 0);
  std::optional<fs::path> checkpoint = opsnn::train::find_latest_checkpoint(run);
  REQUIRE(checkpoint.has_value());
  opsnn::train::CheckpointData data = opsnn::train::load_checkpoint(*checkpoint);
  CHECK(data.step == 3);
  CHECK(data.model_tensors.size() == 6);  // small_cnn: conv1, conv2, fc weights and biases
  CHECK(fs::exists(run / "train.log"));

  std::error_code ignored;
  fs::remove_all(work, ignored);
}
