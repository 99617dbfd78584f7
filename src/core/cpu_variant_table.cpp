// One CPU variant's kernel table (cpu_variants.h); this file is compiled once per variant with
// OPSNN_CPU_VARIANT naming it, like the kernels it lists.
#include "core/cpu_variants.h"
#include "ops/cpu/matmul_kernels.h"
#include "opsnn/optim/step_kernels.h"
#include "optim/cpu/half_blocks.h"

#ifndef OPSNN_CPU_VARIANT
#error "compiled once per CPU variant (CMakeLists.txt: OPSNN_CPU_VARIANT_SOURCES)"
#endif

namespace opsnn::optim::cpu::OPSNN_CPU_VARIANT {
const FusedStepKernels& fused_step_kernels();  // fused_step_kernels.cpp
}

#define OPSNN_VARIANT_NAME_(variant) #variant
#define OPSNN_VARIANT_NAME(variant) OPSNN_VARIANT_NAME_(variant)

namespace opsnn::cpu::OPSNN_CPU_VARIANT {

const CpuKernels& variant_kernels() {
  namespace step = optim::cpu::OPSNN_CPU_VARIANT;
  namespace products = ops::cpu::OPSNN_CPU_VARIANT;
  static const CpuKernels kernels{OPSNN_VARIANT_NAME(OPSNN_CPU_VARIANT),
                                  &step::fused_step_kernels(),
                                  products::matmul_f32,
                                  products::matmul_f64,
                                  step::half_to_float_block,
                                  step::float_to_half_block,
                                  step::hardware_half_conversion()};
  return kernels;
}

}  // namespace opsnn::cpu::OPSNN_CPU_VARIANT
