// opsnn-train: trains what a YAML config describes, or (--eval-only) evaluates a checkpoint of it. A thin
// command line over opsnn::train::Trainer.
// Exit codes: 0 success, 2 usage or config errors, 1 runtime failures (missing data, divergence stopped
// by the monitor, corrupt checkpoints), 130 interrupted by SIGINT after saving a checkpoint.
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/opsnn.h"
#include "opsnn/train/config.h"
#include "opsnn/train/trainer.h"

namespace {

std::atomic<bool> stop_requested{false};

extern "C" void on_interrupt(int) {
  if (stop_requested.exchange(true)) std::_Exit(130);  // a second Ctrl-C stops at once
}

constexpr const char* kUsage = R"(usage: opsnn-train [--config FILE] [--set key.path=value]... [--out DIR]
                   [--resume PATH|auto] [--eval-only] [--print-config] [--help] [--version]

Trains the model a YAML config describes and writes a run folder: config.yaml (resolved), train.log,
metrics.jsonl (one JSON object per line) and checkpoints/.

options:
  --config FILE        the training config (configs/*.yaml; every key is documented in
                       @REFERENCE@). Without it, the embedded configs/quickstart.yaml.
  --set key.path=value override one config key, e.g. --set optimizer.lr=3e-4 --set train.epochs=2
                       (value parsed as YAML: numbers, true/false, [lists]); repeatable
  --out DIR            the run folder (default: run.out_dir, else runs/<config name>)
  --resume PATH|auto   continue from a checkpoint folder (or its state.json); auto = the newest
                       checkpoint in the run folder, or a fresh start when there is none
  --eval-only          with --resume: evaluate the checkpoint's model on the test split once (test
                       loss, top-1 and top-5 accuracy, logged and added to metrics.jsonl as an "eval"
                       record); nothing is trained and the checkpoint is left as it is
  --print-config       print the resolved config as YAML and exit
  --help               this text
  --version            the opsnn version

exit codes: 0 done, 1 runtime failure (data, checkpoint, divergence; --eval-only --resume auto
            without a checkpoint), 2 usage or config error (--eval-only without --resume),
            130 interrupted (Ctrl-C saves a checkpoint first; --resume auto continues)
)";

// The usage text, naming the reference config where this opsnn-train finds it: beside an installed
// program in <prefix>/share/opsnn/configs/, else (a build tree) the repository's configs/.
std::string usage() {
  std::string reference = "configs/reference.yaml";
  std::error_code error;
  const std::filesystem::path program = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path installed =
        program.parent_path().parent_path() / "share" / "opsnn" / "configs" / "reference.yaml";
    if (std::filesystem::is_regular_file(installed, error)) reference = installed.lexically_normal().string();
  }
  std::string text = kUsage;
  text.replace(text.find("@REFERENCE@"), std::strlen("@REFERENCE@"), reference);
  return text;
}

struct Arguments {
  std::string config_path, out_dir, resume;
  std::vector<std::string> overrides;
  bool print_config = false;
  bool eval_only = false;
};

// The command line through CLI11 ("--flag value" and "--flag=value"). CLI11 reports unknown options,
// stray words and missing values; the checks after parsing keep two promises it has no words for: an
// empty value is refused (it would read as "not given": --config "" would train the embedded
// quickstart), and --config, --out and --resume name one thing each (a second would silently replace
// the first). --help and --version are CLI::CallForHelp / CallForVersion, for main to answer.
Arguments parse_arguments(int argc, char** argv) {
  CLI::App app("opsnn-train");
  app.set_help_flag("--help,-h");
  app.set_version_flag("--version", std::string("opsnn-train ") + OPSNN_VERSION_STRING);
  std::vector<std::string> config, out, resume, overrides;
  bool print_config = false, eval_only = false;
  app.add_option("--config", config)->allow_extra_args(false);
  app.add_option("--set", overrides)->allow_extra_args(false);
  app.add_option("--out", out)->allow_extra_args(false);
  app.add_option("--resume", resume)->allow_extra_args(false);
  app.add_flag("--print-config", print_config)->disable_flag_override();
  app.add_flag("--eval-only", eval_only)->disable_flag_override();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    throw;
  } catch (const CLI::CallForVersion&) {
    throw;
  } catch (const CLI::ArgumentMismatch& error) {
    // "--config: 1 required TEXT missing" (also for --config=): the option before the colon lacks its value.
    const std::string text = error.what();
    throw opsnn::UsageError(text.substr(0, text.find(':')) + " needs a value (see opsnn-train --help)");
  } catch (const CLI::ParseError& error) {
    throw opsnn::UsageError(std::string(error.what()) + " (see opsnn-train --help)");
  }
  Arguments args;
  auto take_once = [](const char* flag, const std::vector<std::string>& given, std::string& target) {
    for (const std::string& value : given)
      if (value.empty()) throw opsnn::UsageError(std::string(flag) + " needs a value, got an empty one");
    if (given.size() > 1)
      throw opsnn::UsageError(std::string(flag) + " given twice ('" + given[0] + "' and '" + given[1] +
                              "'); give it once");
    if (!given.empty()) target = given[0];
  };
  take_once("--config", config, args.config_path);
  take_once("--out", out, args.out_dir);
  take_once("--resume", resume, args.resume);
  for (const std::string& value : overrides)
    if (value.empty()) throw opsnn::UsageError("--set needs a value, got an empty one");
  args.overrides = std::move(overrides);
  args.print_config = print_config;
  args.eval_only = eval_only;
  if (eval_only && args.resume.empty())
    throw opsnn::UsageError("--eval-only needs --resume PATH|auto: the checkpoint to evaluate");
  return args;
}

}  // namespace

// Prints the error (naming the rank in a distributed run) and returns the exit code; under mpirun a rank
// that fails ends the whole job with that code, instead of leaving the others waiting for it.
static int fail(int exit_code, const char* kind, const char* message) {
  std::fprintf(stderr, "opsnn-train%s: %s%s\n", opsnn::dist::rank_label().c_str(), kind, message);
  std::fflush(stderr);
  opsnn::dist::end_job_after_error(exit_code);
  return exit_code;
}

int main(int argc, char** argv) {
  opsnn::register_builtins();
  try {
    Arguments args;
    try {
      args = parse_arguments(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::fputs(usage().c_str(), stdout);
      return 0;
    } catch (const CLI::CallForVersion&) {
      std::printf("opsnn-train %s\n", OPSNN_VERSION_STRING);
      return 0;
    }
    opsnn::train::TrainConfig config = args.config_path.empty()
                                           ? opsnn::train::load_default_config(args.overrides)
                                           : opsnn::train::load_config(args.config_path, args.overrides);
    if (args.print_config) {
      std::fputs(opsnn::train::emit_config(config).c_str(), stdout);
      return 0;
    }
    opsnn::train::TrainerOptions options;
    options.out_dir = args.out_dir;
    options.resume = args.resume;
    if (args.eval_only) {  // no SIGINT handler: Ctrl-C ends an evaluation at once, there is nothing to save
      options.eval_only = true;
      opsnn::train::Trainer trainer(std::move(config), options);
      trainer.evaluate();
      return 0;
    }
    std::signal(SIGINT, on_interrupt);
    options.stop_requested = &stop_requested;
    opsnn::train::Trainer trainer(std::move(config), options);
    opsnn::train::TrainSummary summary = trainer.fit();
    return summary.interrupted ? 130 : 0;
  } catch (const opsnn::UsageError& error) {
    return fail(2, "", error.what());
  } catch (const opsnn::ConfigError& error) {
    return fail(2, "config error: ", error.what());
  } catch (const opsnn::Error& error) {
    return fail(1, "error: ", error.what());
  } catch (const std::exception& error) {
    return fail(1, "unexpected error: ", error.what());
  }
}
