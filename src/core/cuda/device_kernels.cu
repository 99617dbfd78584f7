// CUDA kernels for the byte-level primitives of DeviceServices: strided copy with dtype conversion,
// fill, and accumulate (gradient summation). Conversions use the shared rules of opsnn/core/half.h.
#include <cuda_runtime.h>

#include "core/cuda/device_kernels.h"
#include "opsnn/core/half.h"

namespace opsnn::cuda {
namespace {

struct StridedLayout {
  int dim;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
};

template <typename T> __device__ __forceinline__ double load_as_double(const T* p) { return static_cast<double>(*p); }
template <> __device__ __forceinline__ double load_as_double<Half>(const Half* p) { return half_bits_to_float(p->bits); }
template <> __device__ __forceinline__ double load_as_double<BFloat16>(const BFloat16* p) {
  return bf16_bits_to_float(p->bits);
}
template <typename T> __device__ __forceinline__ void store_from_double(T* p, double v) { *p = static_cast<T>(v); }
template <> __device__ __forceinline__ void store_from_double<Half>(Half* p, double v) {
  p->bits = float_to_half_bits(static_cast<float>(v));
}
template <> __device__ __forceinline__ void store_from_double<BFloat16>(BFloat16* p, double v) {
  p->bits = float_to_bf16_bits(static_cast<float>(v));
}

template <typename To, typename From>
__global__ void strided_copy_kernel(To* destination, const From* source, StridedLayout layout, int64_t count) {
  for (int64_t flat = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; flat < count;
       flat += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t offset = 0, remaining = flat;
    for (int d = layout.dim - 1; d >= 0; --d) {
      offset += (remaining % layout.shape[d]) * layout.strides[d];
      remaining /= layout.shape[d];
    }
    if constexpr (std::is_same_v<To, From>) {
      destination[flat] = source[offset];
    } else {
      store_from_double(destination + flat, load_as_double(source + offset));
    }
  }
}

template <typename T> __global__ void fill_kernel(T* destination, double value, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_from_double(destination + i, value);
}

template <typename T> __global__ void accumulate_kernel(T* destination, const T* source, double alpha, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_from_double(destination + i, load_as_double(destination + i) + alpha * load_as_double(source + i));
}

unsigned grid_for(int64_t count) {
  int64_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

template <typename Fn> void visit(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn(float{}); break;
    case DType::f64: fn(double{}); break;
    case DType::f16: fn(Half{}); break;
    case DType::bf16: fn(BFloat16{}); break;
    case DType::i32: fn(int32_t{}); break;
    case DType::i64: fn(int64_t{}); break;
    case DType::u8: fn(uint8_t{}); break;
  }
}

}  // namespace

void launch_strided_copy(void* destination, DType destination_dtype, const void* source, DType source_dtype, int dim,
                         const int64_t* shape, const int64_t* source_strides, void* stream) {
  StridedLayout layout{};
  layout.dim = dim;
  int64_t count = 1;
  for (int d = 0; d < dim; ++d) {
    layout.shape[d] = shape[d];
    layout.strides[d] = source_strides[d];
    count *= shape[d];
  }
  if (count == 0) return;
  visit(destination_dtype, [&](auto out_tag) {
    using To = decltype(out_tag);
    visit(source_dtype, [&](auto in_tag) {
      using From = decltype(in_tag);
      strided_copy_kernel<To, From><<<grid_for(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<To*>(destination), static_cast<const From*>(source), layout, count);
    });
  });
}

void launch_fill(void* destination, DType dtype, double value, int64_t count, void* stream) {
  visit(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<grid_for(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<T*>(destination), value,
                                                                                  count);
  });
}

void launch_accumulate(void* destination, const void* source, DType dtype, double alpha, int64_t count,
                       void* stream) {
  visit(dtype, [&](auto tag) {
    using T = decltype(tag);
    accumulate_kernel<T><<<grid_for(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(destination), static_cast<const T*>(source), alpha, count);
  });
}

}  // namespace opsnn::cuda
