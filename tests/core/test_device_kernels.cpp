// Tests of the CUDA byte-level primitives (src/core/cuda/device_kernels.cu) against the CPU services,
// bit for bit: contiguous copies (cudaMemcpyAsync), converting copies (every f16/bf16 bit pattern, f32
// bit patterns with NaN payloads, f64 values near rounding ties, integers), strided copies (transposes,
// permutes, slices, broadcasts) and unaligned views, fill, and accumulate with alpha 1 (float math) and
// other alphas (double math); plus FastDivider against plain division (on the host). The [cuda] cases
// are skipped without a GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/fast_divide.h"
#include "opsnn/core/rng.h"
#include "opsnn/core/tensor.h"
#include "support/bit_patterns.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"
#include "support/guarded_views.h"

using namespace opsnn;
using namespace opsnn::testing;
using opsnn::cuda::FastDivider;

namespace {

bool gpu_missing() { return opsnn::testing::gpu_missing("the CUDA device kernel tests"); }

const std::vector<int64_t> kSizes = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};
const std::vector<DType> kAllDtypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i32, DType::i64, DType::u8};

// A CPU tensor of `dtype` from raw bit patterns (the low bytes of each 64-bit word).
Tensor from_bits(const std::vector<uint64_t>& bits, DType dtype) {
  Tensor t = Tensor::empty({static_cast<int64_t>(bits.size())}, dtype);
  auto* bytes = static_cast<unsigned char*>(t.data_ptr());
  for (size_t i = 0; i < bits.size(); ++i) std::memcpy(bytes + i * dtype_size(dtype), &bits[i], dtype_size(dtype));
  return t;
}

// Values of `dtype` (CPU) that exercise conversions: random bit patterns for the floating types (NaN
// payloads, subnormals, infinities included), values near f16/bf16 rounding ties for f64, and
// in-range values for the integers.
Tensor conversion_sample(int64_t count, DType dtype, std::mt19937_64& engine) {
  std::vector<uint64_t> bits(static_cast<size_t>(count));
  for (uint64_t& word : bits) {
    word = engine();
    if (dtype == DType::f64 && word % 3 != 0) {
      // An exact f16 (word % 3 == 1) or bf16 tie, nudged by 2^-40 relative: rounding through float first
      // would land on the tie itself. Scaled over the f16 range, subnormals and overflow included.
      uint64_t fraction = word >> 40;  // 24 bits
      fraction = word % 3 == 1 ? (fraction & ~uint64_t{0x1fff}) | 0x1000 : (fraction & ~uint64_t{0xffff}) | 0x8000;
      double value = std::ldexp(1.0 + static_cast<double>(fraction) * 0x1p-24, static_cast<int>((word >> 8) % 50) - 30);
      value += (word & 1 ? 1 : -1) * std::ldexp(value, -40);
      std::memcpy(&word, &value, sizeof(value));
    }
    if (dtype == DType::i32 || dtype == DType::i64) word = static_cast<uint64_t>(static_cast<int64_t>(word) >> 8);
  }
  return from_bits(bits, dtype);
}

// Uniform values in [-2, 2) of `dtype` with signed zeros, infinities, NaN and subnormals among them.
Tensor arithmetic_sample(int64_t count, DType dtype, Generator& generator) {
  std::vector<double> values = Tensor::uniform({count}, -2.0, 2.0, generator, DType::f64).to_vector<double>();
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-40, -3e-6, 1e-310};
  for (size_t i = 0; i < std::size(specials) && !values.empty(); ++i) values[(i * 7919) % values.size()] = specials[i];
  return Tensor::from_vector(values, {count}).to(dtype);
}

std::string where(const std::string& what, DType dtype, int64_t count) {
  return what + " " + std::string(dtype_name(dtype)) + " count " + std::to_string(count);
}

}  // namespace

