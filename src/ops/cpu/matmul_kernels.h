// The CPU matrix products through Eigen, compiled once per CPU variant (core/cpu_variants.h) into that
// variant's namespace; callers go through cpu::matmul, which takes the variant in use.
#pragma once

#include "core/cpu_variants.h"

namespace opsnn::ops::cpu::OPSNN_CPU_VARIANT {

void matmul_f32(const opsnn::cpu::Matmul<float>& product);
void matmul_f64(const opsnn::cpu::Matmul<double>& product);

}  // namespace opsnn::ops::cpu::OPSNN_CPU_VARIANT
