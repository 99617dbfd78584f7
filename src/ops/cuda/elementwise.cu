// CUDA elementwise kernels of the compute backend: broadcasting binary arithmetic over strided inputs,
// affine, relu and its backward, and the fused add + relu, for f32, f16 and bf16 storage (arithmetic in f32, one
// rounding on the store). The contiguous cases run through launch_map (16-byte vector steps, core/cuda/vectorized.cuh).
// The CPU twins are in src/ops/cpu/elementwise.cpp.
#include "core/cuda/conversions.cuh"
#include "core/cuda/current_stream.h"
#include "core/cuda/vectorized.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

namespace opsnn::cuda {
namespace {

template <BinaryKind kKind>
__device__ __forceinline__ float apply(float x, float y) {
  if constexpr (kKind == BinaryKind::add)
    return x + y;
  else if constexpr (kKind == BinaryKind::sub)
    return x - y;
  else if constexpr (kKind == BinaryKind::mul)
    return x * y;
  else
    return x / y;
}

template <BinaryKind kKind>
struct BinaryOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T x, T y) const {
    return from_float<T>(apply<kKind>(to_float(x), to_float(y)));
  }
};

struct AffineOp {
  float scale, shift;
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const {
    return from_float<T>(to_float(x) * scale + shift);
  }
};

// `v < 0 ? 0 : v`: NaN propagates, as on the CPU and in PyTorch. T{} is +0 in every storage type.
struct ReluOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const {
    return to_float(x) < 0.0f ? T{} : x;
  }
};

// The kink at 0 gets gradient 0.
struct ReluBackwardOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T grad_out, T x) const {
    return to_float(x) > 0.0f ? grad_out : T{};
  }
};

// relu(x + y) with the sum rounded to T first: the values add followed by relu would store.
struct AddReluOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T x, T y) const {
    const T sum = from_float<T>(to_float(x) + to_float(y));
    return ReluOp{}(sum);
  }
};

template <BinaryKind kKind, typename T>
__global__ void binary_kernel(const T* a, const T* b, T* out, BinaryLayout layout, int64_t count) {
  for (int64_t flat = global_thread_index(); flat < count; flat += global_thread_count()) {
    int64_t a_offset = 0, b_offset = 0, remaining = flat;
    for (int d = layout.dim - 1; d >= 0; --d) {
      const int64_t index = remaining % layout.extents[d];
      remaining /= layout.extents[d];
      a_offset += index * layout.a_strides[d];
      b_offset += index * layout.b_strides[d];
    }
    out[flat] = BinaryOp<kKind>{}(a[a_offset], b[b_offset]);
  }
}

template <BinaryKind kKind, typename T>
void launch_binary_typed(const T* a, const T* b, T* out, const BinaryLayout& layout, int64_t count) {
  // Both operands contiguous with out's shape (the residual add): vector steps, no index arithmetic.
  const bool dense = layout.dim == 1 && layout.a_strides[0] == 1 && layout.b_strides[0] == 1;
  if (dense)
    launch_map(BinaryOp<kKind>{}, count, current_stream(), out, a, b);
  else
    binary_kernel<kKind, T><<<blocks_for(count), kThreadsPerBlock, 0, current_stream()>>>(a, b, out, layout, count);
}

}  // namespace

template <typename T>
void launch_binary(BinaryKind kind, const T* a, const T* b, T* out, const BinaryLayout& layout, int64_t count) {
  if (count == 0) return;
  switch (kind) {
    case BinaryKind::add:
      launch_binary_typed<BinaryKind::add>(a, b, out, layout, count);
      break;
    case BinaryKind::sub:
      launch_binary_typed<BinaryKind::sub>(a, b, out, layout, count);
      break;
    case BinaryKind::mul:
      launch_binary_typed<BinaryKind::mul>(a, b, out, layout, count);
      break;
    case BinaryKind::div:
      launch_binary_typed<BinaryKind::div>(a, b, out, layout, count);
      break;
  }
}

template <typename T>
void launch_affine(const T* x, float scale, float shift, T* out, int64_t count) {
  launch_map(AffineOp{scale, shift}, count, current_stream(), out, x);
}

template <typename T>
void launch_relu(const T* x, T* out, int64_t count) {
  launch_map(ReluOp{}, count, current_stream(), out, x);
}

template <typename T>
void launch_relu_backward(const T* grad_out, const T* x, T* grad_in, int64_t count) {
  launch_map(ReluBackwardOp{}, count, current_stream(), grad_in, grad_out, x);
}

template <typename T>
void launch_add_relu(const T* a, const T* b, T* out, int64_t count) {
  launch_map(AddReluOp{}, count, current_stream(), out, a, b);
}

#define OPSNN_INSTANTIATE_ELEMENTWISE(T)                                                            \
  template void launch_binary<T>(BinaryKind, const T*, const T*, T*, const BinaryLayout&, int64_t); \
  template void launch_affine<T>(const T*, float, float, T*, int64_t);                              \
  template void launch_relu<T>(const T*, T*, int64_t);                                              \
  template void launch_relu_backward<T>(const T*, const T*, T*, int64_t);                           \
  template void launch_add_relu<T>(const T*, const T*, T*, int64_t);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_ELEMENTWISE)

}  // namespace opsnn::cuda
