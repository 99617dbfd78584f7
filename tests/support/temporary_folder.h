// A fresh folder under the system temp directory for one test, removed with everything in it afterwards,
// and reading back a text file a test's program wrote there.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

namespace opsnn::testing {

struct TemporaryFolder {
  std::filesystem::path path;
  // prefix names the test file, e.g. "opsnn-cli-test"; the process id and a counter make it unique.
  explicit TemporaryFolder(const std::string& prefix) {
    static int counter = 0;
    std::string name = prefix;
    name += '-';
    name += std::to_string(::getpid());
    name += '-';
    name += std::to_string(counter++);
    path = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
};

// The whole file as text; empty when it cannot be read.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace opsnn::testing
