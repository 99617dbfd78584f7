// Shared pieces of opsnn-bench: subcommand registration, wall-clock timing with medians, table output.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "opsnn/core/tensor.h"

namespace opsnn::bench {

// A subcommand: `opsnn-bench <name> [args...]`. Returns the process exit code.
struct Command {
  std::string name;
  std::string help;  // one line
  std::function<int(const std::vector<std::string>& args)> run;
};

// Registers at static-initialization time (the bench program links its parts directly, so this is safe).
struct Registration {
  explicit Registration(Command command);
};
std::vector<Command>& commands();

// Runs fn `warmup` times, then `repeats` times, and returns the median seconds of one call.
inline double median_seconds(const std::function<void()>& fn, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  times.reserve(static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

// A parameter set to optimize: "1e8" (one tensor), "resnet50" (torchvision's 161 shapes), "1e9x50".
struct Problem {
  std::string label;
  std::vector<Shape> shapes;
  int64_t total() const;
};
Problem make_problem(const std::string& text);  // ConfigError for text it cannot read
// The comma-separated entries of option `key`'s value; ConfigError naming `key` for an empty entry.
std::vector<std::string> split(const std::string& text, const std::string& key);
// `--key N` as a positive int written in full (ConfigError for 1e9, 2abc, 0), fallback when absent.
int parse_positive(const std::vector<std::string>& args, const std::string& key, int fallback);

// Every subcommand calls this first (after --help), before it measures anything or looks for a GPU:
// ConfigError (exit 2) naming the option for an option not in `with_value` or `flags`, a stray word,
// an option given twice, and a value option whose value is missing or empty.
void check_options(const std::vector<std::string>& args, const std::vector<std::string>& with_value,
                   const std::vector<std::string>& flags = {});

// Reads `--key value` from args; returns fallback when absent.
std::string option(const std::vector<std::string>& args, const std::string& key, const std::string& fallback);

}  // namespace opsnn::bench
