// opsnn-experiment: runs a sweep (configs/experiments/*/sweep.yaml: a base config, variants, a grid,
// seeds) one train::Trainer run after another, skipping finished runs and resuming interrupted ones, and
// writes the experiment's results.csv, results.md and curves.png. --collect writes them from existing run
// folders alone. configs/experiments/README.md documents the sweep format.
// Exit codes: 0 success, 2 usage or sweep/config errors, 1 runtime failures (a run failed: data, a
// checkpoint, divergence; a run folder holding another config), 130 interrupted by SIGINT (each run in
// flight saves a checkpoint first; running again resumes).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "experiment/results.h"
#include "experiment/sweep.h"
#include "opsnn/core/error.h"
#include "opsnn/core/storage.h"
#include "opsnn/opsnn.h"
#include "opsnn/train/checkpoint.h"
#include "opsnn/train/config.h"
#include "opsnn/train/trainer.h"

namespace {

namespace fs = std::filesystem;
using namespace opsnn;
using namespace opsnn::experiment;

std::atomic<bool> stop_requested{false};

extern "C" void on_interrupt(int) {
  if (stop_requested.exchange(true)) std::_Exit(130);  // a second Ctrl-C stops at once
}

// SIGINT without SA_RESTART, so that the --jobs parent's waitpid returns (EINTR) and can pass the
// interrupt on to its children when it alone was signalled.
void catch_interrupt() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  ::sigaction(SIGINT, &action, nullptr);
}

constexpr const char* kUsage =
    R"(usage: opsnn-experiment --config SWEEP.yaml [--set key.path=value]... [--out DIR] [--jobs N]
                        [--dry-run] [--no-plot]
       opsnn-experiment --collect DIR [--no-plot]

Runs every combination of a sweep file's variants, grid points and seeds (configs/experiments/README.md)
into DIR/<variant>/seed<k>/ (DIR: the sweep's out_dir, default runs/<experiment>), each an opsnn-train
run folder, then writes DIR/results.csv, DIR/results.md and DIR/curves.png (tools/plot_metrics.py).
A run whose metrics.jsonl has a summary of the same config is skipped; an unfinished one resumes from
its latest checkpoint (as opsnn-train --resume auto).

options:
  --config SWEEP       the sweep file
  --set key.path=value override one config key in every run, after the sweep's own overrides
                       (value parsed as YAML, as opsnn-train --set); repeatable
  --out DIR            the experiment folder (default: the sweep's out_dir, else runs/<experiment>)
  --jobs N             N runs at once, each in a child process with 1/N of the CPU threads (on a GPU
                       machine, one GPU each while there are enough); default 1: one after another
                       in this process
  --dry-run            list the runs (and which are finished) and exit
  --collect DIR        write the results of the run folders under DIR; no training
  --no-plot            do not write curves.png
  --help               this text
  --version            the opsnn version

exit codes: 0 done, 1 a run failed (the others still ran) or a run folder holds another config,
            2 usage, sweep or config error, 130 interrupted (Ctrl-C saves a checkpoint; run again)
)";

struct Arguments {
  std::string sweep_path, collect_dir, out_dir;
  std::vector<std::string> overrides;
  int jobs = 1;
  bool dry_run = false, no_plot = false;
  int run_index = -1;  // internal: a child process of --jobs runs this one run
};

// The command line through CLI11, with opsnn-train's rules: an empty value is refused and a value option
// names one thing (a second --config would silently replace the first).
Arguments parse_arguments(int argc, char** argv) {
  CLI::App app("opsnn-experiment");
  app.set_help_flag("--help,-h");
  app.set_version_flag("--version", std::string("opsnn-experiment ") + OPSNN_VERSION_STRING);
  std::vector<std::string> config, collect, out, overrides;
  std::vector<int> jobs, run_index;
  bool dry_run = false, no_plot = false;
  app.add_option("--config", config)->allow_extra_args(false);
  app.add_option("--collect", collect)->allow_extra_args(false);
  app.add_option("--set", overrides)->allow_extra_args(false);
  app.add_option("--out", out)->allow_extra_args(false);
  app.add_option("--jobs", jobs)->allow_extra_args(false);
  app.add_option("--run-index", run_index)->allow_extra_args(false)->group("");
  app.add_flag("--dry-run", dry_run)->disable_flag_override();
  app.add_flag("--no-plot", no_plot)->disable_flag_override();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    throw;
  } catch (const CLI::CallForVersion&) {
    throw;
  } catch (const CLI::ArgumentMismatch& error) {
    const std::string text = error.what();
    throw UsageError(text.substr(0, text.find(':')) + " needs a value (see opsnn-experiment --help)");
  } catch (const CLI::ConversionError& error) {
    throw UsageError(std::string(error.what()) + " (--jobs takes a whole number; see opsnn-experiment --help)");
  } catch (const CLI::ParseError& error) {
    throw UsageError(std::string(error.what()) + " (see opsnn-experiment --help)");
  }
  Arguments args;
  auto take_once = [](const char* flag, const std::vector<std::string>& given, std::string& target) {
    for (const std::string& value : given)
      if (value.empty()) throw UsageError(std::string(flag) + " needs a value, got an empty one");
    if (given.size() > 1)
      throw UsageError(std::string(flag) + " given twice ('" + given[0] + "' and '" + given[1] + "'); give it once");
    if (!given.empty()) target = given[0];
  };
  take_once("--config", config, args.sweep_path);
  take_once("--collect", collect, args.collect_dir);
  take_once("--out", out, args.out_dir);
  for (const std::string& value : overrides)
    if (value.empty()) throw UsageError("--set needs a value, got an empty one");
  args.overrides = std::move(overrides);
  if (jobs.size() > 1) throw UsageError("--jobs given twice; give it once");
  if (!jobs.empty()) args.jobs = jobs[0];
  if (args.jobs < 1 || args.jobs > 1024)
    throw UsageError("--jobs must be in [1, 1024], got " + std::to_string(args.jobs));
  if (!run_index.empty()) args.run_index = run_index[0];
  args.dry_run = dry_run;
  args.no_plot = no_plot;
  if (args.sweep_path.empty() == args.collect_dir.empty())
    throw UsageError(args.sweep_path.empty() ? "give --config SWEEP.yaml (a sweep to run) or --collect DIR"
                                             : "--config and --collect exclude each other (--collect trains nothing)");
  if (!args.collect_dir.empty() && (!args.overrides.empty() || !args.out_dir.empty() || args.dry_run || !jobs.empty()))
    throw UsageError("--collect takes only --no-plot (it reads the run folders as they are)");
  return args;
}

