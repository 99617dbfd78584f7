// CUDA elementwise kernels of the compute backend: broadcasting binary arithmetic over strided inputs,
// affine, relu and its backward, for f32, f16 and bf16 storage (arithmetic in f32, one rounding on the
// store). The CPU twins are in src/ops/cpu/elementwise.cpp.
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
    out[flat] = T(apply<kKind>(static_cast<float>(a[a_offset]), static_cast<float>(b[b_offset])));
  }
}

// Both operands contiguous with out's shape: no index arithmetic.
template <BinaryKind kKind, typename T> __global__ void binary_dense_kernel(const T* a, const T* b, T* out, int64_t count) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count())
    out[i] = T(apply<kKind>(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

template <BinaryKind kKind, typename T>
void launch_binary_typed(const T* a, const T* b, T* out, const BinaryLayout& layout, int64_t count) {
  const bool dense = layout.dim == 1 && layout.a_strides[0] == 1 && layout.b_strides[0] == 1;
  if (dense) binary_dense_kernel<kKind, T><<<blocks_for(count), kThreadsPerBlock>>>(a, b, out, count);
  else binary_kernel<kKind, T><<<blocks_for(count), kThreadsPerBlock>>>(a, b, out, layout, count);
}

template <typename T> __global__ void affine_kernel(const T* x, float scale, float shift, T* out, int64_t count) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count())
    out[i] = T(static_cast<float>(x[i]) * scale + shift);
}

// `v < 0 ? 0 : v`: NaN propagates, as on the CPU and in PyTorch.
template <typename T> __global__ void relu_kernel(const T* x, T* out, int64_t count) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count())
    out[i] = static_cast<float>(x[i]) < 0.0f ? T(0.0f) : x[i];
}

// The kink at 0 gets gradient 0.
template <typename T> __global__ void relu_backward_kernel(const T* grad_out, const T* x, T* grad_in, int64_t count) {
  for (int64_t i = global_thread_index(); i < count; i += global_thread_count())
    grad_in[i] = static_cast<float>(x[i]) > 0.0f ? grad_out[i] : T(0.0f);
}

}  // namespace

template <typename T>
void launch_binary(BinaryKind kind, const T* a, const T* b, T* out, const BinaryLayout& layout, int64_t count) {
  if (count == 0) return;
  switch (kind) {
    case BinaryKind::add: launch_binary_typed<BinaryKind::add>(a, b, out, layout, count); break;
    case BinaryKind::sub: launch_binary_typed<BinaryKind::sub>(a, b, out, layout, count); break;
    case BinaryKind::mul: launch_binary_typed<BinaryKind::mul>(a, b, out, layout, count); break;
    case BinaryKind::div: launch_binary_typed<BinaryKind::div>(a, b, out, layout, count); break;
  }
}

template <typename T> void launch_affine(const T* x, float scale, float shift, T* out, int64_t count) {
  if (count == 0) return;
  affine_kernel<<<blocks_for(count), kThreadsPerBlock>>>(x, scale, shift, out, count);
}

template <typename T> void launch_relu(const T* x, T* out, int64_t count) {
  if (count == 0) return;
  relu_kernel<<<blocks_for(count), kThreadsPerBlock>>>(x, out, count);
}

template <typename T> void launch_relu_backward(const T* grad_out, const T* x, T* grad_in, int64_t count) {
  if (count == 0) return;
  relu_backward_kernel<<<blocks_for(count), kThreadsPerBlock>>>(grad_out, x, grad_in, count);
}

#define OPSNN_INSTANTIATE_ELEMENTWISE(T)                                                                   \
  template void launch_binary<T>(BinaryKind, const T*, const T*, T*, const BinaryLayout&, int64_t);       \
  template void launch_affine<T>(const T*, float, float, T*, int64_t);                                     \
  template void launch_relu<T>(const T*, T*, int64_t);                                                     \
  template void launch_relu_backward<T>(const T*, const T*, T*, int64_t);
OPSNN_FOR_EACH_FLOATING_TYPE(OPSNN_INSTANTIATE_ELEMENTWISE)

}  // namespace opsnn::cuda
