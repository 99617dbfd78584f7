// results.csv and results.md of an experiment folder, from its run folders alone (so --collect and a
// finished sweep write the same thing). Each variant's numbers are mean, sample standard deviation and n
// over its finished runs (its seeds); unfinished runs are listed, not counted.
#include "experiment/results.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "opsnn/core/error.h"

namespace opsnn::experiment {
namespace {

namespace fs = std::filesystem;

struct Stats {
  size_t n = 0;
  double mean = 0.0, std = 0.0;  // sample standard deviation (n - 1); 0 for one value
};

Stats stats(const std::vector<double>& values) {
  Stats result;
  result.n = values.size();
  if (values.empty()) return result;
  for (double v : values) result.mean += v;
  result.mean /= static_cast<double>(values.size());
  if (values.size() > 1) {
    double squares = 0.0;
    for (double v : values) squares += (v - result.mean) * (v - result.mean);
    result.std = std::sqrt(squares / static_cast<double>(values.size() - 1));
  }
  return result;
}

std::optional<double> number(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  if (it == record.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string string_field(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The values of `key` over the runs that have it; final_train_loss falls back to the last train record.
std::vector<double> values_of(const std::vector<const RunRecord*>& runs, const char* key) {
  std::vector<double> values;
  for (const RunRecord* run : runs) {
    std::optional<double> value = number(*run->summary, key);
    if (!value && std::string(key) == "final_train_loss") value = run->last_train_loss;
    if (value && std::isfinite(*value)) values.push_back(*value);
  }
  return values;
}

// The distinct values of a string field over the runs, joined ("adam", "sgd, adam" when they differ).
std::string distinct(const std::vector<const RunRecord*>& runs, const char* key) {
  std::vector<std::string> seen;
  for (const RunRecord* run : runs) {
    const auto it = run->summary->find(key);
    std::string value;
    if (it == run->summary->end()) continue;
    if (it->is_string())
      value = it->get<std::string>();
    else if (it->is_null())
      value = "null";
    else
      value = it->dump();
    if (std::find(seen.begin(), seen.end(), value) == seen.end()) seen.push_back(value);
  }
  std::string text;
  for (const std::string& value : seen) text += (text.empty() ? "" : " ") + value;
  return text;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string csv_number(const Stats& s, double scale = 1.0) {
  return s.n == 0 ? std::string() : fmt::format("{:.6g}", s.mean * scale);
}
std::string csv_std(const Stats& s, double scale = 1.0) {
  return s.n < 2 ? std::string() : fmt::format("{:.6g}", s.std * scale);
}

// "87.12 ± 0.31" (n > 1), "87.12" (n = 1), "-" (none); n is the table's own column.
std::string md_stat(const Stats& s, const char* format, double scale = 1.0) {
  if (s.n == 0) return "-";
  std::string text = fmt::format(fmt::runtime(format), s.mean * scale);
  if (s.n > 1) text += " ± " + fmt::format(fmt::runtime(format), s.std * scale);
  return text;
}

std::string md_cell(const std::string& text) {
  std::string escaped;
  for (char c : text) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
  return escaped.empty() ? "-" : escaped;
}

}  // namespace

bool RunRecord::finished() const {
  if (!summary) return false;
  const auto it = summary->find("interrupted");
  return it == summary->end() || !it->is_boolean() || !it->get<bool>();
}

RunRecord read_run(const fs::path& dir, std::string variant, std::string seed_folder) {
  RunRecord run;
  run.variant = std::move(variant);
  run.seed_folder = std::move(seed_folder);
  run.dir = dir;
  std::ifstream file(dir / "metrics.jsonl");
  std::string line;
  while (std::getline(file, line)) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) continue;  // discarded (not JSON) or not a record: a line cut short by a kill
    const std::string event = string_field(record, "event");
    if (event == "summary") run.summary = std::move(record);
    if (event == "train") run.last_train_loss = number(record, "loss");
  }
  std::ifstream note_file(dir / "experiment.json");
  std::stringstream note_text;
  note_text << note_file.rdbuf();
  const nlohmann::json note = nlohmann::json::parse(note_text.str(), nullptr, /*allow_exceptions=*/false);
  if (note.is_object()) run.peak_rss_bytes = number(note, "peak_rss_bytes");
  return run;
}

std::vector<RunRecord> collect_runs(const fs::path& dir, const std::vector<std::string>& order) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) throw DataError(dir.string() + ": not a folder (expected an experiment folder)");
  std::vector<std::string> variants = order;
  std::set<std::string> found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
    if (entry.is_directory(error)) found.insert(entry.path().filename().string());
  for (const std::string& name : found)
    if (std::find(variants.begin(), variants.end(), name) == variants.end()) variants.push_back(name);
  std::vector<RunRecord> runs;
  for (const std::string& variant : variants) {
    std::vector<std::pair<uint64_t, std::string>> seeds;  // by seed number, not by name ("seed10" after "seed2")
    for (const fs::directory_entry& entry : fs::directory_iterator(dir / variant, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("seed", 0) != 0 || name.size() == 4 || !fs::is_regular_file(entry.path() / "metrics.jsonl", error))
        continue;
      const std::string digits = name.substr(4);
      if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 19) continue;
      seeds.emplace_back(std::stoull(digits), name);
    }
    std::sort(seeds.begin(), seeds.end());
    for (const auto& [seed, name] : seeds) runs.push_back(read_run(dir / variant / name, variant, name));
  }
  return runs;
}

