// The config schema: every key with its type, range or allowed values, default (the TrainConfig member
// initialisers) and the reader/writer pair that validates it on load and emits it on save.
#include "train/config_schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <type_traits>

#include "opsnn/core/error.h"
#include "opsnn/data/registry.h"
#include "opsnn/models/models.h"
#include "opsnn/optim/descriptor.h"

namespace opsnn::train {

// ---- the names the config accepts: the registries' built-ins, in their fixed order ----
const std::vector<std::string>& known_model_names() { return models::builtin_model_names(); }
const std::vector<std::string>& known_optimizer_names() { return optim::builtin_optimizer_names(); }
const std::vector<std::string>& known_dataset_names() { return data::builtin_dataset_names(); }

namespace detail {

std::string Origin::text() const {
  if (line < 0) return source;
  return source + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1);
}

Origin origin_of(const YAML::Node& node, const Origin& base) {
  Origin origin = base;
  const YAML::Mark mark = node.Mark();
  if (!mark.is_null() && base.line >= 0) {
    origin.line = mark.line;
    origin.column = mark.column;
  }
  return origin;
}

void fail(const Origin& origin, const std::string& path, const std::string& message) {
  throw ConfigError(origin.text() + ": key '" + path + "': " + message);
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "an empty value";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  if (node.Tag() == "!") return "the quoted string '" + printable(node.Scalar()) + "'";
  return printable(node.Scalar());
}

std::string format_number(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest text that round-trips
  return std::string(buffer, result.ptr);
}

std::string format_string(const std::string& value) {
  static const char* const reserved[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"};
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  bool plain =
      !value.empty() && (std::isalnum(static_cast<unsigned char>(value[0])) || value[0] == '_' || value[0] == '/');
  for (char c : value) {
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/');
  }
  for (const char* word : reserved) plain = plain && lower != word;
  if (plain) return value;
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') quoted += '\\';
    if (c == '\n') {
      quoted += "\\n";
      continue;
    }
    if (c == '\t') {
      quoted += "\\t";
      continue;
    }
    quoted += c;
  }
  return quoted + "\"";
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (same ? 0 : 1)});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  // A plausible typo: within a third of the longer word (at least 2 edits).
  const size_t allowed = std::max<size_t>(2, std::max(word.size(), best.size()) / 3);
  if (!best.empty() && best_distance <= allowed) return best;
  // Or a part of a name ("cosine" for "warmup_cosine"), or a name with something added.
  if (word.size() >= 3) {
    for (const std::string& candidate : candidates) {
      if (candidate.find(word) != std::string::npos ||
          (candidate.size() >= 3 && word.find(candidate) != std::string::npos)) {
        return candidate;
      }
    }
  }
  return "";
}

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// ---- scalar parsing (plain, unquoted scalars only: a quoted "0.1" is a string, not a number) ----

bool is_plain_scalar(const YAML::Node& node) { return node.IsScalar() && node.Tag() != "!"; }

std::optional<double> parse_number(const YAML::Node& node) {
  if (!is_plain_scalar(node)) return std::nullopt;
  double value = 0.0;
  if (!YAML::convert<double>::decode(node, value)) return std::nullopt;
  return value;
}

// Decimal integers, and numbers such as 1e6 whose value is an exact integer.
std::optional<int64_t> parse_integer(const YAML::Node& node) {
  if (!is_plain_scalar(node)) return std::nullopt;
  const std::string& text = node.Scalar();
  const char* begin = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);
  int64_t value = 0;
  auto result = std::from_chars(begin, text.data() + text.size(), value);
  if (result.ec == std::errc() && result.ptr == text.data() + text.size()) return value;
  std::optional<double> number = parse_number(node);
  if (number && std::isfinite(*number) && std::floor(*number) == *number && std::abs(*number) < 9.2e18) {
    return static_cast<int64_t>(*number);
  }
  return std::nullopt;
}

// An integer parse_integer refuses only for its size (18446744073709551615, 1e19): the message says so
// rather than calling a whole number "not an integer >= 0".
bool integer_out_of_range(const YAML::Node& node) {
  if (!is_plain_scalar(node)) return false;
  const std::string& text = node.Scalar();
  const char* begin = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);
  int64_t value = 0;
  auto result = std::from_chars(begin, text.data() + text.size(), value);
  if (result.ptr == text.data() + text.size()) return result.ec == std::errc::result_out_of_range;
  std::optional<double> number = parse_number(node);
  return number && std::isfinite(*number) && std::floor(*number) == *number && std::abs(*number) >= 9.2e18;
}

