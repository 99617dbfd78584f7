// A fresh folder under the system temp directory for one test, removed with everything in it afterwards.
#pragma once

#include <unistd.h>

#include <filesystem>
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

}  // namespace opsnn::testing
