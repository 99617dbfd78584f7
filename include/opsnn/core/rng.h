// Seeded counter-based random numbers (Philox-4x32-10, Salmon et al., SC 2011). Value i of a draw
// depends only on (seed, counter offset + i), so results are the same whatever the thread count and on
// CPU or GPU. Header-only, no third-party includes: CUDA kernels use the same functions.
#pragma once

#include <cstdint>

#include "opsnn/core/macros.h"

namespace opsnn {

struct Philox4 {
  uint32_t v[4];
};

OPSNN_HD Philox4 philox4x32_10(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t product0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t product1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t hi0 = static_cast<uint32_t>(product0 >> 32), lo0 = static_cast<uint32_t>(product0);
    uint32_t hi1 = static_cast<uint32_t>(product1 >> 32), lo1 = static_cast<uint32_t>(product1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in (0, 1]: never 0, so log() is safe.
OPSNN_HD float uint_to_unit_float(uint32_t x) { return (static_cast<float>(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }
OPSNN_HD double uints_to_unit_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ lo;
  return (static_cast<double>(bits & ((1ull << 53) - 1)) + 1.0) * (1.0 / 9007199254740992.0);
}

// Host-side generator: a seed and a counter that each draw advances by the number of values it used.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `count` counters and returns the first.
  uint64_t advance(uint64_t count) {
    uint64_t first = offset_;
    offset_ += count;
    return first;
  }
  // Scalar draws for host code (shuffles, augmentation decisions).
  uint32_t next_u32() { return philox4x32_10(seed_, advance(1)).v[0]; }
  double next_double() {
    Philox4 r = philox4x32_10(seed_, advance(1));
    return uints_to_unit_double(r.v[0], r.v[1]) - 0x1p-53;
  }
  uint64_t next_below(uint64_t bound) {
    return static_cast<uint64_t>(next_double() * static_cast<double>(bound)) % bound;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

}  // namespace opsnn
