// libFuzzer target: a checkpoint's state.json (opsnn::train::parse_checkpoint_state). state.json guards
// itself with a CRC of its content, so almost every mutation would stop at that first check; each input
// is therefore read twice: as given (the JSON parser and the CRC check), and, when it is a JSON object,
// with its state_crc32 recomputed, so the field checks behind the CRC are fuzzed too.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_support.h"
#include "opsnn/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = opsnn::fuzz::as_text(data, size);
  const std::filesystem::path folder = "runs/fuzz/checkpoint";
  opsnn::fuzz::expect_clean_refusal([&] { opsnn::train::parse_checkpoint_state(text, "state.json", folder); });
  // Values nested deeper than the reader's own limit are dropped here (dumping them recurses), and text
  // that is not valid UTF-8 cannot be dumped: both stay with the first read.
  const auto shallow = [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) { return depth <= 64; };
  nlohmann::json state = nlohmann::json::parse(text, shallow, /*allow_exceptions=*/false);
  if (!state.is_object()) return 0;
  std::string resealed;
  try {
    state.erase("state_crc32");
    state["state_crc32"] = opsnn::train::crc32_of(state.dump());
    resealed = state.dump();
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  opsnn::fuzz::expect_clean_refusal([&] { opsnn::train::parse_checkpoint_state(resealed, "state.json", folder); });
  return 0;
}
