// CUDA kernels for the byte-level primitives of DeviceServices: copies with dtype conversion, fill, and
// accumulate (gradient summation). Contiguous same-dtype copies are cudaMemcpyAsync, contiguous
// converting copies, fill and accumulate take 16-byte vector steps (launch_map), strided copies decode
// indices with precomputed multipliers (FastDivider). Conversions follow convert_value (dtype.h).
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "core/cuda/conversions.cuh"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_kernels.h"
#include "core/cuda/fast_divide.h"
#include "core/cuda/vectorized.cuh"

namespace opsnn::cuda {
namespace {

// A strided source with dimensions of extent 1 dropped and neighbours that walk one arithmetic
// progression merged ([N, C, H, W] contiguous becomes [N*C*H*W] with stride 1); the destination is
// contiguous. `dividers` divide by `shape` where 32-bit indexing is used.
struct StridedLayout {
  int dim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
  FastDivider dividers[kMaxDims];
};

StridedLayout coalesce(int dim, const int64_t* shape, const int64_t* strides) {
  StridedLayout layout;
  for (int d = 0; d < dim; ++d) {
    if (shape[d] == 1) continue;
    if (layout.dim > 0 && layout.strides[layout.dim - 1] == strides[d] * shape[d]) {
      layout.shape[layout.dim - 1] *= shape[d];
      layout.strides[layout.dim - 1] = strides[d];
      continue;
    }
    layout.shape[layout.dim] = shape[d];
    layout.strides[layout.dim] = strides[d];
    ++layout.dim;
  }
  return layout;
}

// The source offset of destination element `flat` (layout.dim >= 1), innermost dimension first. Below
// 2^31 elements the divisions are FastDivider's multiply-shift; past that, 64-bit division.
template <bool kWideIndex>
__device__ __forceinline__ int64_t source_offset(const StridedLayout& layout, int64_t flat) {
  int64_t offset = 0;
  if constexpr (kWideIndex) {
#pragma unroll
    for (int d = kMaxDims - 1; d > 0; --d) {
      if (d >= layout.dim) continue;
      offset += (flat % layout.shape[d]) * layout.strides[d];
      flat /= layout.shape[d];
    }
  } else {
    uint32_t remaining = static_cast<uint32_t>(flat);
#pragma unroll
    for (int d = kMaxDims - 1; d > 0; --d) {
      if (d >= layout.dim) continue;
      const uint32_t quotient = layout.dividers[d].divide(remaining);
      offset += static_cast<int64_t>(remaining - quotient * layout.dividers[d].divisor) * layout.strides[d];
      remaining = quotient;
    }
    flat = remaining;
  }
  return offset + flat * layout.strides[0];
}

// Each thread gathers kUnroll elements a block apart before storing any, so several loads are in flight;
// the stores of a warp are contiguous.
constexpr int kGatherUnroll = 4;

template <typename To, typename From, bool kWideIndex>
__global__ void strided_copy_kernel(To* destination, const From* source, StridedLayout layout, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * kGatherUnroll;
  for (int64_t base = blockIdx.x * static_cast<int64_t>(blockDim.x) * kGatherUnroll + threadIdx.x; base < count;
       base += step) {
    From values[kGatherUnroll];
#pragma unroll
    for (int k = 0; k < kGatherUnroll; ++k) {
      const int64_t flat = base + k * static_cast<int64_t>(blockDim.x);
      if (flat < count) values[k] = source[source_offset<kWideIndex>(layout, flat)];
    }
#pragma unroll
    for (int k = 0; k < kGatherUnroll; ++k) {
      const int64_t flat = base + k * static_cast<int64_t>(blockDim.x);
      if (flat < count) destination[flat] = convert_element<To>(values[k]);
    }
  }
}

template <typename To, typename From>
void launch_gather(To* destination, const From* source, const StridedLayout& layout, int64_t count,
                   cudaStream_t stream) {
  const int64_t work_items = (count + kGatherUnroll - 1) / kGatherUnroll;
  if (count > FastDivider::kMaxDividend) {
    const unsigned blocks = resident_grid<strided_copy_kernel<To, From, true>>(work_items);
    strided_copy_kernel<To, From, true><<<blocks, kMapThreadsPerBlock, 0, stream>>>(destination, source, layout, count);
    return;
  }
  StridedLayout narrow = layout;
  for (int d = 0; d < narrow.dim; ++d) narrow.dividers[d] = FastDivider(static_cast<uint32_t>(narrow.shape[d]));
  const unsigned blocks = resident_grid<strided_copy_kernel<To, From, false>>(work_items);
  strided_copy_kernel<To, From, false><<<blocks, kMapThreadsPerBlock, 0, stream>>>(destination, source, narrow, count);
}

// A copy that is a batch of matrix transposes: destination [batches, rows, columns] (contiguous) from a
// source whose coalesced layout is [batches, rows, columns] with strides [rows * columns, 1, rows], i.e.
// destination[b][r][c] = source[b][c][r] (an NCHW <-> NHWC permute: [N, HW, C] from [N, C, HW]).
struct TransposeShape {
  int64_t batches = 0, rows = 0, columns = 0;
};

bool as_batched_transpose(const StridedLayout& layout, TransposeShape& out) {
  const int extra = layout.dim == 3 ? 1 : 0;  // a leading batch dimension
  if (layout.dim != 2 + extra) return false;
  const int64_t rows = layout.shape[extra], columns = layout.shape[extra + 1];
  if (layout.strides[extra] != 1 || layout.strides[extra + 1] != rows) return false;
  if (extra && layout.strides[0] != rows * columns) return false;
  out = {extra ? layout.shape[0] : 1, rows, columns};
  return true;
}

constexpr int kTile = 32, kTileRows = 8;  // a block moves a 32 x 32 tile, each thread 4 of its rows

// One tile per block: the block reads a 32 x 32 tile of the source (its rows contiguous in memory, so the
// reads coalesce), and writes it transposed through shared memory (the writes coalesce too). The extra
// column keeps the column reads from shared memory free of bank conflicts.
template <typename Bits>
__global__ void __launch_bounds__(kTile* kTileRows)
    batched_transpose_kernel(Bits* destination, const Bits* source, TransposeShape shape) {
  __shared__ Bits tile[kTile][kTile + 1];
  const int64_t batch = blockIdx.z, matrix = batch * shape.rows * shape.columns;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTile, column0 = static_cast<int64_t>(blockIdx.y) * kTile;
  // source[b][c][r]: column c of the destination is row c of the source, contiguous along r.
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    const int64_t c = column0 + k, r = row0 + threadIdx.x;
    if (c < shape.columns && r < shape.rows) tile[k][threadIdx.x] = source[matrix + c * shape.rows + r];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    const int64_t r = row0 + k, c = column0 + threadIdx.x;
    if (r < shape.rows && c < shape.columns) destination[matrix + r * shape.columns + c] = tile[threadIdx.x][k];
  }
}

template <typename Bits>
bool launch_batched_transpose_copy(Bits* destination, const Bits* source, const TransposeShape& shape,
                                   cudaStream_t stream) {
  const int64_t row_tiles = (shape.rows + kTile - 1) / kTile, column_tiles = (shape.columns + kTile - 1) / kTile;
  if (row_tiles > 0x7fffffff || column_tiles > 65535 || shape.batches > 65535) return false;
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(column_tiles),
                  static_cast<unsigned>(shape.batches));
  batched_transpose_kernel<Bits><<<grid, dim3(kTile, kTileRows), 0, stream>>>(destination, source, shape);
  return true;
}

