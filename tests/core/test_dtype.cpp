// Tests of include/opsnn/core/half.h and dtype.h: f16/bf16 rounding (ties to even, subnormals,
// overflow, NaN, inf) against an independent double-precision reference, and dtype name parsing.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "opsnn/core/dtype.h"
#include "opsnn/core/error.h"
#include "opsnn/core/half.h"
#include "opsnn/core/tensor.h"
#include "support/catch.h"

using namespace opsnn;

namespace {

uint16_t to_half(float value) { return float_to_half_bits(value); }
uint16_t to_bf16(float value) { return float_to_bf16_bits(value); }
float pow2(int exponent) { return std::ldexp(1.0f, exponent); }

bool half_is_nan(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u && (bits & 0x03ffu) != 0; }
bool bf16_is_nan(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x007fu) != 0; }

// Correct rounding of x to a binary format with `fraction_bits` stored fraction bits, minimum normal
// exponent `min_exponent` and largest finite value `max_finite`, computed in double: the scaled value
// is exact, and nearbyint rounds ties to even in the default rounding mode.
double reference_round(double x, int fraction_bits, int min_exponent, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  int frexp_exponent = 0;
  std::frexp(std::fabs(x), &frexp_exponent);
  int exponent = std::max(frexp_exponent - 1, min_exponent);  // subnormals share the minimum exponent
  int ulp_exponent = exponent - fraction_bits;
  double rounded = std::ldexp(std::nearbyint(std::ldexp(std::fabs(x), -ulp_exponent)), ulp_exponent);
  if (rounded > max_finite) rounded = std::numeric_limits<double>::infinity();
  return std::copysign(rounded, x);
}

double reference_half(double x) { return reference_round(x, 10, -14, 65504.0); }
double reference_bf16(double x) { return reference_round(x, 7, -126, std::ldexp(255.0, 120)); }

// Same value including the sign of zero and infinities.
bool same_value(double a, double b) { return a == b && std::signbit(a) == std::signbit(b); }

}  // namespace

TEST_CASE("f16 rounds ties to even in the normal range", "[core]") {
  // Between 1 and 1 + 2^-10 (odd last bit) the tie 1 + 2^-11 goes down to the even 1.
  CHECK(to_half(1.0f + pow2(-11)) == 0x3c00);
  // Between 1 + 2^-10 (odd) and 1 + 2^-9 (even) the tie goes up.
  CHECK(to_half(1.0f + 3 * pow2(-11)) == 0x3c02);
  // Just above / below a tie rounds to the nearer neighbour.
  CHECK(to_half(1.0f + pow2(-11) + pow2(-23)) == 0x3c01);
  CHECK(to_half(1.0f + 3 * pow2(-11) - pow2(-23)) == 0x3c01);
  CHECK(to_half(-(1.0f + pow2(-11))) == 0xbc00);
  CHECK(to_half(-(1.0f + 3 * pow2(-11))) == 0xbc02);
  // A tie whose rounding carries into the exponent: 2 - 2^-11 lies between 2 - 2^-10 (odd) and 2.
  CHECK(to_half(2.0f - pow2(-11)) == 0x4000);
  // Exact values are unchanged.
  CHECK(to_half(1.0f) == 0x3c00);
  CHECK(to_half(-2.0f) == 0xc000);
  CHECK(to_half(0.5f) == 0x3800);
}