std::string describe_integer(const YAML::Node& node) {
  return describe(node) + (integer_out_of_range(node) ? ", which is out of range for a 64-bit integer" : "");
}

std::optional<bool> parse_bool(const YAML::Node& node) {
  if (!is_plain_scalar(node)) return std::nullopt;
  bool value = false;
  if (!YAML::convert<bool>::decode(node, value)) return std::nullopt;
  return value;
}

// ---- ranges ----

struct Range {
  double low = -std::numeric_limits<double>::infinity();
  bool low_open = false;
  double high = std::numeric_limits<double>::infinity();
  bool high_open = false;

  static Range any() { return {}; }
  static Range positive() { return {0.0, true}; }
  static Range at_least(double low) { return {low, false}; }
  static Range above(double low) { return {low, true}; }
  static Range closed(double low, double high) { return {low, false, high, false}; }
  static Range half_open(double low, double high) { return {low, false, high, true}; }    // [low, high)
  static Range open_closed(double low, double high) { return {low, true, high, false}; }  // (low, high]
  static Range open(double low, double high) { return {low, true, high, true}; }

  bool contains(double value) const {
    const bool above_low = low_open ? value > low : value >= low;
    const bool below_high = high_open ? value < high : value <= high;
    return above_low && below_high;  // false for NaN
  }
  // "a positive number", "an integer >= 1", "a number in [0, 1)", "an integer in [0, 1000000]".
  std::string text(const char* noun) const {
    const std::string article = noun[0] == 'i' ? "an " : "a ";
    const bool integer = noun[0] == 'i';  // integer bounds in digits: 1000000, not 1e+06
    auto bound = [integer](double value) {
      return integer ? std::to_string(static_cast<long long>(value)) : format_number(value);
    };
    const bool bounded_low = std::isfinite(low), bounded_high = std::isfinite(high);
    if (bounded_low && low == 0.0 && low_open && !bounded_high) return "a positive " + std::string(noun);
    if (bounded_low && bounded_high) {
      return article + noun + " in " + (low_open ? "(" : "[") + bound(low) + ", " + bound(high) +
             (high_open ? ")" : "]");
    }
    if (bounded_low) return article + noun + (low_open ? " > " : " >= ") + bound(low);
    if (bounded_high) return article + noun + (high_open ? " < " : " <= ") + bound(high);
    return article + noun;
  }
};

// ---- key builders. `Field` is a generic lambda returning a reference to the member in a config. ----

template <typename Field>
KeySpec number_key(std::string path, Field field, Range range) {
  std::string expected = range.text("number");
  return {path, expected,
          [path, expected, field, range](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            std::optional<double> value = parse_number(node);
            if (!value || !std::isfinite(*value) || !range.contains(*value)) {
              fail(origin, path, "expected " + expected + ", got " + describe(node));
            }
            field(config) = *value;
          },
          [field](const TrainConfig& config) { return format_number(field(config)); }};
}

template <typename Field>
KeySpec optional_number_key(std::string path, Field field, Range range) {
  std::string expected = range.text("number") + " or null";
  return {path, expected,
          [path, expected, field, range](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            if (node.IsNull()) {
              field(config).reset();
              return;
            }
            std::optional<double> value = parse_number(node);
            if (!value || !std::isfinite(*value) || !range.contains(*value)) {
              fail(origin, path, "expected " + expected + ", got " + describe(node));
            }
            field(config) = *value;
          },
          [field](const TrainConfig& config) {
            return field(config).has_value() ? format_number(*field(config)) : std::string("null");
          }};
}

template <typename Field>
KeySpec integer_key(std::string path, Field field, Range range) {
  std::string expected = range.text("integer");
  return {path, expected,
          [path, expected, field, range](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            std::optional<int64_t> value = parse_integer(node);
            if (!value || !range.contains(static_cast<double>(*value))) {
              fail(origin, path, "expected " + expected + ", got " + describe_integer(node));
            }
            using Target = std::remove_reference_t<decltype(field(config))>;
            field(config) = static_cast<Target>(*value);
          },
          [field](const TrainConfig& config) { return std::to_string(field(config)); }};
}

template <typename Field>
KeySpec bool_key(std::string path, Field field) {
  return {path, "true or false",
          [path, field](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            std::optional<bool> value = parse_bool(node);
            if (!value) fail(origin, path, "expected true or false, got " + describe(node));
            field(config) = *value;
          },
          [field](const TrainConfig& config) { return std::string(field(config) ? "true" : "false"); }};
}

