// CUDA kernels of the row-sparse embedding updates: coalescing duplicate rows with atomics (claim a slot
// per row, scatter-add the occurrences into it, scale and sum squares), then sparse SGD and lazy
// Adam/AdamW over the coalesced rows, one warp per row. The per-element math is rules.h, as on the CPU.
#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "optim/cuda/sparse_rows_kernels.h"

namespace opsnn::optim::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride loops beyond this

int blocks_for(int64_t items, int64_t per_block) {
  int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

__device__ __forceinline__ int64_t global_thread() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void clear_row_slots_kernel(int* row_slots, int64_t num_rows) {
  for (int64_t i = global_thread(); i < num_rows; i += thread_stride()) row_slots[i] = -1;
}

__global__ void coalesce_begin_kernel(CoalesceHeader* header) {
  header->first_bad_position = kNoBadPosition;
  header->sum_of_squares = 0.0;
  header->row_count = 0;
  header->unused = 0;
}

__global__ void claim_rows_kernel(const int64_t* indices, int64_t count, int64_t position_base, int64_t num_rows,
                                  int* row_slots, int64_t* unique_rows, CoalesceHeader* header) {
  for (int64_t i = global_thread(); i < count; i += thread_stride()) {
    const int64_t row = indices[i];
    if (row < 0 || row >= num_rows) {
      atomicMin(&header->first_bad_position, static_cast<unsigned long long>(position_base + i));
      continue;
    }
    // -1 -> -2 by exactly one occurrence of the row: that one takes the next slot. The slot number itself
    // is published by the next kernel (launch_assign_slots), so no thread here waits for another.
    if (atomicCAS(&row_slots[row], -1, -2) == -1) unique_rows[atomicAdd(&header->row_count, 1)] = row;
  }
}

__global__ void assign_slots_kernel(const int64_t* unique_rows, const CoalesceHeader* header, int64_t width,
                                    int* row_slots, float* values) {
  const int64_t used = static_cast<int64_t>(header->row_count) * width;
  for (int64_t e = global_thread(); e < used; e += thread_stride()) {
    // -0.0f is the identity of fp32 addition (+0.0f is not: +0 + -0 = +0), so a row that occurs once
    // ends up with exactly its bits, as the CPU's copy of the first occurrence.
    values[e] = -0.0f;
    if (e % width == 0) row_slots[unique_rows[e / width]] = static_cast<int>(e / width);
  }
}

__global__ void scatter_rows_kernel(const int64_t* indices, const float* rows, int64_t count, int64_t width,
                                    int64_t num_rows, const int* row_slots, float* values) {
  const int64_t total = count * width;
  for (int64_t e = global_thread(); e < total; e += thread_stride()) {
    const int64_t occurrence = e / width;
    const int64_t row = indices[occurrence];
    if (row < 0 || row >= num_rows) continue;  // reported by claim_rows_kernel
    atomicAdd(&values[static_cast<int64_t>(row_slots[row]) * width + (e - occurrence * width)], rows[e]);
  }
}

__device__ __forceinline__ double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

__global__ void finalize_rows_kernel(const int64_t* unique_rows, CoalesceHeader* header, int64_t width, float scale,
                                     float* values, int* row_slots) {
  const int lane = threadIdx.x % 32;
  const int64_t row_count = header->row_count;
  const int64_t warp_stride = thread_stride() / 32;
  for (int64_t slot = global_thread() / 32; slot < row_count; slot += warp_stride) {
    float* row_values = values + slot * width;
    double squares = 0.0;
    for (int64_t j = lane; j < width; j += 32) {
      const float value = row_values[j] * scale;
      row_values[j] = value;
      squares += static_cast<double>(value) * static_cast<double>(value);
    }
    squares = warp_sum(squares);
    if (lane == 0) {
      atomicAdd(&header->sum_of_squares, squares);
      row_slots[unique_rows[slot]] = -1;
    }
  }
}

// One warp per coalesced row; rows are unique, so no two warps touch the same parameters or states.
template <typename State>
__global__ void sparse_sgd_kernel(float* param, State* momentum_buffer, uint8_t* row_initialized, int64_t width,
                                  const int64_t* rows, const float* grad_rows, int64_t row_count, SgdScalars scalars,
                                  float grad_multiplier) {
  const int lane = threadIdx.x % 32;
  const bool has_momentum = scalars.momentum != 0.0f;
  for (int64_t r = global_thread() / 32; r < row_count; r += thread_stride() / 32) {
    const int64_t offset = rows[r] * width;
    const float* g = grad_rows + r * width;
    SgdScalars row_scalars = scalars;
    if (has_momentum) row_scalars.first_step = row_initialized[rows[r]] == 0;
    for (int64_t j = lane; j < width; j += 32) {
      if (has_momentum) {
        float buffer = load_value(momentum_buffer[offset + j]);
        sgd_element(param[offset + j], buffer, g[j] * grad_multiplier, row_scalars);
        store_value(momentum_buffer[offset + j], buffer);
      } else {
        float unused_buffer = 0.0f;  // momentum 0: sgd_element leaves it alone
        sgd_element(param[offset + j], unused_buffer, g[j] * grad_multiplier, row_scalars);
      }
    }
    __syncwarp();  // every lane has read the row's flag before it is set
    if (has_momentum && lane == 0) row_initialized[rows[r]] = 1;
  }
}

template <typename State>
__global__ void lazy_adam_kernel(float* param, State* exp_avg, State* exp_avg_sq, State* max_exp_avg_sq, int64_t width,
                                 const int64_t* rows, const float* grad_rows, int64_t row_count, AdamScalars scalars,
                                 float grad_multiplier) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = global_thread() / 32; r < row_count; r += thread_stride() / 32) {
    const int64_t offset = rows[r] * width;
    const float* g = grad_rows + r * width;
    for (int64_t j = lane; j < width; j += 32) {
      const int64_t i = offset + j;
      float m = load_value(exp_avg[i]), v = load_value(exp_avg_sq[i]);
      float v_max = scalars.amsgrad ? load_value(max_exp_avg_sq[i]) : 0.0f;
      adam_element(param[i], m, v, v_max, g[j] * grad_multiplier, scalars);
      store_value(exp_avg[i], m);
      store_value(exp_avg_sq[i], v);
      if (scalars.amsgrad) store_value(max_exp_avg_sq[i], v_max);
    }
  }
}

