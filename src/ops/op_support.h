// Helpers shared by the functional ops of src/ops/ (internal, not installed): broadcast views, summing a
// gradient back to an input's shape, dimension wrapping and argument checks. No autograd recording.
#pragma once

#include <vector>

#include "opsnn/core/tensor.h"
#include "opsnn/ops/backend.h"

namespace opsnn::ops::internal {

// A strided view of `tensor` as shape `target` under NumPy broadcasting (dimensions aligned at the
// right; missing or size-1 dimensions get stride 0). No copy; the caller checked that the shapes fit.
Tensor expand_view(const Tensor& tensor, const Shape& target);

// Sums `grad` (a broadcast result) over the dimensions that broadcasting added or expanded, giving a
// contiguous tensor of `shape`. Returns grad itself when the shapes already agree.
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);

// The non-negative position of dimension d (negative counts from the end) in a tensor of `shape`;
// throws ShapeError naming `op`, d and the shape.
int64_t wrap_dim(int64_t d, const Shape& shape, const char* op);

// The upstream gradient as a contiguous tensor of `dtype`, ready to hand to kernels.
Tensor contiguous_grad(const Tensor& grad_output, DType dtype);

// Whether accumulators[i] (Node::backward_into's offers) is there to add a gradient like `like` into in
// place: defined, of like's dtype, shape and device, and contiguous.
bool usable_accumulator(const std::vector<Tensor>& accumulators, size_t i, const Tensor& like);

// Validates a pooling's input ([N, C, H, W]) and geometry (what PyTorch accepts without ceil_mode) and returns
// the output shape: floor((H + 2 pad - kernel) / stride) + 1 per axis. Throws ShapeError naming `op`.
Shape checked_pool_shape(const char* op, const Tensor& input, const Pool2dGeometry& g);

// Throws naming `op` and both sides when a and b differ in dtype or device.
void check_same_dtype_and_device(const Tensor& a, const Tensor& b, const char* op);

}  // namespace opsnn::ops::internal
