// The Catch2 the tests are written against, from Catch2 2 (catch2/catch.hpp: Debian 12) or Catch2 3
// (Ubuntu 24.04); the top-level CMakeLists.txt finds either and sets OPSNN_CATCH2_MAJOR. The tests use
// Catch2 2's spellings (Catch::Contains, Catch::StartsWith, Approx); Catch2 3 keeps those matchers in
// Catch::Matchers and calls Contains ContainsSubstring, so they are named here.
#pragma once

#if defined(OPSNN_CATCH2_MAJOR) && OPSNN_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
#include <string>

namespace Catch {
inline Matchers::StringContainsMatcher Contains(const std::string& text,
                                                CaseSensitive sensitivity = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(text, sensitivity);
}
using Matchers::EndsWith;
using Matchers::Equals;
using Matchers::Message;
using Matchers::StartsWith;
}  // namespace Catch
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