TEST_CASE("FastDivider divides like / for dividends and divisors below 2^31", "[core]") {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 3000; ++d) divisors.push_back(d);
  for (int bit = 12; bit <= 30; ++bit) {
    const uint32_t power = uint32_t{1} << bit;
    divisors.insert(divisors.end(), {power - 1, power, power + 1});
  }
  divisors.insert(divisors.end(), {3136, 12544, 50176, 0x7ffffffeu, 0x7fffffffu});
  std::mt19937 engine(5);
  for (int i = 0; i < 3000; ++i) divisors.push_back(1 + engine() % FastDivider::kMaxDividend);
  int failures = 0;
  for (uint32_t d : divisors) {
    const FastDivider divider(d);
    std::vector<uint32_t> dividends = {
        0, 1, d - 1, d, 0x7fffffffu, 0x7ffffffeu, 0x7fffffffu / d * d, 0x7fffffffu / d * d - 1};
    if (d < 0x40000000u) dividends.insert(dividends.end(), {d + 1, 2 * d - 1, 2 * d});
    for (int k = 0; k < 200; ++k) dividends.push_back(engine() % (FastDivider::kMaxDividend + 1u));
    for (uint32_t n : dividends) {
      if (n > FastDivider::kMaxDividend) continue;
      if (divider.divide(n) != n / d && failures++ < 5)
        FAIL_CHECK("n " << n << " / d " << d << " gave " << divider.divide(n));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("CUDA contiguous copies of every dtype are exact, from aligned and unaligned views", "[cuda][core]") {
  if (gpu_missing()) return;
  std::mt19937_64 engine(41);
  for (DType dtype : kAllDtypes) {
    for (int64_t count : kSizes) {
      const Tensor values = conversion_sample(count + 1, dtype, engine);
      const Tensor gpu = values.to(kGpu);
      // clone of the whole tensor and of a view starting one element in (cudaMemcpyAsync either way).
      CHECK(bit_patterns(gpu.slice(0, 0, count).clone()) == bit_patterns(values.slice(0, 0, count)));
      CHECK(bit_patterns(gpu.slice(0, 1, count + 1).clone()) == bit_patterns(values.slice(0, 1, count + 1)));
    }
  }
}

TEST_CASE("CUDA converting copies give the CPU's bits for every pair of dtypes", "[cuda][core]") {
  if (gpu_missing()) return;
  std::mt19937_64 engine(42);
  for (DType from : kAllDtypes) {
    for (DType to : kAllDtypes) {
      // Floating -> integer included: NaN and out-of-range values saturate alike on both (int_conversion.h).
      if (from == to) continue;
      for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{4097}, (int64_t{1} << 18) + 3}) {
        const Tensor values = conversion_sample(count + 1, from, engine);
        const Tensor gpu = values.to(kGpu);
        for (int64_t shift : {0, 1}) {
          const std::string what = where(std::string("to ") + std::string(dtype_name(to)) + " from", from, count) +
                                   " shift " + std::to_string(shift);
          require_same_bits(gpu.slice(0, shift, shift + count).to(to), values.slice(0, shift, shift + count).to(to),
                            what);
        }
      }
    }
  }
}

TEST_CASE("CUDA f16/bf16 <-> f32 conversions keep NaN payloads and give the CPU's exact bits", "[cuda][core]") {
  if (gpu_missing()) return;
  std::vector<uint64_t> every_pattern(1 << 16);
  for (uint64_t i = 0; i < every_pattern.size(); ++i) every_pattern[i] = i;
  for (DType narrow : {DType::f16, DType::bf16}) {
    const Tensor patterns = from_bits(every_pattern, narrow);
    CHECK(bit_patterns(patterns.to(kGpu).to(DType::f32)) == bit_patterns(patterns.to(DType::f32)));
  }
  std::mt19937 engine(43);
  std::vector<uint64_t> float_patterns(1 << 20);
  for (uint64_t& bits : float_patterns) bits = engine();
  for (uint32_t extra : {0x7f800001u, 0xffc00000u, 0x7fbfffffu, 0x477ff000u, 0x477fefffu, 0x33000000u, 0x33000001u,
                         0x387fe000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x7f7f8000u, 0x3f808000u, 0x3f818000u})
    float_patterns.push_back(extra);
  const Tensor floats = from_bits(float_patterns, DType::f32);
  for (DType narrow : {DType::f16, DType::bf16})
    CHECK(bit_patterns(floats.to(kGpu).to(narrow)) == bit_patterns(floats.to(narrow)));
}