template <typename Fn>
void with_state_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f16:
      fn(Half{});
      break;
    case DType::bf16:
      fn(BFloat16{});
      break;
    default:
      fn(float{});
      break;  // f32 (the Tensor layer has checked the dtype)
  }
}

}  // namespace

void launch_clear_row_slots(int* row_slots, int64_t num_rows) {
  clear_row_slots_kernel<<<blocks_for(num_rows, kThreads), kThreads>>>(row_slots, num_rows);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_coalesce_begin(CoalesceHeader* header) { coalesce_begin_kernel<<<1, 1>>>(header); }

void launch_claim_rows(const int64_t* indices, int64_t count, int64_t position_base, int64_t num_rows, int* row_slots,
                       int64_t* unique_rows, CoalesceHeader* header) {
  if (count == 0) return;
  claim_rows_kernel<<<blocks_for(count, kThreads), kThreads>>>(indices, count, position_base, num_rows, row_slots,
                                                               unique_rows, header);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_assign_slots(const int64_t* unique_rows, const CoalesceHeader* header, int64_t capacity_rows, int64_t width,
                         int* row_slots, float* values) {
  assign_slots_kernel<<<blocks_for(capacity_rows * width, kThreads), kThreads>>>(unique_rows, header, width, row_slots,
                                                                                 values);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_scatter_rows(const int64_t* indices, const float* rows, int64_t count, int64_t width, int64_t num_rows,
                         const int* row_slots, float* values) {
  if (count == 0) return;
  scatter_rows_kernel<<<blocks_for(count * width, kThreads), kThreads>>>(indices, rows, count, width, num_rows,
                                                                         row_slots, values);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_finalize_rows(const int64_t* unique_rows, CoalesceHeader* header, int64_t capacity_rows, int64_t width,
                          float scale, float* values, int* row_slots) {
  finalize_rows_kernel<<<blocks_for(capacity_rows, kWarpsPerBlock), kThreads>>>(unique_rows, header, width, scale,
                                                                                values, row_slots);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_sparse_sgd(float* param, void* momentum_buffer, DType state_dtype, uint8_t* row_initialized, int64_t width,
                       const int64_t* rows, const float* grad_rows, int64_t row_count, const SgdScalars& scalars,
                       float grad_multiplier) {
  with_state_type(state_dtype, [&](auto tag) {
    using State = decltype(tag);
    sparse_sgd_kernel<State><<<blocks_for(row_count, kWarpsPerBlock), kThreads>>>(
        param, static_cast<State*>(momentum_buffer), row_initialized, width, rows, grad_rows, row_count, scalars,
        grad_multiplier);
    OPSNN_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_lazy_adam(float* param, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq, DType state_dtype,
                      int64_t width, const int64_t* rows, const float* grad_rows, int64_t row_count,
                      const AdamScalars& scalars, float grad_multiplier) {
  with_state_type(state_dtype, [&](auto tag) {
    using State = decltype(tag);
    lazy_adam_kernel<State><<<blocks_for(row_count, kWarpsPerBlock), kThreads>>>(
        param, static_cast<State*>(exp_avg), static_cast<State*>(exp_avg_sq), static_cast<State*>(max_exp_avg_sq),
        width, rows, grad_rows, row_count, scalars, grad_multiplier);
    OPSNN_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace opsnn::optim::cuda
