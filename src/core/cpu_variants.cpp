// The choice of CPU kernel variant (cpu_variants.h): what this build holds, what this CPU runs, and what
// OPSNN_CPU_KERNELS asks for.
#include "core/cpu_variants.h"

#if defined(OPSNN_CPU_HAS_avx2)
#include <cpuid.h>  // __get_cpuid, bit_F16C (GCC and clang)
#endif

#include <cstdlib>
#include <string>

#include "opsnn/core/error.h"

#if defined(OPSNN_CPU_HAS_portable)
OPSNN_DECLARE_CPU_VARIANT(portable)
#endif
#if defined(OPSNN_CPU_HAS_avx2)
OPSNN_DECLARE_CPU_VARIANT(avx2)
#endif
#if defined(OPSNN_CPU_HAS_avx512)
OPSNN_DECLARE_CPU_VARIANT(avx512)
#endif
#if defined(OPSNN_CPU_HAS_native)
OPSNN_DECLARE_CPU_VARIANT(native)
#endif

namespace opsnn::cpu {
namespace {

#if defined(OPSNN_CPU_HAS_avx2)
// F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know "f16c").
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
// x86-64-v3's features that the compiler may use (__builtin_cpu_supports also checks that the OS saves
// the AVX registers).
bool runs_x86_64_v3() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
}
#if defined(OPSNN_CPU_HAS_avx512)
bool runs_x86_64_v4() {
  return runs_x86_64_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
#endif
#endif

struct Variant {
  const CpuKernels* kernels;
  bool runnable;
  const char* needs;  // what the CPU lacks when not runnable
};

// Every variant built, the best first.
const std::vector<Variant>& built_variants() {
  static const std::vector<Variant> variants = [] {
    std::vector<Variant> list;
#if defined(OPSNN_CPU_HAS_native)
    list.push_back({&native::variant_kernels(), true, ""});
#endif
#if defined(OPSNN_CPU_HAS_avx512)
    list.push_back({&avx512::variant_kernels(), runs_x86_64_v4(), "AVX-512 (F, BW, CD, DQ, VL)"});
#endif
#if defined(OPSNN_CPU_HAS_avx2)
    list.push_back({&avx2::variant_kernels(), runs_x86_64_v3(), "AVX2, FMA and F16C"});
#endif
#if defined(OPSNN_CPU_HAS_portable)
    list.push_back({&portable::variant_kernels(), true, ""});
#endif
    return list;
  }();
  return variants;
}

std::string names_of(const std::vector<const CpuKernels*>& variants) {
  std::string names;
  for (const CpuKernels* kernels : variants) {
    if (!names.empty()) names += ", ";
    names += kernels->name;
  }
  return names;
}

std::string built_names() {
  std::vector<const CpuKernels*> built;
  for (const Variant& variant : built_variants()) built.push_back(variant.kernels);
  return names_of(built);
}

}  // namespace

const std::vector<const CpuKernels*>& runnable_cpu_kernels() {
  static const std::vector<const CpuKernels*> runnable = [] {
    std::vector<const CpuKernels*> list;
    for (const Variant& variant : built_variants())
      if (variant.runnable) list.push_back(variant.kernels);
    return list;
  }();
  return runnable;
}

const CpuKernels& select_cpu_kernels(std::string_view request) {
  if (request.empty() || request == "auto") return *runnable_cpu_kernels().front();
  for (const Variant& variant : built_variants()) {
    if (request != variant.kernels->name) continue;
    OPSNN_CHECK_AS(ConfigError, variant.runnable, "OPSNN_CPU_KERNELS=", request, ": this CPU lacks ", variant.needs,
                   " (it runs ", names_of(runnable_cpu_kernels()), "; or auto)");
    return *variant.kernels;
  }
  throw ConfigError(detail::concat("OPSNN_CPU_KERNELS=", request, ": unknown CPU kernel variant (this build has ",
                                   built_names(), "; or auto)"));
}

const CpuKernels& cpu_kernels() {
  static const CpuKernels& chosen = []() -> const CpuKernels& {
    const char* request = std::getenv("OPSNN_CPU_KERNELS");
    return select_cpu_kernels(request != nullptr ? request : "");
  }();
  return chosen;
}

}  // namespace opsnn::cpu
