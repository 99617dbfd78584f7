// opsnn-experiment's sweep files (configs/experiments/README.md documents the format): a base config,
// overrides for every run, named variants and/or a grid crossed with them, and seeds. Reading one
// validates it like a config (ConfigError with FILE:LINE:COL, did-you-mean for misspelt keys) and builds
// every run's TrainConfig through the loader opsnn-train uses, so a bad override fails before any training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opsnn/train/config.h"

namespace opsnn::experiment {

struct Run {
  std::string variant;  // "adam", "adam_lr=0.001", "lr=0.001" (grid only), "base" (neither)
  uint64_t seed = 0;
  std::string run_dir;  // <out_dir>/<variant>/seed<seed>
  train::TrainConfig config;
};

struct Sweep {
  std::string path;                   // the sweep file, as given
  std::string name;                   // the experiment: name:, else the folder of a sweep.yaml, else the file's stem
  std::string out_dir;                // out_dir:, else runs/<name>; --out replaces it
  std::string base;                   // the base config found (the path loaded)
  std::vector<std::string> variants;  // in run order, each once
  std::vector<Run> runs;              // variant x grid point x seed, variant-major
};

// Reads and validates the sweep file at `path` and resolves every run. `cli_overrides` ("key=value", from
// opsnn-experiment --set) apply to every run after the file's own overrides; `out_dir` ("" = the file's
// or the default) is the experiment folder. Throws ConfigError for any problem in the file or overrides.
Sweep load_sweep(const std::string& path, const std::vector<std::string>& cli_overrides, const std::string& out_dir);

// A name usable as one folder: letters, digits and . _ - = + (others become '_'); never "", "." or "..".
std::string folder_safe(const std::string& text);

}  // namespace opsnn::experiment
