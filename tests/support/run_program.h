// Runs a built program (opsnn-train, opsnn-bench) through the shell in a folder and captures its exit
// code and output, for the command-line tests.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace opsnn::testing {

struct Outcome {
  int exit_code = -1;  // -1 when the program did not exit normally (a signal: a crash)
  std::string output;  // stdout and stderr together
};

inline std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'')
      quoted += "'\\''";
    else
      quoted += c;
  }
  quoted += '\'';
  return quoted;
}

// `program arguments...` in `folder`, stdin from `input` (empty: /dev/null) through a file there, output
// captured through a file there.
inline Outcome run_program(const std::string& program, const std::vector<std::string>& arguments,
                           const std::filesystem::path& folder, const std::string& input = {}) {
  // Appended piece by piece: `"literal" + std::string` trips GCC 12's -Wrestrict false positive.
  std::string command = "cd ";
  command += shell_quote(folder.string());
  command += " && ";
  command += shell_quote(program);
  for (const std::string& argument : arguments) {
    command += ' ';
    command += shell_quote(argument);
  }
  std::filesystem::path output_file = folder / "program.out";
  command += " > ";
  command += shell_quote(output_file.string());
  command += " 2>&1 < ";
  if (input.empty()) {
    command += "/dev/null";
  } else {
    const std::filesystem::path input_file = folder / "program.in";
    std::ofstream(input_file) << input;
    command += shell_quote(input_file.string());
  }
  int status = std::system(command.c_str());
  Outcome outcome;
  // The shell reports a child killed by a signal as 128 + signal.
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) < 128) outcome.exit_code = WEXITSTATUS(status);
  std::ifstream file(output_file);
  std::stringstream text;
  text << file.rdbuf();
  outcome.output = text.str();
  return outcome;
}

}  // namespace opsnn::testing
