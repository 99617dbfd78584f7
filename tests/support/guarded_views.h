// Views at a chosen misalignment inside a larger buffer, for tests of kernels that take vector steps:
// the view starts `shift` elements past a 16-element boundary, and the buffer elements around it (the
// guards) let a test check that nothing outside the view was written.
#pragma once

#include <string>

#include "opsnn/core/tensor.h"
#include "support/bit_patterns.h"
#include "support/catch.h"

namespace opsnn::testing {

// Guard elements on each side of a view (a multiple of every vector width in elements).
inline constexpr int64_t kGuardElements = 16;

struct GuardedView {
  Tensor buffer, view;
  Tensor original;  // the buffer's values before any kernel ran, on the CPU
  int64_t start = 0;
};

// `values` (CPU) copied into a buffer on `device`, the view at element kGuardElements + shift.
inline GuardedView guarded_view(const Tensor& values, int64_t shift, Device device) {
  const int64_t count = values.numel(), start = kGuardElements + shift;
  Tensor host = Tensor::full({count + 2 * kGuardElements + 8}, 123.0, values.dtype());
  host.slice(0, start, start + count).copy_(values);
  Tensor buffer = host.to(device);
  return {buffer, buffer.slice(0, start, start + count), host, start};
}

// The buffer around the view still holds its original bits.
inline void require_guards_intact(const GuardedView& guarded, const std::string& what) {
  const int64_t end = guarded.start + guarded.view.numel(), total = guarded.buffer.numel();
  require_same_bits(guarded.buffer.slice(0, 0, guarded.start), guarded.original.slice(0, 0, guarded.start),
                    what + " (before the view)");
  require_same_bits(guarded.buffer.slice(0, end, total), guarded.original.slice(0, end, total),
                    what + " (after the view)");
}

}  // namespace opsnn::testing
