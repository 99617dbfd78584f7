// Private to the config loader: the schema (one entry per leaf key, in emission order) with each key's
// reader, writer and expectation text, plus the error-location helpers the readers share.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/printable.h"
#include "opsnn/train/config.h"

namespace opsnn::train::detail {

// Where a YAML node came from: FILE:LINE:COL, or the --set argument that supplied it.
struct Origin {
  std::string source;          // file name, or "--set key=value"
  int line = -1, column = -1;  // 0-based as yaml-cpp reports them; -1 when unknown
  std::string text() const;    // "FILE:LINE:COL" (1-based) or "--set ..."
};

// The location of `node` within `base` (the origin of the document or --set value holding it).
Origin origin_of(const YAML::Node& node, const Origin& base);

// Throws ConfigError "ORIGIN: key 'PATH': MESSAGE".
[[noreturn]] void fail(const Origin& origin, const std::string& path, const std::string& message);

// A short rendering of a node for "got ..." in messages: the scalar as written, or its kind.
std::string describe(const YAML::Node& node);

struct KeySpec {
  std::string path;      // "optimizer.lr"
  std::string expected;  // "a positive number", "one of: sgd, adam, adamw, lamb", ...
  // Validates `node` (at `origin`) and stores it into the config; throws via fail().
  std::function<void(const YAML::Node& node, const Origin& origin, TrainConfig& config)> read;
  // The value as a YAML flow scalar or list.
  std::function<std::string(const TrainConfig& config)> write;
};

// Upper bounds of the synthetic data and table keys (config_schema.cpp says why). The image extents are
// bounded each and, in check_consistency, as a product; the CTR vocabularies each and in total.
inline constexpr int64_t kMaxSyntheticSamples = 2147483647;            // 2^31 - 1
inline constexpr int64_t kMaxSyntheticImageExtent = 65536;             // channels, height, width
inline constexpr int64_t kMaxSyntheticImageValues = int64_t{1} << 28;  // 1 GiB of f32 per image
inline constexpr int64_t kMaxCtrVocabulary = int64_t{1} << 26;         // 512 MiB of planted f64 weights
// dlrm's table: each field's rows bounded by model.hash_buckets' key, rows x embedding_dim in check_consistency.
inline constexpr int64_t kMaxDlrmBuckets = int64_t{1} << 40;
inline constexpr int64_t kMaxDlrmTableValues = int64_t{1} << 36;  // 256 GiB of f32, past any one machine

// configs/quickstart.yaml, compiled in by CMake (config_quickstart.cpp.in).
extern const char* const kQuickstartYaml;

// Every leaf key, grouped by section in emission order.
const std::vector<KeySpec>& schema();
// The sections ("", "optimizer", "optimizer.settings", ...) and the names directly under each.
bool is_section(const std::string& path);
const std::vector<std::string>& section_children(const std::string& section);

// Formatting shared by writers and messages.
std::string format_number(double value);
std::string format_string(const std::string& value);

// A --set style override and where it was written, for messages: opsnn-experiment passes the
// FILE:LINE:COL of a sweep file's value so that an error names the sweep, not a command line.
struct LocatedOverride {
  std::string argument;  // "key.path=value" (value parsed as YAML)
  std::string origin;    // shown where an error names the override; "" = "--set key.path=value"
};
// load_config with located overrides, applied in order after the file's own keys.
TrainConfig load_config_located(const std::string& path, const std::vector<LocatedOverride>& overrides);

// The config loader's file and YAML reading, for other YAML files validated the same way (sweep files):
// a regular file of at most 16 MiB (`what` names it in messages), and its one YAML document, refusing
// malformed YAML, a second document and the inputs yaml-cpp 0.7 would loop on; ConfigError with
// FILE:LINE:COL. An empty text gives a null node.
std::string read_yaml_file(const std::string& path, const char* what);
YAML::Node parse_yaml_document(const std::string& text, const std::string& source);

// Levenshtein distance, case-insensitive.
size_t edit_distance(const std::string& a, const std::string& b);
// The closest of `candidates` to `word` when close enough to be a plausible typo, else "".
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace opsnn::train::detail
