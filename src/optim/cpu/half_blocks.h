// Block conversions between fp16 storage and fp32 for the CPU optimizer kernels: fp16 states are staged
// through fp32 buffers a block at a time, so the update loop stays a plain vectorized fp32 loop. With F16C
// (x86) the conversion is the hardware one, IEEE round-to-nearest-even like half.h's (a test checks they
// agree bit for bit); without it, half.h's scalar conversion.
#pragma once

#include <cstdint>

#include "opsnn/core/half.h"

// Compiled once per CPU variant (core/cpu_variants.h), in that variant's namespace.
namespace opsnn::optim::cpu::OPSNN_CPU_VARIANT {

void half_to_float_block(const Half* input, float* output, int64_t count);
void float_to_half_block(const float* input, Half* output, int64_t count);
// Whether this variant uses the hardware conversion (F16C).
bool hardware_half_conversion();

}  // namespace opsnn::optim::cpu::OPSNN_CPU_VARIANT
