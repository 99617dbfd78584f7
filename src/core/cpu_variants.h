// The CPU kernels compiled once per instruction-set variant (CMakeLists.txt: OPSNN_CPU_VARIANT_SOURCES),
// and the choice among them at run time. The library itself is built for the architecture's baseline, so
// it loads on any CPU; the optimizer steps, fp16 block conversions and matrix products come from the best
// variant this CPU runs: x86-64 "avx512" (x86-64-v4), "avx2" (x86-64-v3: AVX2, FMA, F16C) or "portable";
// one "native" variant when built with OPSNN_NATIVE. Every variant gives the same optimizer bits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "opsnn/core/half.h"

namespace opsnn::optim {
struct FusedStepKernels;
}

namespace opsnn::cpu {

// out (m x n, row stride ldo) = alpha * op(a) * op(b) + beta * out. op(a) is m x k: a is stored m x k,
// or k x m when transpose_a; op(b) is k x n: b is k x n, or n x k when transpose_b; all row-major with
// the given row strides. beta == 0 never reads out (it may hold uninitialised memory).
template <typename T>
struct Matmul {
  const T* a = nullptr;
  int64_t lda = 0;
  bool transpose_a = false;
  const T* b = nullptr;
  int64_t ldb = 0;
  bool transpose_b = false;
  T* out = nullptr;
  int64_t ldo = 0;
  int64_t m = 0, n = 0, k = 0;
  T alpha = T(1), beta = T(0);
};

struct CpuKernels {
  const char* name;
  const optim::FusedStepKernels* step;
  void (*matmul_f32)(const Matmul<float>&);
  void (*matmul_f64)(const Matmul<double>&);
  void (*half_to_float)(const Half* input, float* output, int64_t count);
  void (*float_to_half)(const float* input, Half* output, int64_t count);
  bool hardware_half;  // the conversions use the CPU's (F16C)
};

// Every variant this build holds that this CPU can run, the best first.
const std::vector<const CpuKernels*>& runnable_cpu_kernels();
// The variant `request` names ("auto" or empty: the best runnable one). ConfigError when the name is
// unknown, not built, or needs instructions this CPU lacks.
const CpuKernels& select_cpu_kernels(std::string_view request);
// The variant in use: select_cpu_kernels of the OPSNN_CPU_KERNELS environment variable, chosen once.
const CpuKernels& cpu_kernels();

inline void matmul(const Matmul<float>& product) { cpu_kernels().matmul_f32(product); }
inline void matmul(const Matmul<double>& product) { cpu_kernels().matmul_f64(product); }

}  // namespace opsnn::cpu

// Each variant's table (src/core/cpu_variant_table.cpp, compiled with OPSNN_CPU_VARIANT=<name>).
#define OPSNN_DECLARE_CPU_VARIANT(variant)           \
  namespace opsnn::cpu::variant {                    \
  const ::opsnn::cpu::CpuKernels& variant_kernels(); \
  }