TEST_CASE("CUDA strided copies (transpose, permute, slice, broadcast) match the CPU", "[cuda][core]") {
  if (gpu_missing()) return;
  std::mt19937_64 engine(44);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i64, DType::u8}) {
    const Tensor matrix = conversion_sample(37 * 53, dtype, engine).view({37, 53});
    const Tensor big = conversion_sample(1024 * 1027, dtype, engine).view({1024, 1027});
    const Tensor cube = conversion_sample(3 * 5 * 7 * 9, dtype, engine).view({3, 5, 7, 9});
    const Tensor rows = conversion_sample(6 * 10 * 7, dtype, engine).view({6, 10, 7});
    require_same_bits(matrix.to(kGpu).transpose(0, 1).contiguous(), matrix.transpose(0, 1).contiguous(),
                      where("transpose [37, 53]", dtype, matrix.numel()));
    require_same_bits(big.to(kGpu).transpose(0, 1).contiguous(), big.transpose(0, 1).contiguous(),
                      where("transpose [1024, 1027]", dtype, big.numel()));
    require_same_bits(cube.to(kGpu).permute({0, 2, 3, 1}).contiguous(), cube.permute({0, 2, 3, 1}).contiguous(),
                      where("permute (0, 2, 3, 1)", dtype, cube.numel()));
    require_same_bits(cube.to(kGpu).permute({3, 1, 0, 2}).contiguous(), cube.permute({3, 1, 0, 2}).contiguous(),
                      where("permute (3, 1, 0, 2)", dtype, cube.numel()));
    // NCHW <-> NHWC both ways (batches of transposes: the tiled path), planes and channels over several
    // 32 x 32 tiles with ragged edges.
    const Tensor images = conversion_sample(4 * 70 * 9 * 11, dtype, engine).view({4, 70, 9, 11});
    const Tensor nhwc = images.permute({0, 2, 3, 1}).contiguous();
    require_same_bits(images.to(kGpu).permute({0, 2, 3, 1}).contiguous(), nhwc,
                      where("NCHW to NHWC [4, 70, 9, 11]", dtype, images.numel()));
    require_same_bits(nhwc.to(kGpu).permute({0, 3, 1, 2}).contiguous(), images,
                      where("NHWC to NCHW [4, 9, 11, 70]", dtype, images.numel()));
    require_same_bits(rows.to(kGpu).slice(1, 2, 9).contiguous(), rows.slice(1, 2, 9).contiguous(),
                      where("slice [6, 2:9, 7]", dtype, rows.numel()));
    require_same_bits(rows.to(kGpu).select(2, 3).contiguous(), rows.select(2, 3).contiguous(),
                      where("select [6, 10, 3]", dtype, rows.numel()));
    // Strided and converting at once.
    const DType other = dtype == DType::f32 ? DType::bf16 : DType::f32;
    require_same_bits(cube.to(kGpu).permute({3, 1, 0, 2}).to(other), cube.permute({3, 1, 0, 2}).to(other),
                      where("permute and convert", dtype, cube.numel()));
  }
}

TEST_CASE("CUDA strided copies through DeviceServices: broadcasts and unaligned destinations", "[cuda][core]") {
  if (gpu_missing()) return;
  std::mt19937_64 engine(45);
  DeviceServices& gpu = device_services(kGpu);
  DeviceServices& cpu = device_services(kCPU);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    // [N, C] -> [N, C, H*W] with stride 0 along the last dimension (a broadcast, as expand gives).
    const Tensor source = conversion_sample(8 * 5, dtype, engine);
    const int64_t shape[] = {8, 5, 49};
    const int64_t strides[] = {5, 1, 0};
    for (int64_t shift : {0, 1, 3}) {
      const std::string what = where("broadcast shift " + std::to_string(shift), dtype, 8 * 5 * 49);
      GuardedView out = guarded_view(Tensor::zeros({8 * 5 * 49}, dtype), shift, kGpu);
      const Tensor gpu_source = source.to(kGpu);
      gpu.strided_copy(out.view.data_ptr(), dtype, gpu_source.data_ptr(), dtype, 3, shape, strides, 0);
      Tensor expected = Tensor::empty({8 * 5 * 49}, dtype);
      cpu.strided_copy(expected.data_ptr(), dtype, source.data_ptr(), dtype, 3, shape, strides, 0);
      require_same_bits(out.view, expected, what);
      require_guards_intact(out, what);
    }
    // Contiguous converting copies between equally and differently misaligned views (vector steps after
    // a scalar head, or none at all).
    for (int64_t count : kSizes) {
      const Tensor values = conversion_sample(count, DType::f32, engine);
      for (auto [source_shift, destination_shift] : {std::pair<int64_t, int64_t>{1, 1}, {3, 3}, {1, 2}, {0, 1}}) {
        const std::string what =
            where("f32 -> dtype shifts " + std::to_string(source_shift) + "/" + std::to_string(destination_shift),
                  dtype, count);
        const GuardedView in = guarded_view(values, source_shift, kGpu);
        GuardedView out = guarded_view(Tensor::zeros({count}, dtype), destination_shift, kGpu);
        const int64_t one_dim[] = {count};
        const int64_t unit[] = {1};
        gpu.strided_copy(out.view.data_ptr(), dtype, in.view.data_ptr(), DType::f32, 1, one_dim, unit, 0);
        require_same_bits(out.view, values.to(dtype), what);
        require_guards_intact(out, what);
        GuardedView back = guarded_view(Tensor::zeros({count}, DType::f32), source_shift, kGpu);
        gpu.strided_copy(back.view.data_ptr(), DType::f32, out.view.data_ptr(), dtype, 1, one_dim, unit, 0);
        require_same_bits(back.view, values.to(dtype).to(DType::f32), what + " and back");
        require_guards_intact(back, what + " and back");
      }
    }
  }
}