std::string shell_quote(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                              "_-./=:+,@%") == std::string::npos)
    return text;
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string command_line(int argc, char** argv) {
  std::string text;
  for (int i = 0; i < argc; ++i) text += (i ? " " : "") + shell_quote(argv[i]);
  return text;
}

enum class RunState { finished, resume, fresh };

// What a run folder holds: a finished run of this config (its summary carries the config's digest), a
// start to resume, or nothing. A folder written by another config is refused: resuming it would mix two
// configs in one record, and it may hold results someone wants (remove it to rerun).
RunState run_state(const Run& run) {
  const std::string resolved = train::emit_config(run.config);
  const fs::path dir(run.run_dir);
  std::error_code error;
  if (!fs::exists(dir / "config.yaml", error)) return RunState::fresh;
  std::ifstream file(dir / "config.yaml", std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  if (text.str() != resolved)
    throw DataError(run.run_dir + ": holds a run of another config (its config.yaml differs from this sweep's run: " +
                    "was the sweep or --set changed?); remove the folder to rerun it, or use another --out");
  const RunRecord record = read_run(dir, run.variant, "seed" + std::to_string(run.seed));
  if (record.finished() && record.summary->value("config_hash", std::string()) == train::config_digest(resolved))
    return RunState::finished;
  return train::find_latest_checkpoint(dir) ? RunState::resume : RunState::fresh;
}

const char* state_text(RunState state) {
  switch (state) {
    case RunState::finished:
      return "finished (skipped)";
    case RunState::resume:
      return "unfinished, resumes from its latest checkpoint";
    case RunState::fresh:
      return "new";
  }
  return "";
}

// The peak resident memory of one run: the kernel's high-water mark of this process (VmHWM), reset before
// the run by writing 5 to /proc/self/clear_refs. Where the reset fails the mark would be the process's
// (an earlier run's, perhaps), so none is reported.
bool reset_peak_rss() {
  std::ofstream file("/proc/self/clear_refs");
  file << "5";
  file.flush();
  return static_cast<bool>(file);
}

std::optional<int64_t> peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:   253564 kB"
  return std::nullopt;
}

