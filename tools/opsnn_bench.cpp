// opsnn-bench: performance measurements, each a subcommand (ops, optim, ...) registered from tools/bench/.
// Every number is printed next to a baseline measured in the same run.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "opsnn/core/error.h"
#include "opsnn/opsnn.h"

namespace opsnn::bench {

std::vector<Command>& commands() {
  static std::vector<Command> registered;
  return registered;
}

Registration::Registration(Command command) { commands().push_back(std::move(command)); }

// The value of `--key value` or `--key=value` (check_options accepts both, CLI11 being the judge).
std::string option(const std::vector<std::string>& args, const std::string& key, const std::string& fallback) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == key && i + 1 < args.size()) return args[i + 1];
    if (args[i].size() > key.size() && args[i].compare(0, key.size(), key) == 0 && args[i][key.size()] == '=')
      return args[i].substr(key.size() + 1);
  }
  return fallback;
}

// Parsed by CLI11: each value option takes one value per occurrence and flags none. CLI11 collects
// what it does not know (allow_extras) so the message can say whether it is an unknown option or a
// stray word and list the known options; the checks after parsing keep the promises CLI11 has no words
// for (an option once, a value never empty: either would silently leave the default in place).
void check_options(const std::vector<std::string>& args, const std::vector<std::string>& with_value,
                   const std::vector<std::string>& flags) {
  std::string known;
  for (const auto* names : {&with_value, &flags})
    for (const std::string& name : *names) known += (known.empty() ? "" : ", ") + name;
  CLI::App app;
  app.set_help_flag();
  app.allow_extras();
  std::map<std::string, std::vector<std::string>> values;
  for (const std::string& name : with_value) app.add_option(name, values[name])->allow_extra_args(false);
  for (const std::string& name : flags) app.add_flag(name)->disable_flag_override();
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes the arguments last first
  try {
    app.parse(reversed);
  } catch (const CLI::ArgumentMismatch& error) {
    // "--sizes: 1 required TEXT missing": the option before the colon lacks its value.
    const std::string text = error.what();
    throw ConfigError(text.substr(0, text.find(':')) + " needs a value");
  } catch (const CLI::ParseError& error) {
    throw ConfigError(std::string(error.what()) + " (options: " + known + ")");
  }
  for (const auto& [name, given] : values) {
    if (given.size() > 1) throw ConfigError(name + " given twice");
    // CLI11 takes "--sizes --repeats 1" as --sizes=--repeats; no value of these options starts with --.
    if (!given.empty() && given.front().rfind("--", 0) == 0) throw ConfigError(name + " needs a value");
    if (!given.empty() && given.front().empty()) throw ConfigError(name + " needs a value, got an empty one");
  }
  if (const std::vector<std::string> unknown = app.remaining(); !unknown.empty()) {
    const std::string& arg = unknown.front();
    throw ConfigError((arg.rfind('-', 0) == 0 ? "unknown option '" : "unexpected argument '") + arg +
                      "' (options: " + known + ")");
  }
  for (const std::string& name : flags)
    if (app.count(name) > 1) throw ConfigError(name + " given twice");
}

int parse_positive(const std::vector<std::string>& args, const std::string& key, int fallback) {
  const std::string text = option(args, key, std::to_string(fallback));
  int value = 0;
  // The whole text must be the number: stoi read 1e9 as 1 and 2abc as 2.
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  OPSNN_CHECK_AS(ConfigError, error == std::errc() && end == text.data() + text.size() && value > 0, key,
                 " must be a positive integer, got '", text, "'");
  return value;
}

std::vector<std::string> split(const std::string& text, const std::string& key) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(text.find(',', start), text.size());
    OPSNN_CHECK_AS(ConfigError, end > start, key, ": empty entry in '", text, "' (expected a comma-separated list)");
    parts.push_back(text.substr(start, end - start));
    if (end == text.size()) return parts;
    start = end + 1;
  }
}

}  // namespace opsnn::bench

static void print_usage() {
  std::printf("usage: opsnn-bench <command> [options]\n\ncommands:\n");
  for (const auto& command : opsnn::bench::commands())
    std::printf("  %-10s %s\n", command.name.c_str(), command.help.c_str());
}

int main(int argc, char** argv) {
  opsnn::register_builtins();
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