// true, false, or auto (stored as nullopt).
template <typename Field>
KeySpec auto_bool_key(std::string path, Field field) {
  return {path, "true, false or auto",
          [path, field](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            if (is_plain_scalar(node) && node.Scalar() == "auto") {
              field(config).reset();
              return;
            }
            std::optional<bool> value = parse_bool(node);
            if (!value) fail(origin, path, "expected true, false or auto, got " + describe(node));
            field(config) = *value;
          },
          [field](const TrainConfig& config) {
            return std::string(!field(config).has_value() ? "auto" : *field(config) ? "true" : "false");
          }};
}

std::optional<std::string> parse_string(const YAML::Node& node) {
  if (!node.IsScalar()) return std::nullopt;
  return node.Scalar();
}

template <typename Field>
KeySpec string_key(std::string path, Field field, bool allow_empty = true) {
  std::string expected = allow_empty ? "a string" : "a non-empty string";
  return {path, expected,
          [path, expected, field, allow_empty](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            std::optional<std::string> value = node.IsNull() && allow_empty ? std::string() : parse_string(node);
            if (!value || (!allow_empty && value->empty()))
              fail(origin, path, "expected " + expected + ", got " + describe(node));
            field(config) = *value;
          },
          [field](const TrainConfig& config) { return format_string(field(config)); }};
}

// A string from a fixed list; `choices` is called on use so registries can supply it.
template <typename Field>
KeySpec choice_key(std::string path, Field field, std::function<std::vector<std::string>()> choices) {
  std::string expected = "one of: " + join(choices());
  return {path, expected,
          [path, field, choices](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            const std::vector<std::string> allowed = choices();
            std::optional<std::string> value = parse_string(node);
            if (!value || std::find(allowed.begin(), allowed.end(), *value) == allowed.end()) {
              std::string message = "expected one of: " + join(allowed) + ", got " + describe(node);
              std::string suggestion = value ? closest_match(*value, allowed) : "";
              if (!suggestion.empty()) message += " (did you mean '" + suggestion + "'?)";
              fail(origin, path, message);
            }
            field(config) = *value;
          },
          [field](const TrainConfig& config) { return format_string(field(config)); }};
}

std::function<std::vector<std::string>()> fixed(std::vector<std::string> names) {
  return [names] { return names; };
}

// A list of exactly two numbers, each in `range`.
template <typename Field>
KeySpec pair_key(std::string path, Field field, Range range) {
  std::string expected = "a list of 2 numbers, each " + range.text("number");
  return {path, expected,
          [path, expected, field, range](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            if (!node.IsSequence() || node.size() != 2)
              fail(origin, path,
                   "expected " + expected + ", got " + describe(node) +
                       (node.IsSequence() ? " of " + std::to_string(node.size()) : ""));
            for (size_t i = 0; i < 2; ++i) {
              std::optional<double> value = parse_number(node[i]);
              if (!value || !std::isfinite(*value) || !range.contains(*value)) {
                fail(origin_of(node[i], origin), path + "[" + std::to_string(i) + "]",
                     "expected " + range.text("number") + ", got " + describe(node[i]));
              }
              field(config)[i] = *value;
            }
          },
          [field](const TrainConfig& config) {
            return "[" + format_number(field(config)[0]) + ", " + format_number(field(config)[1]) + "]";
          }};
}

template <typename Field>
KeySpec number_list_key(std::string path, Field field, Range range, size_t max_size) {
  std::string expected = "a list of at most " + std::to_string(max_size) + " numbers, each " + range.text("number");
  return {path, expected,
          [path, expected, field, range, max_size](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            if (!node.IsSequence() || node.size() > max_size)
              fail(origin, path,
                   "expected " + expected + ", got " + describe(node) +
                       (node.IsSequence() ? " of " + std::to_string(node.size()) : ""));
            std::vector<double> values;
            for (size_t i = 0; i < node.size(); ++i) {
              std::optional<double> value = parse_number(node[i]);
              if (!value || !std::isfinite(*value) || !range.contains(*value))
                fail(origin_of(node[i], origin), path + "[" + std::to_string(i) + "]",
                     "expected " + range.text("number") + ", got " + describe(node[i]));
              values.push_back(*value);
            }
            field(config) = values;
          },
          [field](const TrainConfig& config) {
            std::string text = "[";
            for (size_t i = 0; i < field(config).size(); ++i) text += (i ? ", " : "") + format_number(field(config)[i]);
            return text + "]";
          }};
}

