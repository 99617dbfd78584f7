// Pieces shared by the CPU kernels of src/ops/cpu/: dispatch to f32/f64 code (a TypeError naming the
// dtype for anything else) and the size below which OpenMP's start-up cost outweighs its speed-up.
#pragma once

#include <cstdint>

#include "opsnn/core/dtype.h"
#include "opsnn/core/error.h"

namespace opsnn::ops::cpu {

// Loops over fewer elements than this run on one thread.
inline constexpr int64_t kParallelMinElements = 32768;

// Calls fn(T{}) with T = float or double; `kernel` names the caller in the error for other dtypes.
template <typename Fn>
void visit_floating(DType dtype, const char* kernel, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f64:
      fn(double{});
      return;
    default:
      throw TypeError(
          detail::concat("CPU ", kernel, ": dtype ", dtype_name(dtype), " is not supported (supported: f32, f64)"));
  }
}

}  // namespace opsnn::ops::cpu
