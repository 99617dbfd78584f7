// CPU elementwise kernels: broadcasting binary arithmetic over strided inputs, affine, relu and its
// backward, and the fused add + relu. Loops are flat (or row-wise with a vectorizable inner loop) and OpenMP-parallel
// when large.
#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"

namespace opsnn::ops {
namespace {

// The iteration space of a binary op after merging dimensions that every operand walks contiguously:
// [N, C, H, W] + [1, C, 1, 1] becomes extents [N, C, H*W] with strides a [C*H*W, H*W, 1], b [0, 1, 0].
struct BinaryLayout {
  Shape extents;
  Shape a_strides, b_strides, out_strides;
};

BinaryLayout coalesce(const Tensor& a, const Tensor& b, const Tensor& out) {
  BinaryLayout layout;
  Shape out_strides = contiguous_strides(out.shape());
  for (size_t d = 0; d < out.shape().size(); ++d) {
    int64_t extent = out.shape()[d];
    if (extent == 1) continue;  // contributes nothing to any offset
    if (!layout.extents.empty()) {
      int64_t inner_extent = extent;
      // Merge d into the previous (outer) kept dimension when each operand's outer stride equals its
      // stride here times this extent, i.e. the two dimensions form one arithmetic progression.
      bool mergeable = layout.a_strides.back() == a.strides()[d] * inner_extent &&
                       layout.b_strides.back() == b.strides()[d] * inner_extent &&
                       layout.out_strides.back() == out_strides[d] * inner_extent;
      if (mergeable) {
        layout.extents.back() *= extent;
        layout.a_strides.back() = a.strides()[d];
        layout.b_strides.back() = b.strides()[d];
        layout.out_strides.back() = out_strides[d];
        continue;
      }
    }
    layout.extents.push_back(extent);
    layout.a_strides.push_back(a.strides()[d]);
    layout.b_strides.push_back(b.strides()[d]);
    layout.out_strides.push_back(out_strides[d]);
  }
  if (layout.extents.empty()) {  // a single element
    layout.extents = {1};
    layout.a_strides = layout.b_strides = layout.out_strides = {1};
  }
  return layout;
}

template <typename T, typename Op>
void run_row(const T* a, int64_t a_step, const T* b, int64_t b_step, T* out, int64_t count, Op op) {
  // Separate loops for the common stride patterns so the compiler can vectorize each.
  if (a_step == 1 && b_step == 1) {
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) out[i] = op(a[i], b[i]);
  } else if (a_step == 1 && b_step == 0) {
    const T scalar = b[0];
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) out[i] = op(a[i], scalar);
  } else if (a_step == 0 && b_step == 1) {
    const T scalar = a[0];
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) out[i] = op(scalar, b[i]);
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = op(a[i * a_step], b[i * b_step]);
  }
}

template <typename T, typename Op>
void binary_typed(const Tensor& a, const Tensor& b, Tensor& out, Op op) {
  const int64_t total = out.numel();
  if (total == 0) return;
  BinaryLayout layout = coalesce(a, b, out);
  const int rank = static_cast<int>(layout.extents.size());
  const int64_t inner = layout.extents.back();
  const int64_t rows = total / inner;
  const T* a_base = a.data<T>();
  const T* b_base = b.data<T>();
  T* out_base = out.data<T>();
  // Long rows are cut into chunks so a single contiguous row still spreads over the threads.
  constexpr int64_t kChunk = 8192;
  const int64_t chunks_per_row = (inner + kChunk - 1) / kChunk;
  const int64_t tasks = rows * chunks_per_row;
  const int64_t a_step = layout.a_strides.back(), b_step = layout.b_strides.back();
#pragma omp parallel for schedule(static) if (total >= cpu::kParallelMinElements && tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t row = task / chunks_per_row;
    const int64_t start = (task % chunks_per_row) * kChunk;
    const int64_t count = std::min(kChunk, inner - start);
    int64_t a_offset = start * a_step, b_offset = start * b_step, out_offset = start, remaining = row;
    for (int d = rank - 2; d >= 0; --d) {
      int64_t index = remaining % layout.extents[d];
      remaining /= layout.extents[d];
      a_offset += index * layout.a_strides[d];
      b_offset += index * layout.b_strides[d];
      out_offset += index * layout.out_strides[d];
    }
    run_row(a_base + a_offset, a_step, b_base + b_offset, b_step, out_base + out_offset, count, op);
  }
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  OPSNN_CHECK_AS(ShapeError, a.shape() == out.shape() && b.shape() == out.shape(),
                 "CPU binary: inputs must be broadcast to the output shape ", shape_str(out.shape()), ", got ",
                 shape_str(a.shape()), " and ", shape_str(b.shape()));
  OPSNN_CHECK(out.is_contiguous(), "CPU binary: the output must be contiguous");
  check_same_dtype(a, b, "CPU binary");
  check_same_dtype(a, out, "CPU binary");
  cpu::visit_floating(a.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::add:
        binary_typed<T>(a, b, out, [](T x, T y) { return x + y; });
        break;
      case BinaryOp::sub:
        binary_typed<T>(a, b, out, [](T x, T y) { return x - y; });
        break;
      case BinaryOp::mul:
        binary_typed<T>(a, b, out, [](T x, T y) { return x * y; });
        break;
      case BinaryOp::div:
        binary_typed<T>(a, b, out, [](T x, T y) { return x / y; });
        break;
    }
  });
}