// One run in this process, as opsnn-train --resume auto would train it; its peak RSS goes to
// <run>/experiment.json for the results. Returns the exit code opsnn-train would have.
int train_one(const Run& run, bool show_progress) {
  // A process killed mid-write leaves metrics.jsonl without its last newline; the resumed run's records
  // would be glued to the cut line and lost with it. End the cut line first (readers skip it).
  const fs::path metrics = fs::path(run.run_dir) / "metrics.jsonl";
  std::error_code error;
  if (fs::is_regular_file(metrics, error) && fs::file_size(metrics, error) > 0) {
    std::fstream file(metrics, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-1, std::ios::end);
    if (file.get() != '\n') {
      file.seekp(0, std::ios::end);
      file.put('\n');
    }
  }
  train::TrainerOptions options;
  options.out_dir = run.run_dir;
  options.resume = "auto";
  options.show_progress = show_progress;
  options.stop_requested = &stop_requested;
  const bool measured = reset_peak_rss();
  train::TrainSummary summary;
  {
    train::Trainer trainer(run.config, options);
    summary = trainer.fit();
  }
  const std::optional<int64_t> peak = measured ? peak_rss_bytes() : std::nullopt;
  if (peak) {
    std::ofstream note(fs::path(run.run_dir) / "experiment.json");
    note << nlohmann::json{{"peak_rss_bytes", *peak}}.dump() << "\n";
  }
  return summary.interrupted ? 130 : 0;
}

std::string describe_failure(const std::exception& error) {
  if (dynamic_cast<const ConfigError*>(&error)) return std::string("config error: ") + error.what();
  return std::string("error: ") + error.what();
}

// The child process of --jobs: the same program with --run-index, its output in the run folder.
pid_t spawn_child(const std::vector<std::string>& arguments, const fs::path& log, int threads, int gpu) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  if (gpu >= 0) ::setenv("CUDA_VISIBLE_DEVICES", std::to_string(gpu).c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "opsnn-experiment: cannot start a child process: %s\n", std::strerror(errno));
  ::_exit(1);
}

struct Outcome {
  std::vector<std::string> failed;  // "variant/seedK: message"
  bool interrupted = false;
};

std::string run_label(const Run& run) { return run.variant + "/seed" + std::to_string(run.seed); }

Outcome run_sequentially(const Sweep& sweep, const std::vector<size_t>& pending) {
  Outcome outcome;
  size_t done = 0;
  for (size_t index : pending) {
    const Run& run = sweep.runs[index];
    ++done;
    std::printf("opsnn-experiment: [%zu/%zu] %s: %s -> %s\n", done, pending.size(), run_label(run).c_str(),
                state_text(run_state(run)), run.run_dir.c_str());
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    try {
      if (train_one(run, true) == 130) {
        outcome.interrupted = true;
        break;
      }
      const RunRecord record = read_run(run.run_dir, run.variant, "");
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::string accuracy = "n/a";
      if (record.summary && record.summary->contains("final_test_acc"))
        accuracy = std::to_string((*record.summary)["final_test_acc"].get<double>() * 100.0).substr(0, 5) + "%";
      std::printf("opsnn-experiment: [%zu/%zu] %s: done in %.1f s, final test accuracy %s\n", done, pending.size(),
                  run_label(run).c_str(), seconds, accuracy.c_str());
    } catch (const std::exception& error) {
      outcome.failed.push_back(run_label(run) + ": " + describe_failure(error));
      std::fprintf(stderr, "opsnn-experiment: [%zu/%zu] %s failed: %s\n", done, pending.size(), run_label(run).c_str(),
                   describe_failure(error).c_str());
    }
    std::fflush(stdout);
  }
  return outcome;
}

