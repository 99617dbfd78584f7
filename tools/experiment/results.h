// opsnn-experiment's records of an experiment folder: what each run's metrics.jsonl says (its summary
// line), the per-variant aggregate over seeds, and results.csv / results.md written from them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace opsnn::experiment {

// One run folder's metrics.jsonl: its last summary record (none while the run is unfinished).
struct RunRecord {
  std::string variant;
  std::string seed_folder;  // "seed0"
  std::filesystem::path dir;
  std::optional<nlohmann::json> summary;  // the last "summary" record, interrupted or not
  std::optional<double> last_train_loss;  // of the last "train" record, for summaries without final_train_loss
  std::optional<double> peak_rss_bytes;   // from DIR/experiment.json (opsnn-experiment's own note), if any
  bool finished() const;                  // a summary that is not interrupted
};

// Reads DIR/metrics.jsonl (a line that is not JSON, from a run killed mid-write, is skipped) and the peak
// resident memory opsnn-experiment noted in DIR/experiment.json.
RunRecord read_run(const std::filesystem::path& dir, std::string variant, std::string seed_folder);

// Every run folder under an experiment folder: DIR/<variant>/seed<k>/metrics.jsonl, in `order` of
// variants first (the sweep's), then the remaining variant folders by name.
std::vector<RunRecord> collect_runs(const std::filesystem::path& dir, const std::vector<std::string>& order = {});

// Where and how the results were made, written into each record (results.md's header, the CSV's last
// columns, the plot's title).
struct Provenance {
  std::string machine;  // "AMD EPYC (2 cores)"
  std::string date;     // UTC, ISO 8601
  std::string command;  // the opsnn-experiment command line
};
Provenance current_provenance(const std::string& command);

// Writes DIR/results.csv and DIR/results.md from `runs`; returns the number of variants with a finished run.
size_t write_results(const std::filesystem::path& dir, const std::string& experiment,
                     const std::vector<RunRecord>& runs, const Provenance& provenance);

}  // namespace opsnn::experiment
