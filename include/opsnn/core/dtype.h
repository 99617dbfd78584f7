// Element types a Tensor can hold, their sizes and names, and the C++ type behind each.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "opsnn/core/half.h"
#include "opsnn/core/int_conversion.h"

namespace opsnn {

// f64 exists for gradient checks and double-precision references; models train in f32/f16/bf16.
enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

constexpr bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

constexpr std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "?";
}

// Parses "f32", "float32", "fp16", "bfloat16", ... ; throws opsnn::Error listing the accepted names.
DType parse_dtype(std::string_view name);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Calls fn(T{}) with T the C++ type of dtype: OPSNN_DISPATCH-free visiting for CPU kernels.
template <typename Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    case DType::f16:
      return fn(Half{});
    case DType::bf16:
      return fn(BFloat16{});
    case DType::i32:
      return fn(int32_t{});
    case DType::i64:
      return fn(int64_t{});
    case DType::u8:
      return fn(uint8_t{});
  }
  return fn(float{});
}

// double -> float rounded to odd (truncate, then set the last bit if inexact). A second rounding to
// f16/bf16, which keep far fewer bits, then rounds as if from the exact double: plain double -> float
// -> f16 rounds twice and gets ties wrong (1 + 2^-11 + 2^-40 would become 1 instead of 1 + 2^-10).
inline float double_to_float_round_to_odd(double value) {
  float rounded = static_cast<float>(value);
  if (std::isnan(value) || static_cast<double>(rounded) == value) return rounded;
  uint32_t bits = float_bits(rounded);
  if (std::fabs(static_cast<double>(rounded)) > std::fabs(value)) --bits;  // toward zero (sign-magnitude)
  return bits_float(bits | 1u);
}

// Value conversions through float/double with the rounding rules of half.h. Floating -> integer
// truncates toward zero and saturates, NaN giving 0 (int_conversion.h), on the CPU as in the CUDA
// copies; integer -> narrower integer wraps modulo 2^bits (defined in C++20, as on the GPU).
template <typename To, typename From>
To convert_value(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return convert_value<To>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    if constexpr (std::is_same_v<From, float>)
      return To(value);
    else
      return To(double_to_float_round_to_odd(static_cast<double>(value)));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return saturating_integer<To>(value);
  } else {
    return static_cast<To>(value);
  }
}

}  // namespace opsnn