Provenance current_provenance(const std::string& command) {
  Provenance provenance;
  std::string model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 1);
      model.erase(0, model.find_first_not_of(" \t"));
      break;
    }
  }
  const unsigned cores = std::thread::hardware_concurrency();
  provenance.machine = model + " (" + (cores ? std::to_string(cores) : std::string("?")) + " cores)";
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  provenance.date = buffer;
  provenance.command = command;
  return provenance;
}

size_t write_results(const fs::path& dir, const std::string& experiment, const std::vector<RunRecord>& runs,
                     const Provenance& provenance) {
  std::vector<std::string> variants;
  std::map<std::string, std::vector<const RunRecord*>> finished;
  std::vector<const RunRecord*> unfinished;
  for (const RunRecord& run : runs) {
    if (std::find(variants.begin(), variants.end(), run.variant) == variants.end()) variants.push_back(run.variant);
    if (run.finished())
      finished[run.variant].push_back(&run);
    else
      unfinished.push_back(&run);
  }

  std::ofstream csv(dir / "results.csv");
  csv << "variant,n,optimizer,precision,topk_density,steps,final_test_acc_mean,final_test_acc_std,best_test_acc_mean,"
         "best_test_acc_std,final_train_loss_mean,final_train_loss_std,final_test_loss_mean,final_test_loss_std,"
         "wall_s_mean,samples_per_s_mean,skipped_steps_mean,final_loss_scale_mean,peak_rss_mib_mean,git_revision,"
         "machine,date,command\n";
  std::ofstream md(dir / "results.md");
  md << "# Experiment " << experiment << "\n\n"
     << "Machine: " << provenance.machine << "; date: " << provenance.date << "; command: `" << provenance.command
     << "`\n\n"
     << "Accuracy in %, mean ± sample standard deviation over the n finished runs (seeds) of each variant. Wall "
        "time and samples/s are per run, from each run's summary in metrics.jsonl: the whole fit of its last "
        "invocation (training, evaluations, checkpoints). Peak RSS: the host memory high-water mark of the "
        "process during the run (GPU memory is not tracked).\n\n"
     << "| variant | n | final test acc | best test acc | final train loss | final test loss | wall s | samples/s | "
        "skipped steps | final loss scale | peak RSS MiB |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  size_t reported = 0;
  std::set<std::string> revisions;
  for (const std::string& variant : variants) {
    const std::vector<const RunRecord*>& group = finished[variant];
    if (group.empty()) continue;
    ++reported;
    const Stats final_acc = stats(values_of(group, "final_test_acc")),
                best_acc = stats(values_of(group, "best_test_acc"));
    const Stats train_loss = stats(values_of(group, "final_train_loss"));
    const Stats test_loss = stats(values_of(group, "final_test_loss"));
    const Stats wall = stats(values_of(group, "wall_s")), rate = stats(values_of(group, "samples_per_s"));
    const Stats skipped = stats(values_of(group, "skipped_steps")), scale = stats(values_of(group, "final_loss_scale"));
    const Stats steps = stats(values_of(group, "step"));
    std::vector<double> rss;
    for (const RunRecord* run : group)
      if (run->peak_rss_bytes) rss.push_back(*run->peak_rss_bytes);
    const Stats memory = stats(rss);
    const double mib = 1.0 / (1024.0 * 1024.0);
    const std::string revision = distinct(group, "git_revision");
    revisions.insert(revision.empty() ? "unknown" : revision);
    csv << csv_field(variant) << ',' << group.size() << ',' << csv_field(distinct(group, "optimizer")) << ','
        << csv_field(distinct(group, "precision")) << ',' << csv_field(distinct(group, "topk_density")) << ','
        << csv_number(steps) << ',' << csv_number(final_acc) << ',' << csv_std(final_acc) << ',' << csv_number(best_acc)
        << ',' << csv_std(best_acc) << ',' << csv_number(train_loss) << ',' << csv_std(train_loss) << ','
        << csv_number(test_loss) << ',' << csv_std(test_loss) << ',' << csv_number(wall) << ',' << csv_number(rate)
        << ',' << csv_number(skipped) << ',' << csv_number(scale) << ',' << csv_number(memory, mib) << ','
        << csv_field(revision) << ',' << csv_field(provenance.machine) << ',' << csv_field(provenance.date) << ','
        << csv_field(provenance.command) << '\n';
    md << "| " << md_cell(variant) << " | " << group.size() << " | " << md_stat(final_acc, "{:.2f}", 100.0) << " | "
       << md_stat(best_acc, "{:.2f}", 100.0) << " | " << md_stat(train_loss, "{:.4f}") << " | "
       << md_stat(test_loss, "{:.4f}") << " | " << md_stat(wall, "{:.1f}") << " | " << md_stat(rate, "{:.0f}") << " | "
       << md_stat(skipped, "{:g}") << " | " << md_stat(scale, "{:g}") << " | " << md_stat(memory, "{:.0f}", mib)
       << " |\n";
  }
  md << "\nRuns (config hash: the digest of each run's resolved config, as its checkpoints carry it):\n\n"
     << "| variant | run | optimizer | precision | top-k density | steps | final test acc | best test acc | "
        "final train loss | wall s | peak RSS MiB | config hash |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const RunRecord& run : runs) {
    if (!run.finished()) continue;
    const nlohmann::json& s = *run.summary;
    auto cell = [&](const char* key, const char* format, double scale = 1.0) {
      std::optional<double> value = number(s, key);
      if (!value && std::string(key) == "final_train_loss") value = run.last_train_loss;
      return value ? fmt::format(fmt::runtime(format), *value * scale) : std::string("-");
    };
    const auto density = s.find("topk_density");
    md << "| " << md_cell(run.variant) << " | " << run.seed_folder << " | " << md_cell(string_field(s, "optimizer"))
       << " | " << md_cell(string_field(s, "precision")) << " | "
       << (density != s.end() && density->is_number() ? fmt::format("{:g}", density->get<double>()) : "-") << " | "
       << cell("step", "{:.0f}") << " | " << cell("final_test_acc", "{:.2f}", 100.0) << " | "
       << cell("best_test_acc", "{:.2f}", 100.0) << " | " << cell("final_train_loss", "{:.4f}") << " | "
       << cell("wall_s", "{:.1f}") << " | "
       << (run.peak_rss_bytes ? fmt::format("{:.0f}", *run.peak_rss_bytes / (1024.0 * 1024.0)) : std::string("-"))
       << " | " << md_cell(string_field(s, "config_hash")) << " |\n";
  }
  if (!unfinished.empty()) {
    md << "\nUnfinished (no summary yet, or interrupted; not counted above):";
    for (const RunRecord* run : unfinished) md << ' ' << run->variant << '/' << run->seed_folder;
    md << "\n";
  }
  std::string revision_text;
  for (const std::string& revision : revisions) revision_text += (revision_text.empty() ? "" : ", ") + revision;
  md << "\nopsnn revision: " << (revision_text.empty() ? std::string("unknown") : revision_text) << "\n";
  if (!csv || !md) throw DataError("cannot write results.csv / results.md in " + dir.string());
  return reported;
}

}  // namespace opsnn::experiment
