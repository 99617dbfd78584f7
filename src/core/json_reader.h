// Typed access to the fields of a JSON document that opsnn reads back (a checkpoint's state.json, a
// convolution-algorithm file): every problem is a DataError naming the source and the field's dotted
// path. Internal (nlohmann/json stays out of the public headers and out of .cu files).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "opsnn/core/error.h"

namespace opsnn {

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

  static std::string join(const std::string& parent, const char* key) {
    return parent.empty() ? key : parent + "." + key;
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

}  // namespace opsnn
