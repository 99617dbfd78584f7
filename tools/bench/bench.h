// Shared pieces of opsnn-bench: subcommand registration, wall-clock timing with medians, table output.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

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

// Reads `--key value` from args; returns fallback when absent.
std::string option(const std::vector<std::string>& args, const std::string& key, const std::string& fallback);

}  // namespace opsnn::bench