Outcome run_in_children(const Sweep& sweep, const std::vector<size_t>& pending, const Arguments& args) {
  Outcome outcome;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, static_cast<int>(cores) / args.jobs);
  const int gpus = std::getenv("CUDA_VISIBLE_DEVICES") ? 0 : cuda_device_count();  // a set list is the user's
  std::map<pid_t, std::pair<size_t, int>> running;                                 // pid -> (run index, GPU slot)
  std::vector<bool> gpu_busy(static_cast<size_t>(std::max(gpus, 0)), false);
  size_t next = 0, done = 0;
  bool forwarded = false;
  while (next < pending.size() || !running.empty()) {
    while (!stop_requested && next < pending.size() && running.size() < static_cast<size_t>(args.jobs)) {
      const Run& run = sweep.runs[pending[next]];
      int gpu = -1;
      for (int g = 0; g < gpus; ++g)
        if (!gpu_busy[g]) {
          gpu = g;
          break;
        }
      if (gpus > 0 && gpu < 0) break;  // one run per GPU
      std::vector<std::string> arguments{
          "opsnn-experiment",           "--config", sweep.path, "--out", sweep.out_dir, "--run-index",
          std::to_string(pending[next])};
      for (const std::string& value : args.overrides) arguments.insert(arguments.end(), {"--set", value});
      std::error_code error;
      fs::create_directories(run.run_dir, error);
      const fs::path log = fs::path(run.run_dir) / "experiment.log";
      std::printf("opsnn-experiment: [%zu/%zu started] %s: %s -> %s (output in %s)\n", next + 1, pending.size(),
                  run_label(run).c_str(), state_text(run_state(run)), run.run_dir.c_str(), log.c_str());
      std::fflush(stdout);
      const pid_t pid = spawn_child(arguments, log, threads, gpu);
      if (pid < 0) throw Error(std::string("cannot start a child process: ") + std::strerror(errno));
      if (gpu >= 0) gpu_busy[gpu] = true;
      running[pid] = {pending[next], gpu};
      ++next;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno != EINTR) break;
      if (stop_requested && !forwarded) {  // a kill of this process alone: the children save and stop too
        for (const auto& [child, slot] : running) ::kill(child, SIGINT);
        forwarded = true;
      }
      continue;
    }
    const auto found = running.find(pid);
    if (found == running.end()) continue;
    const Run& run = sweep.runs[found->second.first];
    if (found->second.second >= 0) gpu_busy[found->second.second] = false;
    running.erase(found);
    ++done;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 0) {
      std::printf("opsnn-experiment: [%zu/%zu done] %s\n", done, pending.size(), run_label(run).c_str());
    } else if (code == 130) {
      outcome.interrupted = true;
      std::printf("opsnn-experiment: [%zu/%zu] %s interrupted (checkpoint saved)\n", done, pending.size(),
                  run_label(run).c_str());
    } else {
      outcome.failed.push_back(run_label(run) + ": exit code " + std::to_string(code) + ", see " + run.run_dir +
                               "/experiment.log");
      std::fprintf(stderr, "opsnn-experiment: [%zu/%zu] %s failed (exit code %d, see %s/experiment.log)\n", done,
                   pending.size(), run_label(run).c_str(), code, run.run_dir.c_str());
    }
    std::fflush(stdout);
  }
  if (stop_requested) outcome.interrupted = true;
  return outcome;
}

// tools/plot_metrics.py beside an installed program (<prefix>/share/opsnn/tools/), else in the sources
// this program was built from.
std::string find_plot_script() {
  std::error_code error;
  const fs::path program = fs::read_symlink("/proc/self/exe", error);
  std::vector<fs::path> candidates;
  if (!error)
    candidates.push_back(program.parent_path().parent_path() / "share" / "opsnn" / "tools" / "plot_metrics.py");
  candidates.push_back(fs::path(OPSNN_TOOLS_SOURCE_DIR) / "plot_metrics.py");
  for (const fs::path& candidate : candidates)
    if (fs::is_regular_file(candidate, error)) return candidate.string();
  return {};
}

// curves.png through tools/plot_metrics.py; a missing python3 or matplotlib is a note, not a failure (the
// tables are the record; the plot can be made later with the command the note gives).
void plot(const fs::path& dir, const std::string& experiment, const Provenance& provenance) {
  const std::string script = find_plot_script();
  const fs::path out = dir / "curves.png";
  if (script.empty()) {
    std::printf("opsnn-experiment: curves.png skipped: tools/plot_metrics.py not found\n");
    return;
  }
  const std::string title = experiment + ": " + provenance.machine + ", " + provenance.date + "\n" + provenance.command;
  const std::string arguments = shell_quote(script) + " --experiment " + shell_quote(dir.string()) + " --out " +
                                shell_quote(out.string()) + " --title " + shell_quote(title);
  // The python3 on PATH, else the distribution's (where python3-matplotlib installs, and which a pyenv or
  // virtual environment on PATH hides).
  std::string python;
  for (const char* candidate : {"python3", "/usr/bin/python3"}) {
    if (std::system((std::string(candidate) + " -c 'import matplotlib' > /dev/null 2>&1").c_str()) == 0) {
      python = candidate;
      break;
    }
  }
  const std::string command = (python.empty() ? std::string("python3") : python) + " " + arguments;
  if (python.empty()) {
    std::printf(
        "opsnn-experiment: curves.png skipped: needs python3 with matplotlib (apt install python3-matplotlib);"
        " then: %s\n",
        command.c_str());
    return;
  }
  std::fflush(stdout);
  if (std::system(command.c_str()) != 0)
    std::fprintf(stderr, "opsnn-experiment: plotting failed: %s\n", command.c_str());
}

