// The one error family of opsnn and the check macro. Messages say what was wrong, where, and what is
// accepted; opsnn-train maps ConfigError/UsageError to exit code 2 and every other Error to 1.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace opsnn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Shapes, dtypes or devices that do not fit an operation.
class ShapeError : public Error {
  using Error::Error;
};
class TypeError : public Error {
  using Error::Error;
};
class DeviceError : public Error {
  using Error::Error;
};
// An allocation the device (or the host) could not satisfy; the message names the device and the size.
class OutOfMemoryError : public DeviceError {
  using DeviceError::DeviceError;
};
// Bad configuration values and bad command-line usage (exit code 2 in opsnn-train).
class ConfigError : public Error {
  using Error::Error;
};
class UsageError : public Error {
  using Error::Error;
};
// Bad or missing files: data sets, checkpoints (exit code 1).
class DataError : public Error {
  using Error::Error;
};
// Training stopped on purpose: divergence caught by the monitor, for example (exit code 1).
class RuntimeFailure : public Error {
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream stream;
  (stream << ... << std::forward<Args>(args));
  return stream.str();
}
}  // namespace detail

}  // namespace opsnn

// OPSNN_CHECK(cond, parts...): throws opsnn::Error with the parts streamed together.
// OPSNN_CHECK_AS(ErrorType, cond, parts...): the same with a specific error type.
#define OPSNN_CHECK_AS(ErrorType, cond, ...)                            \
  do {                                                                  \
    if (!(cond)) throw ErrorType(::opsnn::detail::concat(__VA_ARGS__)); \
  } while (0)
#define OPSNN_CHECK(cond, ...) OPSNN_CHECK_AS(::opsnn::Error, cond, __VA_ARGS__)
