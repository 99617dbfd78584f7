// Device-side element conversions with the rounding rules of opsnn/core/half.h and convert_value
// (dtype.h), through the hardware conversion instructions where those give the same bits.
// cvt.rn.f16.f32, cvt.rn.bf16.f32 and cvt.f32.f16 round to nearest even and keep subnormals and
// infinities exactly as half.h does; they differ only for NaN, which they turn into the canonical NaN
// while half.h keeps sign and payload. So NaN takes half.h's functions and everything else the
// instruction.
#pragma once

#include <cuda_bf16.h>  // __float2bfloat16_rn (cvt.rn.bf16.f32)
#include <cuda_fp16.h>  // __float2half_rn, __half2float (cvt.rn.f16.f32, cvt.f32.f16)

#include <cstdint>
#include <type_traits>

#include "opsnn/core/half.h"
#include "opsnn/core/int_conversion.h"

namespace opsnn::cuda {

template <typename T>
inline constexpr bool is_16_bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The NaN cases, out of line so the vector loops stay short (static: one copy per translation unit).
static __device__ __noinline__ float half_nan_to_float(uint16_t bits) { return half_bits_to_float(bits); }
static __device__ __noinline__ uint16_t float_nan_to_half_bits(float value) { return float_to_half_bits(value); }
static __device__ __noinline__ uint16_t float_nan_to_bf16_bits(float value) { return float_to_bf16_bits(value); }

__device__ __forceinline__ float to_float(float value) { return value; }
__device__ __forceinline__ float to_float(Half value) {
  if ((value.bits & 0x7fffu) > 0x7c00u) return half_nan_to_float(value.bits);
  return __half2float(__ushort_as_half(value.bits));
}
// bf16 is the top half of a float: the shift of half.h is already the exact conversion.
__device__ __forceinline__ float to_float(BFloat16 value) { return bf16_bits_to_float(value.bits); }

// float -> T rounded to nearest even (T = float, Half or BFloat16).
template <typename T>
__device__ __forceinline__ T from_float(float value) {
  if constexpr (std::is_same_v<T, Half>) {
    if (isnan(value)) return Half::from_bits(float_nan_to_half_bits(value));
    return Half::from_bits(__half_as_ushort(__float2half_rn(value)));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    if (isnan(value)) return BFloat16::from_bits(float_nan_to_bf16_bits(value));
    return BFloat16::from_bits(__bfloat16_as_ushort(__float2bfloat16_rn(value)));
  } else {
    static_assert(std::is_same_v<T, float>, "from_float converts to float, Half or BFloat16");
    return value;
  }
}

// The device twin of double_to_float_round_to_odd (dtype.h): truncate, then set the last bit when
// inexact, so a second rounding to f16/bf16 rounds as if from the exact double.
__device__ __forceinline__ float double_to_float_round_to_odd(double value) {
  const float truncated = __double2float_rz(value);
  if (isnan(value) || static_cast<double>(truncated) == value) return truncated;
  return __uint_as_float(__float_as_uint(truncated) | 1u);
}

// The device twin of convert_value<To>(From) (dtype.h): the same value for every pair of storage types.
// A NaN stays a NaN; its payload follows half.h wherever a 16-bit type meets f32 (a NaN's payload
// through f64 is whatever the instruction gives, on the host as on the device). Floating -> integer
// saturates with NaN -> 0 exactly as on the host (int_conversion.h).
template <typename To, typename From>
__device__ __forceinline__ To convert_element(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (is_16_bit_float<From>) {
    return convert_element<To>(to_float(value));
  } else if constexpr (is_16_bit_float<To>) {
    if constexpr (std::is_same_v<From, float>)
      return from_float<To>(value);
    else
      return from_float<To>(double_to_float_round_to_odd(static_cast<double>(value)));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // The host's saturating conversion, not the instruction: cvt.rzi saturates at 32/64 bits, so a
    // narrower integer (u8) would otherwise wrap where the CPU clamps.
    return saturating_integer<To>(value);
  } else {
    return static_cast<To>(value);
  }
}

}  // namespace opsnn::cuda
