// Tests of include/opsnn/core/rng.h and the random tensor factories: Philox-4x32-10 against the
// Random123 known answers, reproducible streams independent of the OpenMP thread count, moments.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "opsnn/core/rng.h"
#include "opsnn/core/tensor.h"
#include "support/catch.h"

using namespace opsnn;

namespace {

using Words = std::array<uint32_t, 4>;

// Philox-4x32-10 with a full 128-bit counter and 64-bit key, written from the paper (Salmon et al.,
// SC 2011, section 4.2) to check the library's packing of (seed, counter) into key and counter words.
Words reference_philox(Words counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // the key schedule bumps the key between rounds
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    uint64_t left = uint64_t{0xD2511F53u} * counter[0];
    uint64_t right = uint64_t{0xCD9E8D57u} * counter[2];
    counter = Words{static_cast<uint32_t>(right >> 32) ^ counter[1] ^ key0, static_cast<uint32_t>(right),
                    static_cast<uint32_t>(left >> 32) ^ counter[3] ^ key1, static_cast<uint32_t>(left)};
  }
  return counter;
}

Words words(const Philox4& block) { return Words{block.v[0], block.v[1], block.v[2], block.v[3]}; }

// Bitwise equality of two double tensors (so -0.0 vs 0.0 or NaN payloads would count as different).
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

struct Moments {
  double mean = 0, variance = 0, fourth = 0;
};

Moments moments(const std::vector<double>& values) {
  Moments m;
  for (double v : values) m.mean += v;
  m.mean /= static_cast<double>(values.size());
  for (double v : values) {
    double d = (v - m.mean) * (v - m.mean);
    m.variance += d;
    m.fourth += d * d;
  }
  m.variance /= static_cast<double>(values.size());
  m.fourth /= static_cast<double>(values.size());
  return m;
}

}  // namespace