template <typename To>
struct ConvertOp {
  template <typename From>
  __device__ __forceinline__ To operator()(From value) const {
    return convert_element<To>(value);
  }
};

template <typename T>
struct FillOp {
  T value;
  __device__ __forceinline__ T operator()() const { return value; }
};

template <typename T>
__device__ __forceinline__ double to_double(T value) {
  if constexpr (is_16_bit_float<T>)
    return to_float(value);
  else
    return static_cast<double>(value);
}
template <typename T>
__device__ __forceinline__ T from_double(double value) {
  if constexpr (is_16_bit_float<T>)
    return from_float<T>(static_cast<float>(value));
  else
    return static_cast<T>(value);
}

// destination + alpha * source computed in double, rounded once to T (twice for f16/bf16: to float, then
// to 16 bits).
template <typename T>
struct AccumulateOp {
  double alpha;
  __device__ __forceinline__ T operator()(T destination, T source) const {
    return from_double<T>(to_double(destination) + alpha * to_double(source));
  }
};

// destination + source for alpha == 1, in float: the same bits as AccumulateOp. For f32 and bf16 operands
// the float sum is the exact sum rounded once, and so is the double sum rounded to float, because a
// double keeps more than 2 * 24 + 2 bits (Figueroa, "When is double rounding innocuous?", SIGNUM 1995);
// f16 sums are exact in double, so there both round the exact sum once to float before going to f16.
struct AddOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T destination, T source) const {
    return from_float<T>(to_float(destination) + to_float(source));
  }
};