TEST_CASE("f16 subnormals: smallest, largest, and rounding into and out of the range", "[core]") {
  CHECK(to_half(pow2(-24)) == 0x0001);  // smallest subnormal
  CHECK(half_bits_to_float(0x0001) == pow2(-24));
  CHECK(to_half(1023 * pow2(-24)) == 0x03ff);  // largest subnormal
  CHECK(half_bits_to_float(0x03ff) == 1023 * pow2(-24));
  CHECK(to_half(pow2(-14)) == 0x0400);  // smallest normal
  CHECK(half_bits_to_float(0x0400) == pow2(-14));
  // Ties at 2^-24 granularity round to even.
  CHECK(to_half(pow2(-25)) == 0x0000);              // half of the smallest subnormal -> 0
  CHECK(to_half(-pow2(-25)) == 0x8000);             // sign kept on the zero
  CHECK(to_half(3 * pow2(-25)) == 0x0002);          // 1.5 units -> 2
  CHECK(to_half(5 * pow2(-25)) == 0x0002);          // 2.5 units -> 2
  CHECK(to_half(pow2(-25) + pow2(-40)) == 0x0001);  // just above the tie -> 1
  CHECK(to_half(pow2(-25) - pow2(-40)) == 0x0000);
  // Rounding out of the subnormal range into the smallest normal: 1023.5 units is a tie, 0x3ff odd.
  CHECK(to_half(1023.5f * pow2(-24)) == 0x0400);
  CHECK(to_half(1023.25f * pow2(-24)) == 0x03ff);
  // Rounding into the subnormal range from just below the smallest normal.
  CHECK(to_half(pow2(-14) - pow2(-30)) == 0x0400);
  CHECK(to_half(pow2(-14) - 0.75f * pow2(-24)) == 0x03ff);
  // Float subnormals are far below f16's range.
  CHECK(to_half(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(to_half(-1e-40f) == 0x8000);
  CHECK(to_half(-0.0f) == 0x8000);
}

TEST_CASE("f16 overflow: 65504 is the largest finite, ties at 65520 go to inf", "[core]") {
  CHECK(to_half(65504.0f) == 0x7bff);
  CHECK(to_half(65519.99f) == 0x7bff);
  CHECK(to_half(65520.0f) == 0x7c00);
  CHECK(to_half(-65520.0f) == 0xfc00);
  CHECK(to_half(-65519.99f) == 0xfbff);
  CHECK(to_half(1e10f) == 0x7c00);
  CHECK(to_half(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(half_bits_to_float(0x7bff) == 65504.0f);
}

TEST_CASE("f16 and bf16 keep infinities and NaN with its sign", "[core]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(to_half(inf) == 0x7c00);
  CHECK(to_half(-inf) == 0xfc00);
  CHECK(half_bits_to_float(0x7c00) == inf);
  CHECK(half_bits_to_float(0xfc00) == -inf);
  CHECK(to_bf16(inf) == 0x7f80);
  CHECK(to_bf16(-inf) == 0xff80);
  CHECK(bf16_bits_to_float(0xff80) == -inf);

  const float quiet_nan = std::numeric_limits<float>::quiet_NaN();
  uint16_t half_nan = to_half(quiet_nan);
  CHECK(half_is_nan(half_nan));
  CHECK((half_nan & 0x8000) == 0);
  uint16_t negative_half_nan = to_half(-quiet_nan);
  CHECK(half_is_nan(negative_half_nan));
  CHECK((negative_half_nan & 0x8000) == 0x8000);
  CHECK(std::isnan(half_bits_to_float(negative_half_nan)));
  CHECK(std::signbit(half_bits_to_float(negative_half_nan)));
  // A NaN whose payload lives only in the low bits must not collapse into infinity.
  CHECK(half_is_nan(to_half(bits_float(0x7f800001u))));
  CHECK(half_is_nan(to_half(bits_float(0xff800001u))));
  CHECK((to_half(bits_float(0xff800001u)) & 0x8000) == 0x8000);
  CHECK(bf16_is_nan(to_bf16(bits_float(0x7f800001u))));
  CHECK(to_bf16(bits_float(0xff800001u)) == 0xffc0);
  CHECK(bf16_is_nan(to_bf16(quiet_nan)));
  CHECK(std::isnan(bf16_bits_to_float(to_bf16(-quiet_nan))));
  CHECK(std::signbit(bf16_bits_to_float(to_bf16(-quiet_nan))));
}

TEST_CASE("bf16 rounds ties to even and overflows to inf", "[core]") {
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(to_bf16(1.0f + pow2(-8)) == 0x3f80);      // tie, 0x3f80 even
  CHECK(to_bf16(1.0f + 3 * pow2(-8)) == 0x3f82);  // tie, 0x3f81 odd -> up
  CHECK(to_bf16(1.0f + pow2(-8) + pow2(-20)) == 0x3f81);
  CHECK(to_bf16(-(1.0f + 3 * pow2(-8))) == 0xbf82);
  // Largest finite bf16 is 0x7f7f; the tie above it (odd) rounds to inf, as does FLT_MAX.
  CHECK(to_bf16(bits_float(0x7f7f7fffu)) == 0x7f7f);
  CHECK(to_bf16(bits_float(0x7f7f8000u)) == 0x7f80);
  CHECK(to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(to_bf16(-std::numeric_limits<float>::max()) == 0xff80);
  // bf16 shares float's exponent range: float subnormals round at 2^-133 granularity.
  CHECK(to_bf16(bits_float(0x00010000u)) == 0x0001);
  CHECK(to_bf16(bits_float(0x00008000u)) == 0x0000);
  CHECK(to_bf16(bits_float(0x00018000u)) == 0x0002);
  CHECK(to_bf16(bits_float(0x80008001u)) == 0x8001);
}

TEST_CASE("every f16 bit pattern survives half -> float -> half", "[core]") {
  int mismatches = 0;
  for (uint32_t pattern = 0; pattern <= 0xffffu; ++pattern) {
    uint16_t bits = static_cast<uint16_t>(pattern);
    uint16_t back = to_half(half_bits_to_float(bits));
    // NaNs come back quiet (bit 9 set) with sign and payload otherwise kept.
    uint16_t expected = half_is_nan(bits) ? static_cast<uint16_t>(bits | 0x0200u) : bits;
    if (back != expected) ++mismatches;
    if (!half_is_nan(bits) && (bits & 0x7c00u) != 0x7c00u)
      if (reference_half(half_bits_to_float(bits)) != half_bits_to_float(bits)) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("every bf16 bit pattern survives bf16 -> float -> bf16", "[core]") {
  int mismatches = 0;
  for (uint32_t pattern = 0; pattern <= 0xffffu; ++pattern) {
    uint16_t bits = static_cast<uint16_t>(pattern);
    uint16_t back = to_bf16(bf16_bits_to_float(bits));
    uint16_t expected = bf16_is_nan(bits) ? static_cast<uint16_t>(bits | 0x0040u) : bits;
    if (back != expected) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("float -> f16 and bf16 match a double-precision reference rounding", "[core]") {
  std::mt19937 engine(12345);
  std::uniform_int_distribution<uint32_t> any_bits;
  // Exponents concentrated where f16 is interesting (subnormals through overflow), plus any float.
  std::uniform_int_distribution<uint32_t> half_exponents(127 - 27, 127 + 17);
  int half_failures = 0, bf16_failures = 0;
  uint32_t first_half_failure = 0, first_bf16_failure = 0;
  for (int i = 0; i < 400000; ++i) {
    uint32_t bits = any_bits(engine);
    if (i % 2 == 0) bits = (bits & 0x807fffffu) | (half_exponents(engine) << 23);
    if (i % 7 == 0) bits = (bits & 0xffffe000u) | 0x1000u;   // many exact ties at f16 precision
    if (i % 11 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // exact ties at bf16 precision
    float value = bits_float(bits);
    if (std::isnan(value)) continue;
    double half_expected = reference_half(value);
    if (!same_value(half_bits_to_float(to_half(value)), half_expected) && half_failures++ == 0)
      first_half_failure = bits;
    double bf16_expected = reference_bf16(value);
    if (!same_value(bf16_bits_to_float(to_bf16(value)), bf16_expected) && bf16_failures++ == 0)
      first_bf16_failure = bits;
  }
  INFO("first f16 failure at float bits " << std::hex << first_half_failure << ", first bf16 failure at "
                                          << first_bf16_failure);
  CHECK(half_failures == 0);
  CHECK(bf16_failures == 0);
}

TEST_CASE("double -> f16/bf16 rounds once (no double rounding through float)", "[core]") {
  // 1 + 2^-11 + 2^-40 is above the f16 tie, but rounds to exactly the tie in float.
  double above_half_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(static_cast<float>(convert_value<Half>(above_half_tie)) == 1.0f + pow2(-10));
  CHECK(static_cast<float>(convert_value<Half>(-above_half_tie)) == -(1.0f + pow2(-10)));
  double below_half_tie = 1.0 + std::ldexp(1.0, -11) - std::ldexp(1.0, -40);
  CHECK(static_cast<float>(convert_value<Half>(below_half_tie)) == 1.0f);
  double above_bf16_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  CHECK(static_cast<float>(convert_value<BFloat16>(above_bf16_tie)) == 1.0f + pow2(-7));
  // Exact ties, overflow and NaN still behave.
  CHECK(convert_value<Half>(1.0 + std::ldexp(1.0, -11)).bits == 0x3c00);
  CHECK(convert_value<Half>(65520.0).bits == 0x7c00);
  CHECK(convert_value<Half>(1e300).bits == 0x7c00);
  CHECK(convert_value<Half>(-1e-300).bits == 0x8000);
  CHECK(convert_value<BFloat16>(1e300).bits == 0x7f80);
  CHECK(half_is_nan(convert_value<Half>(std::nan("")).bits));
  // The tensor conversion path uses the same rule.
  Tensor values = Tensor::from_vector<double>({above_half_tie, below_half_tie}, {2});
  CHECK(values.to(DType::f16).to_vector<float>() == std::vector<float>{1.0f + pow2(-10), 1.0f});
  std::mt19937_64 engine(7);
  std::uniform_real_distribution<double> uniform(-70000.0, 70000.0);
  int failures = 0;
  for (int i = 0; i < 100000; ++i) {
    double value = uniform(engine) * std::ldexp(1.0, -static_cast<int>(engine() % 40));
    if (!same_value(static_cast<float>(convert_value<Half>(value)), reference_half(value))) ++failures;
    if (!same_value(static_cast<float>(convert_value<BFloat16>(value)), reference_bf16(value))) ++failures;
  }
  CHECK(failures == 0);
}

TEST_CASE("parse_dtype accepts the documented names and rejects others by listing them", "[core]") {
  CHECK(parse_dtype("f32") == DType::f32);
  CHECK(parse_dtype("float32") == DType::f32);
  CHECK(parse_dtype("fp32") == DType::f32);
  CHECK(parse_dtype("f64") == DType::f64);
  CHECK(parse_dtype("f16") == DType::f16);
  CHECK(parse_dtype("fp16") == DType::f16);
  CHECK(parse_dtype("half") == DType::f16);
  CHECK(parse_dtype("bf16") == DType::bf16);
  CHECK(parse_dtype("bfloat16") == DType::bf16);
  CHECK(parse_dtype("i32") == DType::i32);
  CHECK(parse_dtype("int64") == DType::i64);
  CHECK(parse_dtype("u8") == DType::u8);
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    CHECK(parse_dtype(dtype_name(dtype)) == dtype);
  CHECK_THROWS_AS(parse_dtype("float8"), TypeError);
  CHECK_THROWS_WITH(parse_dtype("float8"), Catch::Contains("'float8'") && Catch::Contains("f32") &&
                                               Catch::Contains("bf16") && Catch::Contains("u8"));
  CHECK_THROWS_AS(parse_dtype(""), TypeError);
  CHECK_THROWS_AS(parse_dtype("F32"), TypeError);
}

TEST_CASE("dtype sizes and floating flags", "[core]") {
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::i32) == 4);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(dtype_size(DType::u8) == 1);
  CHECK(is_floating(DType::bf16));
  CHECK_FALSE(is_floating(DType::i64));
  CHECK(sizeof(Half) == 2);
  CHECK(sizeof(BFloat16) == 2);
}
