// opsnn-train: trains what a YAML config describes. A thin command line over opsnn::train::Trainer.
// Exit codes: 0 success, 2 usage or config errors, 1 runtime failures (missing data, divergence stopped
// by the monitor, corrupt checkpoints), 130 interrupted by SIGINT after saving a checkpoint.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/train/config.h"
#include "opsnn/train/trainer.h"

namespace {

std::atomic<bool> stop_requested{false};

extern "C" void on_interrupt(int) {
  if (stop_requested.exchange(true)) std::_Exit(130);  // a second Ctrl-C stops at once
}

constexpr const char* kUsage = R"(usage: opsnn-train [--config FILE] [--set key.path=value]... [--out DIR]
                   [--resume PATH|auto] [--print-config] [--help] [--version]

Trains the model a YAML config describes and writes a run folder: config.yaml (resolved), train.log,
metrics.jsonl (one JSON object per line) and checkpoints/.

options:
  --config FILE        the training config (configs/*.yaml; every key is documented in
                       configs/reference.yaml). Without it, the embedded configs/quickstart.yaml.
  --set key.path=value override one config key, e.g. --set optimizer.lr=3e-4 --set train.epochs=2
                       (value parsed as YAML: numbers, true/false, [lists]); repeatable
  --out DIR            the run folder (default: run.out_dir, else runs/<config name>)
  --resume PATH|auto   continue from a checkpoint folder (or its state.json); auto = the newest
                       checkpoint in the run folder, or a fresh start when there is none
  --print-config       print the resolved config as YAML and exit
  --help               this text
  --version            the opsnn version

exit codes: 0 done, 1 runtime failure (data, checkpoint, divergence), 2 usage or config error,
            130 interrupted (Ctrl-C saves a checkpoint first; --resume auto continues)
)";

struct Arguments {
  std::string config_path, out_dir, resume;
  std::vector<std::string> overrides;
  bool print_config = false;
};

// Accepts "--flag value" and "--flag=value".
Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool inline_value = false;
    if (size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos && arg != "--set") {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    auto take_value = [&](const char* flag) {
      if (!inline_value) {
        if (i + 1 >= argc) throw opsnn::UsageError(std::string(flag) + " needs a value");
        value = argv[++i];
      }
      // An empty value would read as "not given": --config "" would train the embedded quickstart.
      if (value.empty()) throw opsnn::UsageError(std::string(flag) + " needs a value, got an empty one");
      return value;
    };
    // --config, --out and --resume name one thing each: a second one would silently replace the first.
    auto take_once = [&](const char* flag, std::string& target) {
      std::string given = take_value(flag);
      if (!target.empty())
        throw opsnn::UsageError(std::string(flag) + " given twice ('" + target + "' and '" + given + "'); give it once");
      target = given;
    };
    if (arg == "--config") take_once("--config", args.config_path);
    else if (arg == "--set") args.overrides.push_back(take_value("--set"));
    else if (arg == "--out") take_once("--out", args.out_dir);
    else if (arg == "--resume") take_once("--resume", args.resume);
    else if (arg == "--print-config" && !inline_value) args.print_config = true;
    else throw opsnn::UsageError("unknown argument '" + std::string(argv[i]) + "' (see opsnn-train --help)");
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("opsnn-train %s\n", OPSNN_VERSION_STRING);
      return 0;
    }
  }
  try {
    Arguments args = parse_arguments(argc, argv);
    opsnn::train::TrainConfig config = args.config_path.empty()
                                           ? opsnn::train::load_default_config(args.overrides)
                                           : opsnn::train::load_config(args.config_path, args.overrides);
    if (args.print_config) {
      std::fputs(opsnn::train::emit_config(config).c_str(), stdout);
      return 0;
    }
    std::signal(SIGINT, on_interrupt);
    opsnn::train::TrainerOptions options;
    options.out_dir = args.out_dir;
    options.resume = args.resume;
    options.stop_requested = &stop_requested;
    opsnn::train::Trainer trainer(std::move(config), options);
    opsnn::train::TrainSummary summary = trainer.fit();
    return summary.interrupted ? 130 : 0;
  } catch (const opsnn::UsageError& error) {
    std::fprintf(stderr, "opsnn-train: %s\n", error.what());
    return 2;
  } catch (const opsnn::ConfigError& error) {
    std::fprintf(stderr, "opsnn-train: config error: %s\n", error.what());
    return 2;
  } catch (const opsnn::Error& error) {
    std::fprintf(stderr, "opsnn-train: error: %s\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "opsnn-train: unexpected error: %s\n", error.what());
    return 1;
  }
}