template <typename Fn>
void visit(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      break;
    case DType::f64:
      fn(double{});
      break;
    case DType::f16:
      fn(Half{});
      break;
    case DType::bf16:
      fn(BFloat16{});
      break;
    case DType::i32:
      fn(int32_t{});
      break;
    case DType::i64:
      fn(int64_t{});
      break;
    case DType::u8:
      fn(uint8_t{});
      break;
  }
}

// Calls fn with an unsigned integer of `bytes` bytes: a same-dtype gather moves bits, whatever they mean.
template <typename Fn>
void visit_bits(size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1:
      fn(uint8_t{});
      break;
    case 2:
      fn(uint16_t{});
      break;
    case 4:
      fn(uint32_t{});
      break;
    case 8:
      fn(uint64_t{});
      break;
  }
}

}  // namespace

void launch_strided_copy(void* destination, DType destination_dtype, const void* source, DType source_dtype, int dim,
                         const int64_t* shape, const int64_t* source_strides, void* stream_handle) {
  int64_t count = 1;
  for (int d = 0; d < dim; ++d) count *= shape[d];
  if (count == 0) return;
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  const StridedLayout layout = coalesce(dim, shape, source_strides);
  const bool contiguous = layout.dim == 0 || (layout.dim == 1 && layout.strides[0] == 1);
  if (contiguous && destination_dtype == source_dtype) {
    OPSNN_CUDA_CHECK(cudaMemcpyAsync(destination, source, static_cast<size_t>(count) * dtype_size(source_dtype),
                                     cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (destination_dtype == source_dtype) {
    TransposeShape transpose;
    const bool is_transpose = as_batched_transpose(layout, transpose);
    visit_bits(dtype_size(source_dtype), [&](auto tag) {
      using Bits = decltype(tag);
      Bits* out = static_cast<Bits*>(destination);
      const Bits* in = static_cast<const Bits*>(source);
      // A batch of transposes (a layout permute) through shared-memory tiles: the gather would read or
      // write a few bytes per 32-byte sector.
      if (is_transpose && launch_batched_transpose_copy(out, in, transpose, stream)) return;
      launch_gather(out, in, layout, count, stream);
    });
    return;
  }
  visit(destination_dtype, [&](auto out_tag) {
    using To = decltype(out_tag);
    visit(source_dtype, [&](auto in_tag) {
      using From = decltype(in_tag);
      if constexpr (!std::is_same_v<To, From>) {
        To* out = static_cast<To*>(destination);
        const From* in = static_cast<const From*>(source);
        if (contiguous)
          launch_map(ConvertOp<To>{}, count, stream, out, in);
        else
          launch_gather(out, in, layout, count, stream);
      }
    });
  });
}

void launch_fill(void* destination, DType dtype, double value, int64_t count, void* stream_handle) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  if (value == 0.0 && !std::signbit(value)) {  // +0 is all zero bits in every dtype
    OPSNN_CUDA_CHECK(cudaMemsetAsync(destination, 0, static_cast<size_t>(count) * dtype_size(dtype), stream));
    return;
  }
  visit(dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_map(FillOp<T>{convert_value<T>(value)}, count, stream, static_cast<T*>(destination));
  });
}

void launch_accumulate(void* destination, const void* source, DType dtype, double alpha, int64_t count,
                       void* stream_handle) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  visit(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(destination);
    const T* in = static_cast<const T*>(source);
    if constexpr (std::is_same_v<T, float> || is_16_bit_float<T>) {
      if (alpha == 1.0) {
        launch_map(AddOp{}, count, stream, out, static_cast<const T*>(out), in);
        return;
      }
    }
    launch_map(AccumulateOp<T>{alpha}, count, stream, out, static_cast<const T*>(out), in);
  });
}

// An f32 destination plus a 16-bit source widened exactly: the bits of converting the source to f32 and
// then AddOp, without the converted copy.
struct AddWidenedOp {
  template <typename S>
  __device__ __forceinline__ float operator()(float destination, S source) const {
    return destination + to_float(source);
  }
};

bool launch_accumulate_converted(void* destination, DType destination_dtype, const void* source, DType source_dtype,
                                 int64_t count, void* stream_handle) {
  if (destination_dtype != DType::f32 || (source_dtype != DType::bf16 && source_dtype != DType::f16)) return false;
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  float* out = static_cast<float*>(destination);
  if (source_dtype == DType::bf16)
    launch_map(AddWidenedOp{}, count, stream, out, static_cast<const float*>(out),
               static_cast<const BFloat16*>(source));
  else
    launch_map(AddWidenedOp{}, count, stream, out, static_cast<const float*>(out), static_cast<const Half*>(source));
  return true;
}

}  // namespace opsnn::cuda