void CpuBackend::affine(const Tensor& x, double scale, double shift, Tensor& out) {
  check_same_shape(x, out, "CPU affine");
  check_same_dtype(x, out, "CPU affine");
  OPSNN_CHECK(x.is_contiguous() && out.is_contiguous(), "CPU affine: operands must be contiguous");
  cpu::visit_floating(x.dtype(), "affine", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* result = out.data<T>();
    const T factor = static_cast<T>(scale), offset = static_cast<T>(shift);
    const int64_t count = x.numel();
#pragma omp parallel for simd schedule(static) if (count >= cpu::kParallelMinElements)
    for (int64_t i = 0; i < count; ++i) result[i] = in[i] * factor + offset;
  });
}

void CpuBackend::relu(const Tensor& x, Tensor& out) {
  check_same_shape(x, out, "CPU relu");
  check_same_dtype(x, out, "CPU relu");
  OPSNN_CHECK(x.is_contiguous() && out.is_contiguous(), "CPU relu: operands must be contiguous");
  cpu::visit_floating(x.dtype(), "relu", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* result = out.data<T>();
    const int64_t count = x.numel();
    // `v < 0 ? 0 : v` rather than max(v, 0): NaN propagates, as in PyTorch.
#pragma omp parallel for simd schedule(static) if (count >= cpu::kParallelMinElements)
    for (int64_t i = 0; i < count; ++i) result[i] = in[i] < T(0) ? T(0) : in[i];
  });
}

void CpuBackend::relu_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in) {
  check_same_shape(grad_out, x, "CPU relu_backward");
  check_same_shape(grad_out, grad_in, "CPU relu_backward");
  check_same_dtype(grad_out, x, "CPU relu_backward");
  check_same_dtype(grad_out, grad_in, "CPU relu_backward");
  OPSNN_CHECK(grad_out.is_contiguous() && x.is_contiguous() && grad_in.is_contiguous(),
              "CPU relu_backward: operands must be contiguous");
  cpu::visit_floating(x.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* upstream = grad_out.data<T>();
    const T* in = x.data<T>();
    T* result = grad_in.data<T>();
    const int64_t count = x.numel();
    // The kink at 0 gets gradient 0, as in PyTorch.
#pragma omp parallel for simd schedule(static) if (count >= cpu::kParallelMinElements)
    for (int64_t i = 0; i < count; ++i) result[i] = in[i] > T(0) ? upstream[i] : T(0);
  });
}

void CpuBackend::add_relu(const Tensor& a, const Tensor& b, Tensor& out) {
  check_same_shape(a, b, "CPU add_relu");
  check_same_shape(a, out, "CPU add_relu");
  check_same_dtype(a, b, "CPU add_relu");
  check_same_dtype(a, out, "CPU add_relu");
  OPSNN_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(),
              "CPU add_relu: operands must be contiguous");
  cpu::visit_floating(a.dtype(), "add_relu", [&](auto tag) {
    using T = decltype(tag);
    const T* left = a.data<T>();
    const T* right = b.data<T>();
    T* result = out.data<T>();
    const int64_t count = a.numel();
    // The sum rounded to T, then relu as in relu(): equal bit for bit to add followed by relu.
#pragma omp parallel for simd schedule(static) if (count >= cpu::kParallelMinElements)
    for (int64_t i = 0; i < count; ++i) {
      const T sum = left[i] + right[i];
      result[i] = sum < T(0) ? T(0) : sum;
    }
  });
}

}  // namespace opsnn::ops
