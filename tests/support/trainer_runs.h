// The loss curve and the last evaluation in a run folder's metrics.jsonl (opsnn-train's metrics
// contract), for tests that compare whole runs.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace opsnn::testing {

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
