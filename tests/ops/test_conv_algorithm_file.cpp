// ops::save_conv_algorithms / load_conv_algorithms on any machine: the document save writes reads
// back (every entry then counts as skipped: this process has decided those shapes already), an entry
// for a GPU this machine does not have is skipped, and each kind of malformed document is a DataError
// naming the origin and the field. The GPU side (entries that apply and are used) is in
// tests/ops/cuda/test_conv.cpp.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/ops/backend.h"
#include "support/catch.h"

using namespace opsnn;
using Json = nlohmann::json;

namespace {

Json valid_entry() {
  return Json{{"device", "No Such GPU"}, {"cudnn_version", 91400},
              {"direction", "forward"},  {"input", {2, 8, 9, 9}},
              {"weight", {16, 8, 3, 3}}, {"stride", {1, 1}},
              {"padding", {1, 1}},       {"channels_last", false},
              {"dtype", "f32"},          {"math", 3},
              {"policy", "measured"},    {"deterministic_setting", true},
              {"lowering", "cudnn"},     {"algorithm", 1},
              {"math_type", 3},          {"workspace_bytes", 0},
              {"cudnn_ms", 0.25},        {"lowered_ms", -1},
              {"deterministic", true},   {"cudnn_deterministic", true}};
}

Json document_with(const Json& entry) {
  return Json{{"format", "opsnn-conv-algorithms"}, {"format_version", 1}, {"entries", Json::array({entry})}};
}

}  // namespace

TEST_CASE("conv algorithm files: save writes a document load reads back", "[ops][conv]") {
  const std::string saved = ops::save_conv_algorithms();
  const Json document = Json::parse(saved);
  REQUIRE(document.at("format") == "opsnn-conv-algorithms");
  REQUIRE(document.at("format_version") == 1);
  REQUIRE(document.at("entries").is_array());
  const ops::ConvAlgorithmLoad load = ops::load_conv_algorithms(saved, "saved.json");
  CHECK(load.applied == 0);  // every shape in it is decided in this process already
  CHECK(load.skipped == document.at("entries").size());
}

TEST_CASE("conv algorithm files: an entry for a GPU this machine lacks is skipped", "[ops][conv]") {
  const ops::ConvAlgorithmLoad load = ops::load_conv_algorithms(document_with(valid_entry()).dump(), "other.json");
  CHECK(load.applied == 0);
  CHECK(load.skipped == 1);
  const ops::ConvAlgorithmLoad empty =
      ops::load_conv_algorithms(R"({"format": "opsnn-conv-algorithms", "format_version": 1, "entries": []})", "e.json");
  CHECK(empty.applied == 0);
  CHECK(empty.skipped == 0);
}

TEST_CASE("conv algorithm files: each malformed document is a DataError naming the file and the field", "[ops][conv]") {
  struct Case {
    std::string name, text, expected;
  };
  auto with_entry_field = [](const char* key, const Json& value) {
    Json entry = valid_entry();
    entry[key] = value;
    return document_with(entry).dump();
  };
  auto without_entry_field = [](const char* key) {
    Json entry = valid_entry();
    entry.erase(key);
    return document_with(entry).dump();
  };
  Json wrong_format = document_with(valid_entry());
  wrong_format["format"] = "opsnn-checkpoint";
  Json wrong_version = document_with(valid_entry());
  wrong_version["format_version"] = 2;
  const std::string truncated = document_with(valid_entry()).dump().substr(0, 60);
  const std::vector<Case> cases = {
      {"truncated", truncated, "not valid JSON"},
      {"not an object", "[1, 2]", "expected a JSON object"},
      {"another format", wrong_format.dump(), "field \"format\": expected \"opsnn-conv-algorithms\""},
      {"another version", wrong_version.dump(), "field \"format_version\": version 2 is not supported"},
      {"entries not a list", R"({"format": "opsnn-conv-algorithms", "format_version": 1, "entries": {}})",
       "field \"entries\": expected an array"},
      {"entry not an object", R"({"format": "opsnn-conv-algorithms", "format_version": 1, "entries": [3]})",
       "field \"entries[0]\": expected an object"},
      {"unknown field", with_entry_field("algo", 1), "field \"entries[0].algo\": unknown field"},
      {"missing field", without_entry_field("lowering"), "field \"entries[0].lowering\": missing"},
      {"string for a number", with_entry_field("algorithm", "1"),
       "field \"entries[0].algorithm\": expected an integer"},
      {"negative algorithm", with_entry_field("algorithm", -1), "field \"entries[0].algorithm\": negative"},
      {"unknown direction", with_entry_field("direction", "sideways"),
       "field \"entries[0].direction\": unknown value \"sideways\" (accepted: forward, backward_input, "
       "backward_weight)"},
      {"unknown lowering", with_entry_field("lowering", "fft"), "field \"entries[0].lowering\": unknown value \"fft\""},
      {"unknown dtype", with_entry_field("dtype", "i32"), "field \"entries[0].dtype\": unknown value \"i32\""},
      {"three-dimensional input", with_entry_field("input", Json::array({2, 8, 9})),
       "field \"entries[0].input\": expected 4 integers, found 3"},
      {"empty weight dimension", with_entry_field("weight", Json::array({16, 8, 0, 3})),
       "field \"entries[0].weight\": expected integers of at least 1, found 0"},
      {"zero stride", with_entry_field("stride", Json::array({0, 1})),
       "field \"entries[0].stride\": expected integers of at least 1, found 0"},
      {"negative padding", with_entry_field("padding", Json::array({1, -1})),
       "field \"entries[0].padding\": expected integers of at least 0, found -1"},
      {"number for a flag", with_entry_field("channels_last", 1),
       "field \"entries[0].channels_last\": expected true or false"},
      {"negative workspace", with_entry_field("workspace_bytes", -5),
       "field \"entries[0].workspace_bytes\": integer -5 is out of range"},
      // Refused while parsing: a recursive walk (dump() for a message) would overflow the stack.
      {"nested 100000 deep",
       R"({"format": "opsnn-conv-algorithms", "format_version": 1, "entries": [)" + std::string(100000, '[') +
           std::string(100000, ']') + "]}",
       "nested deeper than 64 levels"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    try {
      ops::load_conv_algorithms(c.text, "algos.json");
      FAIL("no error for: " << c.name);
    } catch (const DataError& error) {
      const std::string message = error.what();
      CHECK(message.rfind("algos.json: ", 0) == 0);
      CHECK_THAT(message, Catch::Contains(c.expected));
    }
  }
}
