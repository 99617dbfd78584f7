// CUDA elementwise kernels of the compute backend: broadcasting binary arithmetic over strided inputs,
// affine, relu and its backward. The CPU twins are in src/ops/cpu/elementwise.cpp.
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch_support.cuh"

namespace opsnn::cuda {
namespace {

template <BinaryKind kKind> __device__ __forceinline__ float apply(float x, float y) {
  if constexpr (kKind == BinaryKind::add) return x + y;
  else if constexpr (kKind == BinaryKind::sub) return x - y;
  else if constexpr (kKind == BinaryKind::mul) return x * y;
  else return x / y;
}

template <BinaryKind kKind>
__global__ void binary_kernel(const float* a, const float* b, float* out, BinaryLayout layout, int64_t count) {
  for (int64_t flat = global_thread_index(); flat < count; flat += global_thread_count()) {
    int64_t a_offset = 0, b_offset = 0, remaining = flat;
    for (int d = layout.dim - 1; d >= 0; --d) {
      const int64_t index = remaining % layout.extents[d];
      remaining /= layout.extents[d];
      a_offset += index * layout.a_strides[d];
      b_offset += index * layout.b_strides[d];
    }
    out[flat] = apply<kKind>(a[a_offset], b[b_offset]);
  }
}

// Both operands contiguous with out's shape: no index arithmetic.
template <BinaryKind kKind> __global__ void binary_dense_kernel(const float* a, const float* b, float* out, int64_t count) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count()) out[i] = apply<kKind>(a[i], b[i]);
}

template <BinaryKind kKind>
void launch_binary_typed(const float* a, const float* b, float* out, const BinaryLayout& layout, int64_t count) {
  const bool dense = layout.dim == 1 && layout.a_strides[0] == 1 && layout.b_strides[0] == 1;
  if (dense) binary_dense_kernel<kKind><<<blocks_for(count), kThreadsPerBlock>>>(a, b, out, count);
  else binary_kernel<kKind><<<blocks_for(count), kThreadsPerBlock>>>(a, b, out, layout, count);
}

__global__ void affine_kernel(const float* x, float scale, float shift, float* out, int64_t count) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count()) out[i] = x[i] * scale + shift;
}

// `v < 0 ? 0 : v`: NaN propagates, as on the CPU and in PyTorch.
__global__ void relu_kernel(const float* x, float* out, int64_t count) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count()) out[i] = x[i] < 0.0f ? 0.0f : x[i];
}

// The kink at 0 gets gradient 0.
__global__ void relu_backward_kernel(const float* grad_out, const float* x, float* grad_in, int64_t count) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count())
    grad_in[i] = x[i] > 0.0f ? grad_out[i] : 0.0f;
}

}  // namespace

void launch_binary(BinaryKind kind, const float* a, const float* b, float* out, const BinaryLayout& layout,
                   int64_t count) {
  if (count == 0) return;
  switch (kind) {
    case BinaryKind::add: launch_binary_typed<BinaryKind::add>(a, b, out, layout, count); break;
    case BinaryKind::sub: launch_binary_typed<BinaryKind::sub>(a, b, out, layout, count); break;
    case BinaryKind::mul: launch_binary_typed<BinaryKind::mul>(a, b, out, layout, count); break;
    case BinaryKind::div: launch_binary_typed<BinaryKind::div>(a, b, out, layout, count); break;
  }
}

void launch_affine(const float* x, float scale, float shift, float* out, int64_t count) {
  if (count == 0) return;
  affine_kernel<<<blocks_for(count), kThreadsPerBlock>>>(x, scale, shift, out, count);
}

void launch_relu(const float* x, float* out, int64_t count) {
  if (count == 0) return;
  relu_kernel<<<blocks_for(count), kThreadsPerBlock>>>(x, out, count);
}

void launch_relu_backward(const float* grad_out, const float* x, float* grad_in, int64_t count) {
  if (count == 0) return;
  relu_backward_kernel<<<blocks_for(count), kThreadsPerBlock>>>(grad_out, x, grad_in, count);
}

}  // namespace opsnn::cuda