template <typename Field>
KeySpec integer_list_key(std::string path, Field field, Range range, bool allow_empty) {
  std::string expected = std::string(allow_empty ? "a list" : "a non-empty list") + " of integers, each " +
                         range.text("integer").substr(std::string("an integer ").size());
  return {
      path, expected,
      [path, expected, field, range, allow_empty](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
        if (!node.IsSequence() || (!allow_empty && node.size() == 0)) {
          fail(origin, path,
               "expected " + expected + ", got " + describe(node) + (node.IsSequence() ? " (empty)" : ""));
        }
        std::vector<int64_t> values;
        for (size_t i = 0; i < node.size(); ++i) {
          std::optional<int64_t> value = parse_integer(node[i]);
          if (!value || !range.contains(static_cast<double>(*value))) {
            fail(origin_of(node[i], origin), path + "[" + std::to_string(i) + "]",
                 "expected " + range.text("integer") + ", got " + describe_integer(node[i]));
          }
          values.push_back(*value);
        }
        field(config) = values;
      },
      [field](const TrainConfig& config) {
        std::string text = "[";
        for (size_t i = 0; i < field(config).size(); ++i) text += (i ? ", " : "") + std::to_string(field(config)[i]);
        return text + "]";
      }};
}

// A single integer (stored as a list of one) or a non-empty list of integers, each in `range`; written as
// a list.
template <typename Field>
KeySpec integer_or_list_key(std::string path, Field field, Range range) {
  const std::string each = range.text("integer").substr(std::string("an integer ").size());
  std::string expected = "an integer " + each + " or a non-empty list of integers, each " + each;
  return {path, expected,
          [path, expected, field, range](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            std::vector<int64_t> values;
            if (node.IsSequence()) {
              if (node.size() == 0) fail(origin, path, "expected " + expected + ", got " + describe(node) + " (empty)");
              for (size_t i = 0; i < node.size(); ++i) {
                std::optional<int64_t> value = parse_integer(node[i]);
                if (!value || !range.contains(static_cast<double>(*value)))
                  fail(origin_of(node[i], origin), path + "[" + std::to_string(i) + "]",
                       "expected " + range.text("integer") + ", got " + describe_integer(node[i]));
                values.push_back(*value);
              }
            } else {
              std::optional<int64_t> value = parse_integer(node);
              if (!value || !range.contains(static_cast<double>(*value)))
                fail(origin, path, "expected " + expected + ", got " + describe_integer(node));
              values.push_back(*value);
            }
            field(config) = values;
          },
          [field](const TrainConfig& config) {
            std::string text = "[";
            for (size_t i = 0; i < field(config).size(); ++i)
              text += (i ? ", " : "") + std::to_string(field(config)[i]);
            return text + "]";
          }};
}

bool valid_device(const std::string& text) {
  if (text == "auto" || text == "cpu" || text == "cuda") return true;
  if (text.rfind("cuda:", 0) != 0 || text.size() == 5) return false;
  if (!std::all_of(text.begin() + 5, text.end(), [](unsigned char c) { return std::isdigit(c); })) return false;
  int index = 0;  // the index must fit Device's int (cuda:99999999999 is no device either)
  auto result = std::from_chars(text.data() + 5, text.data() + text.size(), index);
  return result.ec == std::errc() && result.ptr == text.data() + text.size();
}

template <typename Field>
KeySpec device_key(std::string path, Field field) {
  return {path, "auto, cpu, cuda or cuda:N",
          [path, field](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            std::optional<std::string> value = parse_string(node);
            if (!value || !valid_device(*value))
              fail(origin, path, "expected auto, cpu, cuda or cuda:N, got " + describe(node));
            field(config) = *value;
          },
          [field](const TrainConfig& config) { return format_string(field(config)); }};
}

// Run names become folder names: letters, digits, '.', '_' and '-' only (empty = the config's name).
template <typename Field>
KeySpec name_key(std::string path, Field field) {
  const std::string expected = "a name of letters, digits, '.', '_' or '-'";
  return {path, expected,
          [path, expected, field](const YAML::Node& node, const Origin& origin, TrainConfig& config) {
            std::optional<std::string> value = node.IsNull() ? std::string() : parse_string(node);
            const bool valid = value && *value != "." && *value != ".." &&
                               std::all_of(value->begin(), value->end(), [](unsigned char c) {
                                 return std::isalnum(c) || c == '.' || c == '_' || c == '-';
                               });
            if (!valid) fail(origin, path, "expected " + expected + ", got " + describe(node));
            field(config) = *value;
          },
          [field](const TrainConfig& config) { return format_string(field(config)); }};
}