TEST_CASE("Philox-4x32-10 matches the Random123 known-answer vectors", "[core]") {
  // Counter words, key words -> output words, from Random123's kat_vectors.
  CHECK(reference_philox({0, 0, 0, 0}, 0, 0) == Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(reference_philox({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu) ==
        Words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(reference_philox({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u) ==
        Words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
  // The library's function with counter and key all zero is the first vector.
  CHECK(words(philox4x32_10(0, 0)) == Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  // Elsewhere it packs counter into words 0 and 1 (low first) and seed into key words 0 and 1.
  std::mt19937_64 engine(99);
  for (int i = 0; i < 1000; ++i) {
    uint64_t seed = engine(), counter = engine();
    if (i % 3 == 0) counter &= 0xffffu;
    Words expected = reference_philox({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
                                      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    REQUIRE(words(philox4x32_10(seed, counter)) == expected);
  }
}

TEST_CASE("unit conversions stay inside their documented intervals", "[core]") {
  CHECK(uint_to_unit_float(0) > 0.0f);
  CHECK(uint_to_unit_float(0xffffffffu) == 1.0f);
  CHECK(uints_to_unit_double(0, 0) > 0.0);
  CHECK(uints_to_unit_double(0xffffffffu, 0xffffffffu) <= 1.0);
  Generator generator(5);
  for (int i = 0; i < 10000; ++i) {
    double value = generator.next_double();
    REQUIRE(value >= 0.0);
    REQUIRE(value < 1.0);
    REQUIRE(generator.next_below(7) < 7);
  }
  CHECK(generator.offset() == 20000);
}

TEST_CASE("a seed fixes the stream, draws advance the counter by their size", "[core]") {
  Generator first(42), second(42), other(43);
  Tensor a = Tensor::normal({100}, 0.0, 1.0, first, DType::f64);
  Tensor b = Tensor::normal({100}, 0.0, 1.0, second, DType::f64);
  Tensor c = Tensor::normal({100}, 0.0, 1.0, other, DType::f64);
  CHECK(bitwise_equal(a, b));
  CHECK_FALSE(bitwise_equal(a, c));
  CHECK(first.offset() == 100);
  // The next draw continues the stream rather than repeating it ...
  Tensor next = Tensor::normal({100}, 0.0, 1.0, first, DType::f64);
  CHECK_FALSE(bitwise_equal(a, next));
  // ... and equals the second half of one draw twice as long from the start.
  Generator fresh(42);
  Tensor long_draw = Tensor::normal({200}, 0.0, 1.0, fresh, DType::f64);
  CHECK(bitwise_equal(long_draw.slice(0, 100, 200), next));
  // set_state rewinds.
  first.set_state(42, 0);
  CHECK(bitwise_equal(Tensor::normal({100}, 0.0, 1.0, first, DType::f64), a));
  // Uniform draws are reproducible in the same way; the counter is shared with normal draws.
  Generator u1(7), u2(7);
  CHECK(bitwise_equal(Tensor::uniform({50}, -1.0, 1.0, u1, DType::f64),
                      Tensor::uniform({50}, -1.0, 1.0, u2, DType::f64)));
  CHECK(u1.offset() == 50);
  // Value i of a draw is a function of (seed, offset + i) alone.
  Generator direct(11);
  direct.advance(5);
  std::vector<double> values = Tensor::uniform({3}, 0.0, 1.0, direct, DType::f64).to_vector<double>();
  Philox4 block = philox4x32_10(11, 6);
  CHECK(values[1] == uints_to_unit_double(block.v[0], block.v[1]) - 0x1p-53);
}

TEST_CASE("random tensors do not depend on the OpenMP thread count", "[core]") {
  const int saved_threads = omp_get_max_threads();
  const Shape shape{300000};  // above the size where the factories go parallel
  omp_set_num_threads(1);
  Generator serial_normal(2024), serial_uniform(2024);
  Tensor normal_one = Tensor::normal(shape, 0.5, 2.0, serial_normal, DType::f64);
  Tensor uniform_one = Tensor::uniform(shape, -3.0, 3.0, serial_uniform, DType::f64);
  omp_set_num_threads(2);
  Generator parallel_normal(2024), parallel_uniform(2024);
  Tensor normal_two = Tensor::normal(shape, 0.5, 2.0, parallel_normal, DType::f64);
  Tensor uniform_two = Tensor::uniform(shape, -3.0, 3.0, parallel_uniform, DType::f64);
  omp_set_num_threads(saved_threads);
  CHECK(bitwise_equal(normal_one, normal_two));
  CHECK(bitwise_equal(uniform_one, uniform_two));
  CHECK(serial_normal.offset() == parallel_normal.offset());
}

TEST_CASE("normal and uniform draws have the right moments", "[core]") {
  const int64_t count = 200000;
  const double n = static_cast<double>(count);
  Generator generator(1234);
  std::vector<double> normal = Tensor::normal({count}, 1.5, 2.0, generator, DType::f64).to_vector<double>();
  Moments m = moments(normal);
  // Five standard errors: sigma/sqrt(n) for the mean, sigma^2 sqrt(2/n) for the variance.
  CHECK(std::fabs(m.mean - 1.5) < 5 * 2.0 / std::sqrt(n));
  CHECK(std::fabs(m.variance - 4.0) < 5 * 4.0 * std::sqrt(2.0 / n));
  CHECK(std::fabs(m.fourth / (m.variance * m.variance) - 3.0) < 0.1);  // kurtosis of a Gaussian
  int64_t within_one_sigma = 0;
  for (double v : normal) within_one_sigma += std::fabs(v - 1.5) < 2.0;
  CHECK(std::fabs(static_cast<double>(within_one_sigma) / n - 0.682689) < 0.005);

  std::vector<double> uniform = Tensor::uniform({count}, -2.0, 4.0, generator, DType::f64).to_vector<double>();
  Moments u = moments(uniform);
  CHECK(std::fabs(u.mean - 1.0) < 5 * std::sqrt(3.0 / n));
  CHECK(std::fabs(u.variance - 3.0) < 0.05);  // (b - a)^2 / 12
  double low = *std::min_element(uniform.begin(), uniform.end());
  double high = *std::max_element(uniform.begin(), uniform.end());
  CHECK(low >= -2.0);
  CHECK(high < 4.0);
  CHECK(low < -1.99);
  CHECK(high > 3.99);

  // f32 draws are the f64 draws rounded.
  Generator a(9), b(9);
  std::vector<float> as_float = Tensor::normal({1000}, 0.0, 1.0, a, DType::f32).to_vector<float>();
  std::vector<double> as_double = Tensor::normal({1000}, 0.0, 1.0, b, DType::f64).to_vector<double>();
  for (size_t i = 0; i < as_float.size(); ++i) REQUIRE(as_float[i] == static_cast<float>(as_double[i]));

  CHECK_THROWS_WITH(Tensor::normal({2}, 0.0, -1.0, generator), Catch::Contains("-1"));
  CHECK_THROWS_WITH(Tensor::uniform({2}, 1.0, 0.0, generator), Catch::Contains("exceeds"));
}
