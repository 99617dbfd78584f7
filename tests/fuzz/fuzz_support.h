// Shared by the libFuzzer targets (tests/fuzz/fuzz_*.cpp): runs one reader on one input, where the
// reader's documented failure - an opsnn::Error naming what is wrong - is the expected outcome of bad
// bytes. Anything else (another exception, a crash, a sanitizer report, a hang, unbounded memory) is a
// finding: libFuzzer stops and saves the input.
#pragma once

#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "opsnn/core/error.h"
#include "opsnn/opsnn.h"  // registers the built-ins (the config reader checks names against them)

namespace opsnn::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Calls `read`; an opsnn::Error is the reader refusing the input, which must say something. Returns
// whether the input was accepted.
template <typename Read>
bool expect_clean_refusal(Read&& read) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);  // warnings about accepted inputs would flood the fuzzer's log
    return true;
  }();
  (void)quiet;
  try {
    read();
    return true;
  } catch (const opsnn::Error& error) {
    if (std::string_view(error.what()).empty()) __builtin_trap();  // a refusal names what is wrong
    return false;
  }
}

// Calls `check`, which must not throw: a round trip of something the reader accepted. A throw is a
// finding (the message goes to stderr beside libFuzzer's report).
template <typename Check>
void expect_success(Check&& check) {
  try {
    check();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "accepted input failed its round trip: %s\n", error.what());
    __builtin_trap();
  }
}

}  // namespace opsnn::fuzz
