// ops::save_conv_algorithms / load_conv_algorithms: the GPU convolution choices as JSON,
//   {"format": "opsnn-conv-algorithms", "format_version": 1, "entries": [
//     {"device": "NVIDIA H200", "cudnn_version": 91400, "direction": "forward", "input": [N, C, H, W],
//      "weight": [K, C, R, S], "stride": [sh, sw], "padding": [ph, pw], "channels_last": false,
//      "dtype": "bf16", "math": 1, "policy": "measured", "deterministic_setting": true,
//      "lowering": "cudnn", "algorithm": 1, "math_type": 1, "workspace_bytes": 0, "cudnn_ms": 0.12,
//      "lowered_ms": -1, "deterministic": true, "cudnn_deterministic": true}, ...]}
// Reading is strict (every field present with its type, no unknown ones); the CUDA backend's store
// (conv_algorithm_store.h) decides which entries apply to this machine.
#include <array>
#include <cmath>
#include <set>

#include "core/json_reader.h"
#include "ops/conv_algorithm_store.h"
#include "opsnn/core/storage.h"

namespace opsnn::ops {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kFormatName = "opsnn-conv-algorithms";
constexpr int kFormatVersion = 1;

constexpr std::array<std::string_view, 3> kDirections = {"forward", "backward_input", "backward_weight"};
constexpr std::array<std::string_view, 3> kLowerings = {"cudnn", "subsampled", "gemm"};
constexpr std::array<std::string_view, 3> kPolicies = {"measured", "always", "never"};

std::unique_ptr<ConvAlgorithmStore>& store_slot() {
  static std::unique_ptr<ConvAlgorithmStore> store;
  return store;
}

ConvAlgorithmStore* registered_store() {
  (void)cuda_device_count();  // loads the built-in backends, which register the store
  return store_slot().get();
}

template <size_t N, typename Enum>
std::string_view name_of(const std::array<std::string_view, N>& names, Enum value) {
  return names[static_cast<size_t>(value)];
}

Json milliseconds(float value) { return std::isfinite(value) ? Json(value) : Json(-1.0); }

Json encode(const ConvAlgorithmRecord& r) {
  const ConvAlgorithmChoice& c = r.choice;
  return Json{{"device", r.device},
              {"cudnn_version", r.cudnn_version},
              {"direction", name_of(kDirections, r.direction)},
              {"input", r.input},
              {"weight", r.weight},
              {"stride", {r.geometry.stride_h, r.geometry.stride_w}},
              {"padding", {r.geometry.pad_h, r.geometry.pad_w}},
              {"channels_last", r.geometry.channels_last},
              {"dtype", dtype_name(r.dtype)},
              {"math", r.math},
              {"policy", name_of(kPolicies, r.policy)},
              {"deterministic_setting", r.deterministic_setting},
              {"lowering", name_of(kLowerings, c.lowering)},
              {"algorithm", c.algorithm},
              {"math_type", c.math},
              {"workspace_bytes", c.workspace_bytes},
              {"cudnn_ms", milliseconds(c.cudnn_ms)},
              {"lowered_ms", milliseconds(c.lowered_ms)},
              {"deterministic", c.deterministic},
              {"cudnn_deterministic", c.cudnn_deterministic}};
}

// Typed reads of one entry ("entries[i].field" in messages).
class EntryReader : public JsonReader {
 public:
  using JsonReader::JsonReader;

  template <size_t N>
  size_t choice(const Json& entry, const std::string& parent, const char* key,
                const std::array<std::string_view, N>& names) const {
    const std::string value = text(entry, parent, key);
    for (size_t i = 0; i < N; ++i)
      if (names[i] == value) return i;
    std::string accepted;
    for (std::string_view name : names) accepted += (accepted.empty() ? "" : ", ") + std::string(name);
    fail(join(parent, key), "unknown value \"", value, "\" (accepted: ", accepted, ")");
  }

  // An array of exactly N integers, each at least `least`.
  template <size_t N>
  std::array<int64_t, N> integers(const Json& entry, const std::string& parent, const char* key, int64_t least) const {
    const Json& values = array(entry, parent, key);
    if (values.size() != N) fail(join(parent, key), "expected ", N, " integers, found ", values.size());
    std::array<int64_t, N> out{};
    for (size_t i = 0; i < N; ++i) {
      out[i] = integer_value<int64_t>(values[i], join(parent, key));
      if (out[i] < least) fail(join(parent, key), "expected integers of at least ", least, ", found ", out[i]);
    }
    return out;
  }

