// Typed access to the fields of a JSON document that opsnn reads back (a checkpoint's state.json, a
// convolution-algorithm file): every problem is a DataError naming the source and the field's dotted
// path. Internal (nlohmann/json stays out of the public headers and out of .cu files).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "core/printable.h"
#include "opsnn/core/error.h"

namespace opsnn {

// Nesting deeper than this is refused while parsing: nlohmann's dump() (the checkpoint CRC, error
// messages) recurses once per level, so a hostile file of 100000 '[' would overflow the stack. opsnn's
// own files nest at most 4 levels.
inline constexpr int kMaxJsonDepth = 64;

// A parse callback that refuses nesting deeper than kMaxJsonDepth with a DataError naming `source`,
// then hands every event to `next` (which decides, as a plain parse callback, what to keep).
template <typename BasicJson, typename Next>
auto depth_limited(std::string source, Next next) {
  return [source = std::move(source), next = std::move(next)](int depth, typename BasicJson::parse_event_t event,
                                                              BasicJson& parsed) mutable {
    using Event = typename BasicJson::parse_event_t;
    // depth counts the containers around the one starting, so the outermost value starts at 0.
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxJsonDepth)
      throw DataError(detail::concat(source, ": nested deeper than ", kMaxJsonDepth, " levels"));
    return next(depth, event, parsed);
  };
}

// Parses a JSON document opsnn reads back, refusing nesting deeper than kMaxJsonDepth (a DataError
// naming `source`). Syntax errors still throw nlohmann's exceptions for the caller to phrase.
template <typename BasicJson = nlohmann::json>
BasicJson parse_json_limited(std::string_view text, const std::string& source) {
  return BasicJson::parse(
      text.begin(), text.end(),
      depth_limited<BasicJson>(source, [](int, typename BasicJson::parse_event_t, BasicJson&) { return true; }));
}

// A JSON object opsnn wrote and reads back: parse_json_limited, with syntax errors and a document that is
// not an object as DataErrors naming `source`.
inline nlohmann::json parse_json_object(std::string_view text, const std::string& source) {
  nlohmann::json document;
  try {
    document = parse_json_limited(text, source);
  } catch (const nlohmann::json::exception& error) {  // syntax, or a number out of range
    throw DataError(
        detail::concat(source, ": not valid JSON (truncated or corrupt): ", printable(error.what(), Printable::ascii)));
  }
  if (!document.is_object()) throw DataError(detail::concat(source, ": expected a JSON object"));
  return document;
}

class JsonReader {
 public:
  using Json = nlohmann::json;

  explicit JsonReader(std::string source) : source_(std::move(source)) {}

  template <typename... Parts>
  [[noreturn]] void fail(const std::string& field, Parts&&... parts) const {
    throw DataError(detail::concat(source_, ": field \"", field, "\": ", std::forward<Parts>(parts)...));
  }

  const Json& member(const Json& object, const std::string& parent, const char* key) const {
    auto found = object.find(key);
    if (found == object.end()) fail(join(parent, key), "missing");
    return *found;
  }

  const Json& object(const Json& parent_object, const std::string& parent, const char* key) const {
    const Json& value = member(parent_object, parent, key);
    if (!value.is_object()) fail(join(parent, key), "expected an object, found ", value.type_name());
    return value;
  }

  const Json& array(const Json& parent_object, const std::string& parent, const char* key) const {
    const Json& value = member(parent_object, parent, key);
    if (!value.is_array()) fail(join(parent, key), "expected an array, found ", value.type_name());
    return value;
  }

  template <typename Int>
  Int integer(const Json& object, const std::string& parent, const char* key) const {
    const Json& value = member(object, parent, key);
    return integer_value<Int>(value, join(parent, key));
  }

  template <typename Int>
  Int integer_value(const Json& value, const std::string& field) const {
    bool fits = false;
    if (value.is_number_unsigned()) {
      fits = value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<Int>::max());
    } else if (value.is_number_integer()) {
      int64_t number = value.get<int64_t>();
      fits = std::numeric_limits<Int>::is_signed && number >= static_cast<int64_t>(std::numeric_limits<Int>::min()) &&
             number <= static_cast<int64_t>(std::numeric_limits<Int>::max());
    } else {
      fail(field, "expected an integer, found ", value.dump());
    }
    if (!fits) fail(field, "integer ", value.dump(), " is out of range");
    return value.get<Int>();
  }

  // A number, or (for values JSON cannot hold) "nan", "inf" or "-inf".
  double real(const Json& object, const std::string& parent, const char* key) const {
    const Json& value = member(object, parent, key);
    if (value.is_number()) return value.get<double>();
    if (value == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (value == "inf") return std::numeric_limits<double>::infinity();
    if (value == "-inf") return -std::numeric_limits<double>::infinity();
    fail(join(parent, key), "expected a number, \"nan\", \"inf\" or \"-inf\", found ", value.dump());
  }

  std::string text(const Json& object, const std::string& parent, const char* key) const {
    const Json& value = member(object, parent, key);
    if (!value.is_string()) fail(join(parent, key), "expected a string, found ", value.dump());
    return value.get<std::string>();
  }

  bool boolean(const Json& object, const std::string& parent, const char* key) const {
    const Json& value = member(object, parent, key);
    if (!value.is_boolean()) fail(join(parent, key), "expected true or false, found ", value.dump());
    return value.get<bool>();
  }

  // The "format" and "format_version" fields every opsnn file carries; `hint` follows a wrong format's message.
  void require_format(const Json& document, std::string_view format, int version, std::string_view hint = "") const {
    if (text(document, "", "format") != format) fail("format", "expected \"", format, "\"", hint);
    const int found = integer<int>(document, "", "format_version");
    if (found != version)
      fail("format_version", "version ", found, " is not supported (this opsnn reads ", version, ")");
  }

  static std::string join(const std::string& parent, const char* key) {
    return parent.empty() ? key : parent + "." + key;
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

}  // namespace opsnn
