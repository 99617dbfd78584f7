// opsnn-bench: performance measurements, each a subcommand (ops, optim, ...) registered from tools/bench/.
// Every number is printed next to a baseline measured in the same run.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "opsnn/core/error.h"

namespace opsnn::bench {

std::vector<Command>& commands() {
  static std::vector<Command> registered;
  return registered;
}

Registration::Registration(Command command) { commands().push_back(std::move(command)); }

std::string option(const std::vector<std::string>& args, const std::string& key, const std::string& fallback) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == key) return args[i + 1];
  return fallback;
}

}  // namespace opsnn::bench

static void print_usage() {
  std::printf("usage: opsnn-bench <command> [options]\n\ncommands:\n");
  for (const auto& command : opsnn::bench::commands())
    std::printf("  %-10s %s\n", command.name.c_str(), command.help.c_str());
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  std::string name = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& command : opsnn::bench::commands()) {
    if (command.name != name) continue;
    try {
      return command.run(args);
    } catch (const opsnn::ConfigError& error) {
      std::fprintf(stderr, "opsnn-bench %s: %s\n", name.c_str(), error.what());
      return 2;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "opsnn-bench %s: %s\n", name.c_str(), error.what());
      return 1;
    }
  }
  std::fprintf(stderr, "opsnn-bench: unknown command '%s'\n\n", name.c_str());
  print_usage();
  return 2;
}