// Limits on run lengths: far beyond any real run, and small enough that step counts derived from them
// (epochs x steps per epoch, warm-up epochs x steps per epoch) are exact in double and fit 64 bits.
constexpr double kMaxEpochs = 1e6, kMaxSteps = 1e12;

std::vector<KeySpec> build_schema() {
#define OPSNN_FIELD(member) \
  [](auto& config) -> auto& { return config.member; }
  auto models = [] { return known_model_names(); };
  auto optimizers = [] { return known_optimizer_names(); };
  auto datasets = [] { return known_dataset_names(); };
  const Range count = Range::at_least(1), non_negative = Range::at_least(0);
  // Optimizer and loss-scaling numbers reach the update kernels as float: bounded so they stay finite
  // there (FLT_MAX is 3.4e38: eps 1e300 became inf) and, where 0 is not allowed, so they do not
  // underflow to 0 (FLT_MIN is 1.2e-38: eps 1e-50 became 0 and the first step divided by it).
  const Range float_positive = Range::closed(1e-30, 1e30), float_non_negative = Range::closed(0, 1e30);
  // Synthetic data is generated on the fly but still costs memory and time per sample: the loader keeps
  // an index per sample and an evaluation (or the CTR Bayes loss) walks every test sample. These bounds
  // are far beyond real use; past them a typo would exhaust memory or run for days (or, near 2^63, wrap).
  const Range sample_count = Range::closed(1, static_cast<double>(kMaxSyntheticSamples));
  const Range image_extent = Range::closed(1, static_cast<double>(kMaxSyntheticImageExtent));
  return {
      name_key("run.name", OPSNN_FIELD(run.name)),
      string_key("run.out_dir", OPSNN_FIELD(run.out_dir)),

      choice_key("model.arch", OPSNN_FIELD(model.arch), models),
      string_key("model.file", OPSNN_FIELD(model.file)),
      integer_key("model.num_classes", OPSNN_FIELD(model.num_classes), non_negative),
      integer_key("model.in_channels", OPSNN_FIELD(model.in_channels), non_negative),
      choice_key("model.stem", OPSNN_FIELD(model.stem), fixed({"imagenet", "cifar"})),
      integer_key("model.width", OPSNN_FIELD(model.width), non_negative),
      bool_key("model.zero_init_residual", OPSNN_FIELD(model.zero_init_residual)),
      auto_bool_key("model.channels_last", OPSNN_FIELD(model.channels_last)),
      integer_list_key("model.hidden_sizes", OPSNN_FIELD(model.hidden_sizes), count, true),
      integer_key("model.embedding_dim", OPSNN_FIELD(model.embedding_dim), count),
      bool_key("model.sparse_embeddings", OPSNN_FIELD(model.sparse_embeddings)),
      integer_or_list_key("model.hash_buckets", OPSNN_FIELD(model.hash_buckets),
                          Range::closed(1, static_cast<double>(kMaxDlrmBuckets))),
      integer_list_key("model.bottom_mlp", OPSNN_FIELD(model.bottom_mlp), count, false),
      integer_list_key("model.top_mlp", OPSNN_FIELD(model.top_mlp), count, true),
      string_key("model.init_from", OPSNN_FIELD(model.init_from)),
      bool_key("model.init_strict", OPSNN_FIELD(model.init_strict)),

      choice_key("data.dataset", OPSNN_FIELD(data.dataset), datasets),
      string_key("data.root", OPSNN_FIELD(data.root), false),
      integer_key("data.batch_size", OPSNN_FIELD(data.batch_size), count),
      integer_key("data.eval_batch_size", OPSNN_FIELD(data.eval_batch_size), count),
      bool_key("data.shuffle", OPSNN_FIELD(data.shuffle)),
      bool_key("data.drop_last", OPSNN_FIELD(data.drop_last)),
      bool_key("data.normalize", OPSNN_FIELD(data.normalize)),
      integer_key("data.num_workers", OPSNN_FIELD(data.num_workers), Range::closed(0, 64)),
      integer_key("data.prefetch", OPSNN_FIELD(data.prefetch), Range::closed(1, 64)),
      auto_bool_key("data.pin_memory", OPSNN_FIELD(data.pin_memory)),
      integer_key("data.augment.crop_padding", OPSNN_FIELD(data.augment.crop_padding), Range::closed(0, 64)),
      bool_key("data.augment.flip", OPSNN_FIELD(data.augment.flip)),
      integer_key("data.synthetic.train_size", OPSNN_FIELD(data.synthetic.train_size), sample_count),
      integer_key("data.synthetic.test_size", OPSNN_FIELD(data.synthetic.test_size), sample_count),
      integer_key("data.synthetic.channels", OPSNN_FIELD(data.synthetic.channels), image_extent),
      integer_key("data.synthetic.height", OPSNN_FIELD(data.synthetic.height), image_extent),
      integer_key("data.synthetic.width", OPSNN_FIELD(data.synthetic.width), image_extent),
      integer_key("data.synthetic.num_classes", OPSNN_FIELD(data.synthetic.num_classes), Range::at_least(2)),
      number_key("data.synthetic.noise", OPSNN_FIELD(data.synthetic.noise), Range::at_least(0)),
      integer_key("data.synthetic.seed", OPSNN_FIELD(data.synthetic.seed), non_negative),
      integer_key("data.ctr.train_size", OPSNN_FIELD(data.ctr.train_size), sample_count),
      integer_key("data.ctr.test_size", OPSNN_FIELD(data.ctr.test_size), sample_count),
      integer_list_key("data.ctr.vocab_sizes", OPSNN_FIELD(data.ctr.vocab_sizes),
                       Range::closed(1, static_cast<double>(kMaxCtrVocabulary)), false),
      number_key("data.ctr.weight_scale", OPSNN_FIELD(data.ctr.weight_scale), Range::at_least(0)),
      number_key("data.ctr.bias", OPSNN_FIELD(data.ctr.bias), Range::any()),
      number_key("data.ctr.value_skew", OPSNN_FIELD(data.ctr.value_skew), Range::positive()),
      integer_key("data.ctr.seed", OPSNN_FIELD(data.ctr.seed), non_negative),
      number_key("data.criteo.test_fraction", OPSNN_FIELD(data.criteo.test_fraction), Range::open(0, 1)),
      integer_key("data.criteo.max_lines", OPSNN_FIELD(data.criteo.max_lines), non_negative),
      choice_key("data.criteo.bad_lines", OPSNN_FIELD(data.criteo.bad_lines), fixed({"skip", "fail"})),
      integer_key("data.criteo.bad_line_messages", OPSNN_FIELD(data.criteo.bad_line_messages),
                  Range::closed(0, 1000000)),
      integer_key("data.image_size", OPSNN_FIELD(data.image_size), Range::closed(1, 8192)),
      pair_key("data.random_resized_crop.scale", OPSNN_FIELD(data.random_resized_crop.scale), Range::open_closed(0, 1)),
      pair_key("data.random_resized_crop.ratio", OPSNN_FIELD(data.random_resized_crop.ratio), Range::open(0, 1e6)),
      bool_key("data.jpeg_dct_scaling", OPSNN_FIELD(data.jpeg_dct_scaling)),
      choice_key("data.on_bad_image", OPSNN_FIELD(data.on_bad_image), fixed({"skip", "error"})),
      number_list_key("data.mean", OPSNN_FIELD(data.mean), Range::any(), 3),
      number_list_key("data.std", OPSNN_FIELD(data.std), Range::closed(1e-6, 1e6), 3),
      number_key("data.color_jitter.brightness", OPSNN_FIELD(data.color_jitter.brightness), Range::closed(0, 1)),
      number_key("data.color_jitter.contrast", OPSNN_FIELD(data.color_jitter.contrast), Range::closed(0, 1)),
      number_key("data.color_jitter.saturation", OPSNN_FIELD(data.color_jitter.saturation), Range::closed(0, 1)),
      number_key("data.color_jitter.hue", OPSNN_FIELD(data.color_jitter.hue), Range::closed(0, 0.5)),

      integer_key("train.epochs", OPSNN_FIELD(train.epochs), Range::closed(0, kMaxEpochs)),
      integer_key("train.max_steps", OPSNN_FIELD(train.max_steps), Range::closed(0, kMaxSteps)),
      device_key("train.device", OPSNN_FIELD(train.device)),
      choice_key("train.precision", OPSNN_FIELD(train.precision), fixed({"fp32", "tf32", "bf16", "fp16"})),
      bool_key("train.deterministic", OPSNN_FIELD(train.deterministic)),
      string_key("train.conv_algorithms", OPSNN_FIELD(train.conv_algorithms), false),
      integer_key("train.seed", OPSNN_FIELD(train.seed), non_negative),
      integer_key("train.grad_accumulation", OPSNN_FIELD(train.grad_accumulation), Range::closed(1, 65536)),
      integer_key("train.eval_every_steps", OPSNN_FIELD(train.eval_every_steps), non_negative),
      number_key("train.label_smoothing", OPSNN_FIELD(train.label_smoothing), Range::half_open(0, 1)),
      bool_key("train.cuda_graph", OPSNN_FIELD(train.cuda_graph)),

      choice_key("optimizer.name", OPSNN_FIELD(optimizer.name), optimizers),
      number_key("optimizer.lr", OPSNN_FIELD(optimizer.lr), float_positive),
      pair_key("optimizer.betas", OPSNN_FIELD(optimizer.betas), Range::half_open(0, 1)),
      number_key("optimizer.eps", OPSNN_FIELD(optimizer.eps), float_positive),
      number_key("optimizer.momentum", OPSNN_FIELD(optimizer.momentum), Range::half_open(0, 1)),
      number_key("optimizer.dampening", OPSNN_FIELD(optimizer.dampening), Range::closed(0, 1)),
      bool_key("optimizer.nesterov", OPSNN_FIELD(optimizer.nesterov)),
      number_key("optimizer.weight_decay", OPSNN_FIELD(optimizer.weight_decay), float_non_negative),
      optional_number_key("optimizer.settings.fp32_weight_decay", OPSNN_FIELD(optimizer.settings.fp32_weight_decay),
                          float_non_negative),
      bool_key("optimizer.settings.fp16_momentum", OPSNN_FIELD(optimizer.settings.fp16_momentum)),
      choice_key("optimizer.settings.state_dtype", OPSNN_FIELD(optimizer.settings.state_dtype),
                 fixed({"f32", "f16", "bf16"})),
      number_key("optimizer.settings.eps_relative", OPSNN_FIELD(optimizer.settings.eps_relative), float_non_negative),
      bool_key("optimizer.settings.amsgrad", OPSNN_FIELD(optimizer.settings.amsgrad)),
      number_key("optimizer.settings.max_grad_norm", OPSNN_FIELD(optimizer.settings.max_grad_norm), float_non_negative),
      pair_key("optimizer.settings.lamb_trust_bounds", OPSNN_FIELD(optimizer.settings.lamb_trust_bounds),
               float_non_negative),
      bool_key("optimizer.settings.decay_bias_and_norm", OPSNN_FIELD(optimizer.settings.decay_bias_and_norm)),
      number_key("optimizer.settings.initial_accumulator_value",
                 OPSNN_FIELD(optimizer.settings.initial_accumulator_value), float_non_negative),
      choice_key("optimizer.settings.row_sparse_coalescing", OPSNN_FIELD(optimizer.settings.row_sparse_coalescing),
                 fixed({"sorted", "atomic"})),
      auto_bool_key("optimizer.settings.loss_scaling.enabled", OPSNN_FIELD(optimizer.settings.loss_scaling.enabled)),
      number_key("optimizer.settings.loss_scaling.initial_scale",
                 OPSNN_FIELD(optimizer.settings.loss_scaling.initial_scale), float_positive),
      number_key("optimizer.settings.loss_scaling.growth_factor",
                 OPSNN_FIELD(optimizer.settings.loss_scaling.growth_factor), Range::open_closed(1, 1e30)),
      number_key("optimizer.settings.loss_scaling.backoff_factor",
                 OPSNN_FIELD(optimizer.settings.loss_scaling.backoff_factor), Range::open(0, 1)),
      integer_key("optimizer.settings.loss_scaling.growth_interval",  // counted in int32
                  OPSNN_FIELD(optimizer.settings.loss_scaling.growth_interval), Range::closed(1, 2147483647)),
      choice_key("optimizer.settings.sparsification.method", OPSNN_FIELD(optimizer.settings.sparsification.method),
                 fixed({"none", "topk"})),
      number_key("optimizer.settings.sparsification.density", OPSNN_FIELD(optimizer.settings.sparsification.density),
                 Range::open_closed(0, 1)),
      number_key("optimizer.settings.sparsification.initial_density",
                 OPSNN_FIELD(optimizer.settings.sparsification.initial_density), Range::open_closed(0, 1)),
      integer_key("optimizer.settings.sparsification.warmup_steps",
                  OPSNN_FIELD(optimizer.settings.sparsification.warmup_steps), non_negative),
      bool_key("optimizer.settings.sparsification.momentum_correction",
               OPSNN_FIELD(optimizer.settings.sparsification.momentum_correction)),
      number_key("optimizer.settings.sparsification.sample_fraction",
                 OPSNN_FIELD(optimizer.settings.sparsification.sample_fraction), Range::open_closed(0, 1)),
      bool_key("optimizer.settings.sparsification.lr_compensation",
               OPSNN_FIELD(optimizer.settings.sparsification.lr_compensation)),
      number_key("optimizer.settings.sparsification.local_clip_norm",
                 OPSNN_FIELD(optimizer.settings.sparsification.local_clip_norm), float_non_negative),

      choice_key("scheduler.name", OPSNN_FIELD(scheduler.name), fixed({"constant", "warmup_cosine", "step", "linear"})),
      integer_key("scheduler.warmup_steps", OPSNN_FIELD(scheduler.warmup_steps), Range::closed(0, kMaxSteps)),
      number_key("scheduler.warmup_epochs", OPSNN_FIELD(scheduler.warmup_epochs), Range::closed(0, kMaxEpochs)),
      number_key("scheduler.min_lr", OPSNN_FIELD(scheduler.min_lr), Range::at_least(0)),
      integer_key("scheduler.step_size", OPSNN_FIELD(scheduler.step_size), count),
      number_key("scheduler.gamma", OPSNN_FIELD(scheduler.gamma), Range::open_closed(0, 1)),

      number_key("monitor.grad_norm_threshold", OPSNN_FIELD(monitor.grad_norm_threshold), Range::positive()),
      choice_key("monitor.on_nonfinite", OPSNN_FIELD(monitor.on_nonfinite), fixed({"warn", "skip", "stop"})),

      integer_key("logging.every_steps", OPSNN_FIELD(logging.every_steps), count),
      choice_key("logging.progress", OPSNN_FIELD(logging.progress), fixed({"auto", "bar", "plain"})),
      choice_key("logging.level", OPSNN_FIELD(logging.level), fixed({"debug", "info", "warn"})),

      bool_key("checkpoint.enabled", OPSNN_FIELD(checkpoint.enabled)),
      integer_key("checkpoint.every_steps", OPSNN_FIELD(checkpoint.every_steps), non_negative),
      integer_key("checkpoint.every_epochs", OPSNN_FIELD(checkpoint.every_epochs), non_negative),
      // save_checkpoint takes an int; a million checkpoints is far more than any disk holds anyway.
      integer_key("checkpoint.keep_last", OPSNN_FIELD(checkpoint.keep_last), Range::closed(0, 1000000)),

      choice_key("distributed.backend", OPSNN_FIELD(distributed.backend), fixed({"auto", "nccl", "mpi"})),
      number_key("distributed.bucket_mb", OPSNN_FIELD(distributed.bucket_mb), Range::open_closed(0, 4096)),
      number_key("distributed.first_bucket_mb", OPSNN_FIELD(distributed.first_bucket_mb), Range::open_closed(0, 4096)),
      number_key("distributed.timeout_s", OPSNN_FIELD(distributed.timeout_s), Range::open_closed(0, 1e6)),
      integer_key("distributed.check_every_steps", OPSNN_FIELD(distributed.check_every_steps), non_negative),
      integer_key("distributed.zero_stage", OPSNN_FIELD(distributed.zero_stage), Range::closed(0, 1)),
      bool_key("distributed.sync_batchnorm", OPSNN_FIELD(distributed.sync_batchnorm)),
  };
#undef OPSNN_FIELD
}

struct SectionIndex {
  std::map<std::string, std::vector<std::string>> children;  // section -> names directly under it, in order
};

const SectionIndex& section_index() {
  static const SectionIndex index = [] {
    SectionIndex built;
    built.children[""];
    for (const KeySpec& key : schema()) {
      std::string section;
      size_t start = 0;
      for (;;) {
        const size_t dot = key.path.find('.', start);
        const std::string name = key.path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        std::vector<std::string>& names = built.children[section];
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
        if (dot == std::string::npos) break;
        section = key.path.substr(0, dot);
        built.children[section];
        start = dot + 1;
      }
    }
    return built;
  }();
  return index;
}

}  // namespace

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> keys = build_schema();
  return keys;
}

bool is_section(const std::string& path) { return section_index().children.count(path) != 0; }

const std::vector<std::string>& section_children(const std::string& section) {
  static const std::vector<std::string> none;
  auto found = section_index().children.find(section);
  return found == section_index().children.end() ? none : found->second;
}

}  // namespace detail

std::vector<std::string> config_key_paths() {
  std::vector<std::string> paths;
  for (const detail::KeySpec& key : detail::schema()) paths.push_back(key.path);
  return paths;
}

}  // namespace opsnn::train