  ConvAlgorithmRecord record(const Json& entry, const std::string& parent) const {
    static const std::set<std::string> known = {"device",   "cudnn_version", "direction",     "input",
                                                "weight",   "stride",        "padding",       "channels_last",
                                                "dtype",    "math",          "policy",        "deterministic_setting",
                                                "lowering", "algorithm",     "math_type",     "workspace_bytes",
                                                "cudnn_ms", "lowered_ms",    "deterministic", "cudnn_deterministic"};
    if (!entry.is_object()) fail(parent, "expected an object, found ", entry.type_name());
    for (const auto& [key, value] : entry.items())
      if (!known.count(key)) fail(join(parent, key.c_str()), "unknown field");
    ConvAlgorithmRecord r;
    r.device = text(entry, parent, "device");
    r.cudnn_version = integer<int64_t>(entry, parent, "cudnn_version");
    r.direction = static_cast<ConvDirection>(choice(entry, parent, "direction", kDirections));
    const auto input = integers<4>(entry, parent, "input", 1), weight = integers<4>(entry, parent, "weight", 1);
    r.input = Shape(input.begin(), input.end());
    r.weight = Shape(weight.begin(), weight.end());
    const auto stride = integers<2>(entry, parent, "stride", 1), padding = integers<2>(entry, parent, "padding", 0);
    r.geometry.stride_h = stride[0];
    r.geometry.stride_w = stride[1];
    r.geometry.pad_h = padding[0];
    r.geometry.pad_w = padding[1];
    r.geometry.channels_last = boolean(entry, parent, "channels_last");
    const std::string dtype = text(entry, parent, "dtype");
    if (dtype != "f32" && dtype != "f16" && dtype != "bf16")
      fail(join(parent, "dtype"), "unknown value \"", dtype, "\" (accepted: f32, f16, bf16)");
    r.dtype = parse_dtype(dtype);
    r.math = integer<int>(entry, parent, "math");
    r.policy = static_cast<ConvLoweringPolicy>(choice(entry, parent, "policy", kPolicies));
    r.deterministic_setting = boolean(entry, parent, "deterministic_setting");
    ConvAlgorithmChoice& c = r.choice;
    c.lowering = static_cast<ConvLowering>(choice(entry, parent, "lowering", kLowerings));
    c.algorithm = integer<int>(entry, parent, "algorithm");
    c.math = integer<int>(entry, parent, "math_type");
    if (r.math < 0) fail(join(parent, "math"), "negative");
    if (c.algorithm < 0) fail(join(parent, "algorithm"), "negative");
    if (c.math < 0) fail(join(parent, "math_type"), "negative");
    c.workspace_bytes = integer<size_t>(entry, parent, "workspace_bytes");
    c.cudnn_ms = static_cast<float>(real(entry, parent, "cudnn_ms"));
    c.lowered_ms = static_cast<float>(real(entry, parent, "lowered_ms"));
    c.deterministic = boolean(entry, parent, "deterministic");
    c.cudnn_deterministic = boolean(entry, parent, "cudnn_deterministic");
    return r;
  }
};

}  // namespace

void register_conv_algorithm_store(std::unique_ptr<ConvAlgorithmStore> store) { store_slot() = std::move(store); }

std::string save_conv_algorithms() {
  Json entries = Json::array();
  if (ConvAlgorithmStore* store = registered_store())
    for (const ConvAlgorithmRecord& record : store->records()) entries.push_back(encode(record));
  const Json document{{"format", kFormatName}, {"format_version", kFormatVersion}, {"entries", entries}};
  return document.dump(1) + "\n";
}

ConvAlgorithmLoad load_conv_algorithms(std::string_view text, const std::string& origin) {
  const Json document = parse_json_object(text, origin);
  EntryReader reader(origin);
  reader.require_format(document, kFormatName, kFormatVersion, " (not a convolution-algorithm file)");
  const Json& entries = reader.array(document, "", "entries");
  std::vector<ConvAlgorithmRecord> records;
  records.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i)
    records.push_back(reader.record(entries[i], detail::concat("entries[", i, "]")));
  ConvAlgorithmStore* store = registered_store();
  if (store == nullptr) return ConvAlgorithmLoad{0, records.size()};
  return store->insert(records, origin);
}

}  // namespace opsnn::ops