int collect(const Arguments& args, const std::string& command) {
  const fs::path dir(args.collect_dir);
  const std::vector<RunRecord> runs = collect_runs(dir);
  if (runs.empty())
    throw DataError(args.collect_dir + ": no run folders (expected " + args.collect_dir +
                    "/<variant>/seed<k>/metrics.jsonl)");
  const Provenance provenance = current_provenance(command);
  const std::string name = fs::absolute(dir).lexically_normal().filename().string();
  const size_t variants = write_results(dir, name.empty() ? "experiment" : name, runs, provenance);
  std::printf("opsnn-experiment: %zu runs, %zu variants with a finished run: %s, %s\n", runs.size(), variants,
              (dir / "results.csv").c_str(), (dir / "results.md").c_str());
  if (!args.no_plot) plot(dir, name, provenance);
  return 0;
}

int run_sweep(const Arguments& args, const std::string& command) {
  const Sweep sweep = load_sweep(args.sweep_path, args.overrides, args.out_dir);
  if (args.run_index >= 0) {  // a child of --jobs
    if (static_cast<size_t>(args.run_index) >= sweep.runs.size())
      throw UsageError("--run-index " + std::to_string(args.run_index) + " is past the sweep's " +
                       std::to_string(sweep.runs.size()) + " runs");
    catch_interrupt();
    return train_one(sweep.runs[static_cast<size_t>(args.run_index)], false);
  }
  std::vector<size_t> pending;
  size_t finished = 0;
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    const RunState state = run_state(sweep.runs[i]);
    if (args.dry_run)
      std::printf("%zu/%zu %s -> %s: %s\n", i + 1, sweep.runs.size(), run_label(sweep.runs[i]).c_str(),
                  sweep.runs[i].run_dir.c_str(), state == RunState::finished ? "finished" : state_text(state));
    if (state == RunState::finished)
      ++finished;
    else
      pending.push_back(i);
  }
  if (args.dry_run) {
    std::printf("%zu runs (%zu variants x %zu seeds), %zu finished, %zu to run, in %s\n", sweep.runs.size(),
                sweep.variants.size(), sweep.runs.size() / std::max<size_t>(1, sweep.variants.size()), finished,
                pending.size(), sweep.out_dir.c_str());
    return 0;
  }
  std::printf("opsnn-experiment: %s: %zu runs, %zu finished (skipped), %zu to run, in %s\n", sweep.name.c_str(),
              sweep.runs.size(), finished, pending.size(), sweep.out_dir.c_str());
  std::fflush(stdout);
  std::error_code error;
  fs::create_directories(sweep.out_dir, error);
  if (error) throw DataError("cannot create " + sweep.out_dir + ": " + error.message());
  catch_interrupt();
  const Outcome outcome = args.jobs > 1 ? run_in_children(sweep, pending, args) : run_sequentially(sweep, pending);

  // The records of this sweep's runs only (the folder may hold other variants, from an earlier sweep).
  std::vector<RunRecord> runs;
  for (const Run& run : sweep.runs)
    if (fs::is_regular_file(fs::path(run.run_dir) / "metrics.jsonl", error))
      runs.push_back(read_run(run.run_dir, run.variant, "seed" + std::to_string(run.seed)));
  const Provenance provenance = current_provenance(command);
  write_results(sweep.out_dir, sweep.name, runs, provenance);
  std::printf("opsnn-experiment: results in %s/results.csv and %s/results.md\n", sweep.out_dir.c_str(),
              sweep.out_dir.c_str());
  if (!args.no_plot) plot(sweep.out_dir, sweep.name, provenance);
  if (outcome.interrupted) {
    std::fprintf(stderr, "opsnn-experiment: interrupted; run the same command again to resume\n");
    return 130;
  }
  if (!outcome.failed.empty()) {
    std::fprintf(stderr, "opsnn-experiment: %zu of %zu runs failed:\n", outcome.failed.size(), pending.size());
    for (const std::string& failure : outcome.failed) std::fprintf(stderr, "  %s\n", failure.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  opsnn::register_builtins();
  try {
    Arguments args;
    try {
      args = parse_arguments(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::fputs(kUsage, stdout);
      return 0;
    } catch (const CLI::CallForVersion&) {
      std::printf("opsnn-experiment %s\n", OPSNN_VERSION_STRING);
      return 0;
    }
    const std::string command = command_line(argc, argv);
    return args.collect_dir.empty() ? run_sweep(args, command) : collect(args, command);
  } catch (const opsnn::UsageError& error) {
    std::fprintf(stderr, "opsnn-experiment: %s\n", error.what());
    return 2;
  } catch (const opsnn::ConfigError& error) {
    std::fprintf(stderr, "opsnn-experiment: config error: %s\n", error.what());
    return 2;
  } catch (const opsnn::Error& error) {
    std::fprintf(stderr, "opsnn-experiment: error: %s\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "opsnn-experiment: unexpected error: %s\n", error.what());
    return 1;
  }
}
