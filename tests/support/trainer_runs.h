// What the tests that run the trainer share: quiet trainer options (no progress bar, no console log)
// and the loss curve and last evaluation of a run folder's metrics.jsonl (opsnn-train's metrics contract).
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "opsnn/train/trainer.h"

namespace opsnn::testing {

// Options for a run into `out` that writes its files but nothing to the console.
inline train::TrainerOptions quiet_options(const std::filesystem::path& out, const std::string& resume = "") {
  train::TrainerOptions options;
  options.out_dir = out.string();
  options.resume = resume;
  options.show_progress = false;
  options.log_to_console = false;
  return options;
}

struct MetricsCurve {
  std::vector<double> losses;       // of the train lines
  std::vector<double> loss_scales;  // of the train lines
  double test_loss = 0.0;           // of the last eval line
  double test_accuracy = 0.0;
};

inline MetricsCurve read_metrics_curve(const std::filesystem::path& run_dir) {
  MetricsCurve curve;
  std::ifstream file(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(file, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["event"] == "train") {
      curve.losses.push_back(record["loss"].get<double>());
      curve.loss_scales.push_back(record["loss_scale"].get<double>());
    }
    if (record["event"] == "eval") {
      curve.test_loss = record["test_loss"].get<double>();
      curve.test_accuracy = record["test_acc"].get<double>();
    }
  }
  return curve;
}

}  // namespace opsnn::testing