TEST_CASE("CUDA fill writes the CPU's bits into unaligned views of every dtype", "[cuda][core]") {
  if (gpu_missing()) return;
  for (DType dtype : kAllDtypes) {
    const std::vector<double> values = is_floating(dtype)
                                           ? std::vector<double>{0.0, -0.0, 1.0 / 3.0, -2.5, 1e-6, 65520.0}
                                           : std::vector<double>{0.0, 3.0, 100.0};
    for (double value : values) {
      for (int64_t count : kSizes) {
        for (int64_t shift : {0, 1}) {
          const std::string what =
              where("fill " + std::to_string(value), dtype, count) + " shift " + std::to_string(shift);
          GuardedView out = guarded_view(Tensor::zeros({count}, dtype), shift, kGpu);
          out.view.fill_(value);
          require_same_bits(out.view, Tensor::full({count}, value, dtype), what);
          require_guards_intact(out, what);
        }
      }
    }
  }
}

TEST_CASE("CUDA add_converted_ of f16/bf16 into f32 gives the bits of converting first, at every alignment",
          "[cuda][core]") {
  if (gpu_missing()) return;
  Generator generator(47);
  for (DType source_dtype : {DType::bf16, DType::f16}) {
    for (int64_t count : kSizes) {
      const Tensor destination = arithmetic_sample(count, DType::f32, generator);
      const Tensor source = arithmetic_sample(count, source_dtype, generator);
      Tensor expected = destination.clone();
      expected.add_(source.to(DType::f32));  // the CPU: convert, then add
      for (auto [destination_shift, source_shift] : {std::pair<int64_t, int64_t>{0, 0}, {1, 1}, {3, 3}, {1, 0}}) {
        const std::string what =
            where("add_converted_ from " + std::string(dtype_name(source_dtype)), DType::f32, count) + " shifts " +
            std::to_string(destination_shift) + "/" + std::to_string(source_shift);
        GuardedView out = guarded_view(destination, destination_shift, kGpu);
        const GuardedView in = guarded_view(source, source_shift, kGpu);
        out.view.add_converted_(in.view);
        require_same_bits(out.view, expected, what);
        require_guards_intact(out, what);
      }
    }
  }
}

TEST_CASE("CUDA accumulate: alpha 1 in float and other alphas in double give the reference bits", "[cuda][core]") {
  if (gpu_missing()) return;
  Generator generator(46);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (double alpha : {1.0, 0.5, -2.5, 1.0 / 3.0}) {
      for (int64_t count : kSizes) {
        const Tensor destination = arithmetic_sample(count, dtype, generator);
        const Tensor source = arithmetic_sample(count, dtype, generator);
        // The rule: destination + alpha * source in double, rounded once to the dtype (through float
        // for f16/bf16).
        const std::vector<double> d = destination.to_vector<double>(), s = source.to_vector<double>();
        std::vector<double> exact(d.size());
        for (size_t i = 0; i < d.size(); ++i) exact[i] = d[i] + alpha * s[i];
        const Tensor expected = dtype == DType::f64 ? Tensor::from_vector(exact, {count})
                                                    : Tensor::from_vector(exact, {count}).to(DType::f32).to(dtype);
        for (auto [destination_shift, source_shift] : {std::pair<int64_t, int64_t>{0, 0}, {1, 1}, {3, 3}, {1, 0}}) {
          const std::string what = where("accumulate alpha " + std::to_string(alpha), dtype, count) + " shifts " +
                                   std::to_string(destination_shift) + "/" + std::to_string(source_shift);
          GuardedView out = guarded_view(destination, destination_shift, kGpu);
          const GuardedView in = guarded_view(source, source_shift, kGpu);
          out.view.add_(in.view, alpha);
          require_same_bits(out.view, expected, what);
          require_guards_intact(out, what);
          if (alpha == 1.0) {  // the CPU twin adds in float (f32) or float-then-round (f16/bf16): the same
            Tensor cpu = destination.clone();
            cpu.add_(source);
            require_same_bits(out.view, cpu, what + " vs CPU add_");
          }
        }
      }
    }
  }
}
