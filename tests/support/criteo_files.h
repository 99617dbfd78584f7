// Criteo-format click logs written at test time (nothing is committed): lines of a 0/1 label, 13 integer
// and 26 hexadecimal features with a planted logistic signal, as plain text or gzip. The click
// probability of line i is sigmoid(-1 + w1[C1] + w2[C2] + 0.8 (log(1 + I1) - 2.3)): C1 takes 20 values,
// C2 200 (small ones frequent), I1 is about exponential with mean 15; the other features are noise, some
// fields empty, I2 sometimes negative. Predicting the base rate (about 31% clicks) gives about 0.62
// log-loss, the planted probabilities about 0.45, and knowing I1 alone about 0.59.
// tools/make_criteo_sample.py writes the same lines (tests/tools/test_make_criteo_sample.cpp compares).
#pragma once

#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace opsnn::testing {

// splitmix64 (Steele, Lea and Flood 2014): the generator's one source of pseudo-random bits.
inline uint64_t criteo_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from (seed, line, purpose).
inline double criteo_uniform(uint64_t seed, int64_t line, uint64_t purpose) {
  const uint64_t bits = criteo_mix(criteo_mix(seed * 1000003u + purpose) ^ static_cast<uint64_t>(line));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

struct CriteoLine {
  std::string text;  // the TSV line, without its '\n'
  int label = 0;
  double probability = 0.0;  // the planted click probability
};

// Line `index` of the log of `seed`: a pure function of both (the planted weights depend on neither).
inline CriteoLine criteo_line(uint64_t seed, int64_t index) {
  auto uniform = [&](uint64_t purpose) { return criteo_uniform(seed, index, purpose); };
  auto weight = [](uint64_t field, int64_t value, double scale) {  // fixed per (field, value)
    const double u =
        static_cast<double>(criteo_mix(field * 7919u + static_cast<uint64_t>(value)) >> 11) / 9007199254740992.0;
    return scale * (2.0 * u - 1.0);
  };
  const int64_t c1 = static_cast<int64_t>(20.0 * uniform(1));
  const int64_t c2 = static_cast<int64_t>(200.0 * std::pow(uniform(2), 1.5));
  const int64_t i1 = static_cast<int64_t>(-15.0 * std::log(1.0 - uniform(3)));
  const double logit =
      -1.0 + weight(1, c1, 2.25) + weight(2, c2, 1.7) + 0.8 * (std::log1p(static_cast<double>(i1)) - 2.3);
  CriteoLine line;
  line.probability = 1.0 / (1.0 + std::exp(-logit));
  line.label = uniform(4) < line.probability ? 1 : 0;
  line.text = std::to_string(line.label);
  for (int k = 0; k < 13; ++k) {
    line.text += '\t';
    if (k == 0) {
      line.text += std::to_string(i1);
    } else if (uniform(10 + static_cast<uint64_t>(k)) >= 0.15) {  // 15% empty
      const int64_t value = static_cast<int64_t>(50.0 * uniform(30 + static_cast<uint64_t>(k))) - (k == 1 ? 3 : 0);
      line.text += std::to_string(value);
    }
  }
  for (int k = 0; k < 26; ++k) {
    line.text += '\t';
    int64_t value = k == 0 ? c1 : k == 1 ? c2 : -1;
    if (k >= 2) {
      if (uniform(60 + static_cast<uint64_t>(k)) < 0.1) continue;  // 10% empty
      value = static_cast<int64_t>((5 + 37 * k) * uniform(90 + static_cast<uint64_t>(k)));
    }
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x",
                  static_cast<unsigned>(criteo_mix(static_cast<uint64_t>(k * 100003 + value))));
    line.text += hex;
  }
  return line;
}

// Lines [first, first + count) of the log of `seed`, each ending in '\n'.
inline std::string criteo_text(uint64_t seed, int64_t first, int64_t count) {
  std::string text;
  for (int64_t i = first; i < first + count; ++i) text += criteo_line(seed, i).text + '\n';
  return text;
}

inline std::vector<uint8_t> criteo_gzip(const std::string& text) {
  z_stream stream{};
  deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::vector<uint8_t> out(deflateBound(&stream, text.size()) + 64);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

inline void write_criteo_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream file(path, std::ios::binary);
  file << text;
}

inline void write_criteo_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Log-loss (natural log) of predicting probability p for labels with mean `rate`.
inline double criteo_log_loss(double rate, double p) { return -(rate * std::log(p) + (1 - rate) * std::log1p(-p)); }

}  // namespace opsnn::testing
