// IEEE half (f16) and bfloat16 (bf16) <-> float conversions, round to nearest even, NaN/inf/subnormals
// kept. Header-only and free of third-party includes so CPU and CUDA kernels share one definition.
#pragma once

#include <cstdint>
#include <cstring>

#include "opsnn/core/macros.h"

namespace opsnn {

OPSNN_HD uint32_t float_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

OPSNN_HD float bits_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

// bf16 is the top half of a float: round the dropped 16 bits to nearest even; NaN stays a quiet NaN.
OPSNN_HD uint16_t float_to_bf16_bits(float value) {
  uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

OPSNN_HD float bf16_bits_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

// f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Values past 65504 (after rounding) become inf;
// values under 2^-14 become subnormals, rounded to nearest even at 2^-24 granularity.
OPSNN_HD uint16_t float_to_half_bits(float value) {
  uint32_t bits = float_bits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs_bits >> 13) & 0x3ffu));
  if (abs_bits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs_bits < 0x38800000u) {                                               // below 2^-14: subnormal
    if (abs_bits < 0x33000000u) return sign;                                  // below 2^-25: zero
    uint32_t exponent = abs_bits >> 23;
    uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exponent;  // mantissa * 2^(exponent-150) in units of 2^-24
    uint32_t result = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);  // round mantissa to 10 bits
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

OPSNN_HD float half_bits_to_float(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    // subnormal: mantissa * 2^-24, exact in float
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Storage types: plain 16-bit wrappers so containers and kernels can name them.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  OPSNN_HD explicit Half(float value) : bits(float_to_half_bits(value)) {}
  OPSNN_HD explicit operator float() const { return half_bits_to_float(bits); }
  OPSNN_HD static Half from_bits(uint16_t raw) {
    Half h;
    h.bits = raw;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  OPSNN_HD explicit BFloat16(float value) : bits(float_to_bf16_bits(value)) {}
  OPSNN_HD explicit operator float() const { return bf16_bits_to_float(bits); }
  OPSNN_HD static BFloat16 from_bits(uint16_t raw) {
    BFloat16 b;
    b.bits = raw;
    return b;
  }
};

}  // namespace opsnn
