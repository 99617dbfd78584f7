// libFuzzer target: the YAML config loader with --set overrides (opsnn::train::load_config_text). The
// input is the YAML text, optionally followed by a NUL byte and newline-separated key.path=value
// overrides, so both the document and the override parser are exercised together.
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "opsnn/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input = opsnn::fuzz::as_text(data, size);
  const size_t split = input.find('\0');
  std::string yaml(input.substr(0, split));
  std::vector<std::string> overrides;
  if (split != std::string_view::npos) {
    std::string_view rest = input.substr(split + 1);
    while (!rest.empty()) {
      const size_t end = rest.find('\n');
      overrides.emplace_back(rest.substr(0, end));
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    }
  }
  opsnn::train::TrainConfig config;
  if (!opsnn::fuzz::expect_clean_refusal(
          [&] { config = opsnn::train::load_config_text(yaml, "fuzz.yaml", overrides); }))
    return 0;
  // An accepted config survives its own round trip (emit_config promises load(emit(c)) == c; the run
  // name stays: emit writes it out).
  opsnn::fuzz::expect_success([&] {
    if (!(opsnn::train::load_config_text(opsnn::train::emit_config(config), "fuzz-emitted.yaml") == config))
      throw std::runtime_error("load_config_text(emit_config(c)) differs from c");
  });
  return 0;
}
