// Floating -> integer element conversion with defined results: C++ leaves static_cast undefined for NaN
// and for values whose truncation the integer type cannot hold (x86 gives INT_MIN, CUDA saturates, -5.0
// to u8 gave 251). Header-only and free of third-party includes so the CPU copies (convert_value,
// dtype.h) and the CUDA copy kernels (conversions.cuh) share one definition and give the same bits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "opsnn/core/macros.h"

namespace opsnn {

// The integer range of To as doubles: [low, high) with high = max + 1, exact for u8, i32 and i64
// (2^63 is a double; i64's max 2^63 - 1 is not, hence the half-open bound).
template <typename To>
OPSNN_HD double integer_low() {
  static_assert(std::is_integral_v<To> && (std::is_signed_v<To> || sizeof(To) < 8), "u8, i32 or i64");
  if constexpr (std::is_signed_v<To>)
    return -static_cast<double>(uint64_t{1} << (8 * sizeof(To) - 1));
  else
    return 0.0;
}
template <typename To>
OPSNN_HD double integer_high() {
  static_assert(std::is_integral_v<To> && (std::is_signed_v<To> || sizeof(To) < 8), "u8, i32 or i64");
  if constexpr (std::is_signed_v<To>)
    return static_cast<double>(uint64_t{1} << (8 * sizeof(To) - 1));
  else
    return static_cast<double>(uint64_t{1} << (8 * sizeof(To)));
}
template <typename To>
OPSNN_HD To integer_max() {
  if constexpr (std::is_signed_v<To>)
    return static_cast<To>((uint64_t{1} << (8 * sizeof(To) - 1)) - 1);
  else
    return static_cast<To>(~static_cast<To>(0));
}

// Whether value truncated toward zero is a value of To (false for NaN and the infinities).
template <typename To>
OPSNN_HD bool fits_integer(double value) {
  return value >= integer_low<To>() ? value < integer_high<To>() : value > integer_low<To>() - 1.0;
}

// value truncated toward zero, saturated to To's range; NaN becomes 0 (as CUDA's cvt.rzi does).
template <typename To, typename From>
OPSNN_HD To saturating_integer(From value) {
  static_assert(std::is_floating_point_v<From>, "converts float or double");
  const double wide = static_cast<double>(value);  // exact: every float is a double
  if (wide != wide) return To{0};
  if (wide <= integer_low<To>()) return static_cast<To>(integer_low<To>());  // low is exact in To
  if (wide >= integer_high<To>()) return integer_max<To>();
  return static_cast<To>(wide);  // truncation lies in (low - 1, high): defined
}

}  // namespace opsnn
