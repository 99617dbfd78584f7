// Bit-level tensor comparison for tests of kernels that must reproduce their CPU twin exactly: the
// elements' bit patterns must agree (so -0 differs from +0), except that any NaN matches any NaN (NaN
// payloads out of arithmetic differ between CPUs and GPUs).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "opsnn/core/tensor.h"
#include "support/catch.h"

namespace opsnn::testing {

// The bit patterns of t's elements (on any device, in any layout), each widened to 64 bits.
inline std::vector<uint64_t> bit_patterns(const Tensor& t) {
  const Tensor host = t.to(kCPU).contiguous();
  const size_t element_bytes = dtype_size(host.dtype());
  std::vector<uint64_t> bits(static_cast<size_t>(host.numel()), 0);
  const auto* bytes = static_cast<const unsigned char*>(host.data_ptr());
  for (size_t i = 0; i < bits.size(); ++i) std::memcpy(&bits[i], bytes + i * element_bytes, element_bytes);
  return bits;
}

inline bool is_nan_bits(uint64_t bits, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return (bits & 0x7fffffffu) > 0x7f800000u;
    case DType::f64:
      return (bits & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    case DType::f16:
      return (bits & 0x7fffu) > 0x7c00u;
    case DType::bf16:
      return (bits & 0x7fffu) > 0x7f80u;
    default:
      return false;
  }
}

// Requires equal dtype, shape and element bits (NaN matching NaN); names the first differing element.
inline void require_same_bits(const Tensor& actual, const Tensor& expected, const std::string& what) {
  INFO(what);
  REQUIRE(actual.dtype() == expected.dtype());
  REQUIRE(actual.shape() == expected.shape());
  const std::vector<uint64_t> a = bit_patterns(actual), e = bit_patterns(expected);
  const DType dtype = actual.dtype();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == e[i] || (is_nan_bits(a[i], dtype) && is_nan_bits(e[i], dtype))) continue;
    INFO("element " << i << " of " << a.size() << ": bits 0x" << std::hex << a[i] << " vs expected 0x" << e[i]);
    REQUIRE(a[i] == e[i]);
  }
}

}  // namespace opsnn::testing
