// CUDA kernels of the row-sparse embedding updates: coalescing duplicate rows deterministically (CUB's
// stable radix sort by row id, then each row's occurrences summed in order: the CPU's bits) or with atomics
// (claim a slot per row, scatter-add the occurrences into it, scale and sum squares), then sparse SGD, lazy
// Adam/AdamW and lazy element-wise rules (Adagrad) over the coalesced rows, one warp per row. The
// per-element math is rules.h, as on the CPU.
#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "opsnn/core/error.h"
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
  header->hot_row_count = 0;
  header->blocks_done = 0;
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

__global__ void finalize_rows_kernel(const int64_t* unique_rows, const CoalesceHeader* header, int64_t width,
                                     float scale, float* values, int* row_slots) {
  const int64_t used = static_cast<int64_t>(header->row_count) * width;
  for (int64_t e = global_thread(); e < used; e += thread_stride()) {
    values[e] *= scale;
    if (e % width == 0) row_slots[unique_rows[e / width]] = -1;
  }
}

// rules.h's fold_lane_sums over a warp: lane l holds partial l; afterwards lane 0 holds the sum.
__device__ __forceinline__ double fold_warp_sums(double partial) {
  for (int offset = kCoalesceSquaresLanes / 2; offset > 0; offset /= 2)
    partial += __shfl_down_sync(0xffffffffu, partial, offset);
  return partial;
}

// ---- deterministic coalescing ----

// Positions 0..total-1 (the sort's values); the first thread also resets the header's per-coalescing
// fields (nothing before the sort reads them; coalesce_begin_kernel is the atomic path's reset).
__global__ void number_occurrences_kernel(int64_t total, int* positions, CoalesceHeader* header) {
  if (global_thread() == 0) {
    header->first_bad_position = kNoBadPosition;
    header->hot_row_count = 0;
    header->blocks_done = 0;
  }
  for (int64_t i = global_thread(); i < total; i += thread_stride()) positions[i] = static_cast<int>(i);
}

// Selects the sorted positions where a run of equal row ids starts (DeviceSelect::If over 0..total-1).
struct RunStart {
  const unsigned long long* sorted_rows;
  __device__ bool operator()(int i) const { return i == 0 || sorted_rows[i] != sorted_rows[i - 1]; }
};

// Columns a lane of the summing kernels holds in registers at once (32 * 4 = 128 columns per pass).
constexpr int kColumnsPerLane = 4;

// One warp per unique row, lane l taking columns l, l + 32, ...: the first occurrence plus the others in
// occurrence order, times scale - the CPU's additions, so its bits - and the row's sum of squares in
// rules.h's order (level one: the lanes' partials folded). Hot rows are listed for sum_hot_rows_kernel.
__global__ void sum_sorted_rows_kernel(const unsigned long long* sorted_rows, const int* sorted_positions,
                                       const int* run_starts, const float* __restrict__ rows, int64_t total,
                                       int64_t num_rows, int64_t width, float scale, CoalesceHeader* header,
                                       int64_t* unique_rows, float* __restrict__ values, int* hot_rows,
                                       double* row_squares) {
  const int lane = threadIdx.x % 32;
  const int64_t row_count = header->row_count;
  for (int64_t u = global_thread() / 32; u < row_count; u += thread_stride() / 32) {
    const int64_t begin = run_starts[u];
    const int64_t end = u + 1 < row_count ? run_starts[u + 1] : total;
    const unsigned long long row = sorted_rows[begin];
    if (lane == 0) unique_rows[u] = static_cast<int64_t>(row);
    // An id outside the table (negative ones are huge as unsigned keys): the first occurrence of the input
    // that is one starts a run (the sort is stable), so the minimum over such runs is the first in the input.
    if (row >= static_cast<unsigned long long>(num_rows)) {
      if (lane == 0) {
        atomicMin(&header->first_bad_position, static_cast<unsigned long long>(sorted_positions[begin]));
        row_squares[u] = 0.0;
      }
      continue;
    }
    if (end - begin > kCoalesceHotRowOccurrences) {
      if (lane == 0) hot_rows[atomicAdd(&header->hot_row_count, 1)] = static_cast<int>(u);  // any order: rows apart
      continue;
    }
    // At most kCoalesceHotRowOccurrences (= 32) occurrences: lane k holds the position of occurrence k, so
    // the loop below only waits for rows, several at a time (their addresses come from shuffles). A lane
    // takes kColumnsPerLane columns at a time (lane + 32 c).
    static_assert(kCoalesceHotRowOccurrences <= 32);
    const int occurrences = static_cast<int>(end - begin);
    const int my_position = lane < occurrences ? sorted_positions[begin + lane] : 0;
    double partial = 0.0;
    for (int64_t group = 0; group < width; group += 32 * kColumnsPerLane) {
      float sum[kColumnsPerLane];
      const float* first = rows + static_cast<int64_t>(__shfl_sync(0xffffffffu, my_position, 0)) * width;
#pragma unroll
      for (int c = 0; c < kColumnsPerLane; ++c) {
        const int64_t j = group + lane + 32 * c;
        sum[c] = j < width ? first[j] : 0.0f;
      }
#pragma unroll 4  // no stores in the loop: several occurrences' loads in flight, the additions still in order
      for (int k = 1; k < occurrences; ++k) {
        const float* row = rows + static_cast<int64_t>(__shfl_sync(0xffffffffu, my_position, k)) * width;
#pragma unroll
        for (int c = 0; c < kColumnsPerLane; ++c) {
          const int64_t j = group + lane + 32 * c;
          if (j < width) sum[c] += row[j];
        }
      }
#pragma unroll
      for (int c = 0; c < kColumnsPerLane; ++c) {  // columns in increasing order, as row_squares_kernel
        const int64_t j = group + lane + 32 * c;
        if (j >= width) continue;
        const float value = sum[c] * scale;
        values[u * width + j] = value;
        partial += static_cast<double>(value) * static_cast<double>(value);
      }
    }
    partial = fold_warp_sums(partial);
    if (lane == 0) row_squares[u] = partial;
  }
}

// One block per hot row at a time, 32 occurrence lanes x 32 columns: lane l sums occurrences l, l + 32, ...
// in order from occurrence l, then the lanes fold as rules.h's fold_lane_sums (kCoalesceHotRowOccurrences).
__global__ void sum_hot_rows_kernel(const int* sorted_positions, const int* run_starts, const float* rows,
                                    int64_t total, int64_t width, float scale, const CoalesceHeader* header,
                                    const int* hot_rows, float* values, double* row_squares) {
  __shared__ float lanes[kCoalesceSquaresLanes][33];
  const int column = threadIdx.x, lane = threadIdx.y;
  for (int h = blockIdx.x; h < header->hot_row_count; h += gridDim.x) {
    const int64_t u = hot_rows[h];
    const int64_t begin = run_starts[u];
    const int64_t end = u + 1 < header->row_count ? run_starts[u + 1] : total;
    double partial = 0.0;  // lane 0's threads (warp 0): columns column, column + 32, ... as row_squares_kernel
    // This warp's occurrences are begin + lane + 32 m, m < chain (at least one: a hot row has more than 32).
    // Their positions are fetched 32 at a time, one per thread, and handed out by shuffles, so the inner
    // loop only waits for rows. kColumnsPerLane tiles of 32 columns at a time.
    const int64_t chain = (end - begin - lane + kCoalesceSquaresLanes - 1) / kCoalesceSquaresLanes;
    for (int64_t group = 0; group < width; group += 32 * kColumnsPerLane) {
      float sum[kColumnsPerLane];
      for (int64_t m0 = 0; m0 < chain; m0 += 32) {
        const int64_t m = m0 + column;
        const int my_position = m < chain ? sorted_positions[begin + lane + kCoalesceSquaresLanes * m] : 0;
        const int span = static_cast<int>(chain - m0 < 32 ? chain - m0 : 32);
        int t = 0;
        if (m0 == 0) {  // the chain starts from its first occurrence's values
          const float* row = rows + static_cast<int64_t>(__shfl_sync(0xffffffffu, my_position, 0)) * width;
#pragma unroll
          for (int c = 0; c < kColumnsPerLane; ++c) {
            const int64_t j = group + 32 * c + column;
            sum[c] = j < width ? row[j] : 0.0f;
          }
          t = 1;
        }
#pragma unroll 4  // as in sum_sorted_rows_kernel
        for (; t < span; ++t) {
          const float* row = rows + static_cast<int64_t>(__shfl_sync(0xffffffffu, my_position, t)) * width;
#pragma unroll
          for (int c = 0; c < kColumnsPerLane; ++c) {
            const int64_t j = group + 32 * c + column;
            if (j < width) sum[c] += row[j];
          }
        }
      }
#pragma unroll
      for (int c = 0; c < kColumnsPerLane; ++c) {  // each tile's lanes fold in shared memory, in tile order
        const int64_t j = group + 32 * c + column;
        lanes[lane][column] = sum[c];
        __syncthreads();
        for (int offset = kCoalesceSquaresLanes / 2; offset > 0; offset /= 2) {
          if (lane < offset) lanes[lane][column] += lanes[lane + offset][column];
          __syncthreads();
        }
        if (lane == 0 && j < width) {
          const float value = lanes[0][column] * scale;
          values[u * width + j] = value;
          partial += static_cast<double>(value) * static_cast<double>(value);
        }
        __syncthreads();
      }
    }
    if (lane == 0) {
      partial = fold_warp_sums(partial);
      if (column == 0) row_squares[u] = partial;
    }
  }
}

// The sum of squares in rules.h's order, level one: one warp per row, lane l summing columns l, l + 32, ...
__global__ void row_squares_kernel(const float* values, int64_t width, const CoalesceHeader* header,
                                   double* row_squares) {
  const int lane = threadIdx.x % 32;
  for (int64_t u = global_thread() / 32; u < header->row_count; u += thread_stride() / 32) {
    const float* row = values + u * width;
    double partial = 0.0;
    for (int64_t j = lane; j < width; j += 32) partial += static_cast<double>(row[j]) * static_cast<double>(row[j]);
    partial = fold_warp_sums(partial);
    if (lane == 0) row_squares[u] = partial;
  }
}

// Levels two and three: one warp per block of kCoalesceSquaresBlockRows rows, lane l summing rows l,
// l + 32, ...; the CUDA block that finishes last then sums the block sums with one warp the same way
// (blocks l, l + 32, ...) into the header, and resets the count for the next coalescing.
__global__ void block_squares_kernel(const double* row_squares, CoalesceHeader* header, double* block_squares) {
  const int lane = threadIdx.x % 32;
  const int64_t rows = header->row_count;
  const int64_t blocks = (rows + kCoalesceSquaresBlockRows - 1) / kCoalesceSquaresBlockRows;
  for (int64_t b = global_thread() / 32; b < blocks; b += thread_stride() / 32) {
    const int64_t first = b * kCoalesceSquaresBlockRows;
    const int64_t end = rows - first < kCoalesceSquaresBlockRows ? rows : first + kCoalesceSquaresBlockRows;
    double partial = 0.0;
    for (int64_t u = first + lane; u < end; u += 32) partial += row_squares[u];
    partial = fold_warp_sums(partial);
    if (lane == 0) block_squares[b] = partial;
  }
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this block's sums are visible before it counts itself done
    last = atomicAdd(&header->blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  __threadfence();
  double partial = 0.0;
  for (int64_t b = lane; b < blocks; b += 32) partial += __ldcg(block_squares + b);  // past L1: other SMs wrote them
  partial = fold_warp_sums(partial);
  if (lane == 0) {
    header->sum_of_squares = partial;
    header->blocks_done = 0;
  }
}

// The scratch of launch_sorted_coalesce, carved from one allocation (256-byte aligned pieces).
struct SortedScratch {
  unsigned long long* sorted_rows;
  int* positions;
  int* sorted_positions;
  int* run_starts;
  int* hot_rows;
  void* cub_storage;
  size_t cub_bytes;
};

int significant_bits(int64_t num_rows) {
  int bits = 1;
  while (bits < 64 && (int64_t{1} << bits) < num_rows) ++bits;
  return bits;
}

size_t cub_bytes_for(int64_t total, int64_t num_rows) {
  size_t sort_bytes = 0, select_bytes = 0;
  const int count = static_cast<int>(total);
  OPSNN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const unsigned long long*>(nullptr), static_cast<unsigned long long*>(nullptr),
      static_cast<const int*>(nullptr), static_cast<int*>(nullptr), count, 0, significant_bits(num_rows)));
  OPSNN_CUDA_CHECK(cub::DeviceSelect::If(nullptr, select_bytes, thrust::counting_iterator<int>(0),
                                         static_cast<int*>(nullptr), static_cast<int*>(nullptr), count, RunStart{}));
  return sort_bytes > select_bytes ? sort_bytes : select_bytes;
}

// Lays the pieces out over `base` (null: only measures) with `cub_bytes` for CUB at the end; returns the
// bytes used.
size_t carve_scratch(char* base, int64_t total, size_t cub_bytes, SortedScratch& s) {
  size_t offset = 0;
  auto take = [&](size_t bytes) {
    char* piece = base ? base + offset : nullptr;
    offset += (bytes + 255) / 256 * 256;
    return piece;
  };
  const size_t n = static_cast<size_t>(total);
  s.sorted_rows = reinterpret_cast<unsigned long long*>(take(n * sizeof(unsigned long long)));
  s.positions = reinterpret_cast<int*>(take(n * sizeof(int)));
  s.sorted_positions = reinterpret_cast<int*>(take(n * sizeof(int)));
  s.run_starts = reinterpret_cast<int*>(take(n * sizeof(int)));
  s.hot_rows = reinterpret_cast<int*>(take((n / kCoalesceHotRowOccurrences + 1) * sizeof(int)));
  s.cub_bytes = cub_bytes;
  s.cub_storage = take(s.cub_bytes);
  return offset;
}

// The step's values from the device (DeviceStepInputs) where given: the row count, lr, clip factor and
// (bias1, bias2 not null) Adam's bias corrections. False when the step is not applied.
__device__ __forceinline__ bool take_step_inputs(const DeviceStepInputs& in, int64_t& row_count, float& lr,
                                                 float& grad_multiplier, float* bias1, float* bias2) {
  if (in.row_count != nullptr) row_count = *in.row_count;
  if (in.scalars == nullptr) return true;
  const StepScalars& step = *in.scalars;
  if (!step.apply) return false;
  lr = static_cast<float>(step.lr * in.lr_multiplier);  // as the host's segment lr: in double, then rounded
  grad_multiplier = in.state->clip_factor;
  if (bias1 != nullptr) {
    *bias1 = step.inv_bias_correction1;
    *bias2 = step.inv_bias_correction2;
  }
  return true;
}

// One warp per coalesced row; rows are unique, so no two warps touch the same parameters or states.
template <typename State>
__global__ void sparse_sgd_kernel(float* param, State* momentum_buffer, uint8_t* row_initialized, int64_t width,
                                  const int64_t* rows, const float* grad_rows, int64_t row_count, SgdScalars scalars,
                                  float grad_multiplier, DeviceStepInputs inputs) {
  if (!take_step_inputs(inputs, row_count, scalars.lr, grad_multiplier, nullptr, nullptr)) return;
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
__global__ void lazy_adam_kernel(float* __restrict__ param, State* __restrict__ exp_avg, State* __restrict__ exp_avg_sq,
                                 State* __restrict__ max_exp_avg_sq, int64_t width, const int64_t* rows,
                                 const float* __restrict__ grad_rows, int64_t row_count, AdamScalars scalars,
                                 float grad_multiplier, DeviceStepInputs inputs) {
  if (!take_step_inputs(inputs, row_count, scalars.lr, grad_multiplier, &scalars.inv_bias_correction1,
                        &scalars.inv_bias_correction2))
    return;
  const int lane = threadIdx.x % 32;
  for (int64_t r = global_thread() / 32; r < row_count; r += thread_stride() / 32) {
    const int64_t offset = rows[r] * width;
    const float* g = grad_rows + r * width;
#pragma unroll 4  // distinct arrays (restrict): the loads of several columns are in flight at once
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

// A lazy element-wise rule (Adagrad), one warp per coalesced row.
template <typename Rule, typename State>
__global__ void sparse_rule_kernel(float* param, State* state0, State* state1, State* state2, int64_t width,
                                   const int64_t* rows, const float* grad_rows, int64_t row_count, AdamScalars scalars,
                                   float grad_multiplier, DeviceStepInputs inputs) {
  if (!take_step_inputs(inputs, row_count, scalars.lr, grad_multiplier, &scalars.inv_bias_correction1,
                        &scalars.inv_bias_correction2))
    return;
  State* states[3] = {state0, state1, state2};
  const int lane = threadIdx.x % 32;
  for (int64_t r = global_thread() / 32; r < row_count; r += thread_stride() / 32) {
    const int64_t offset = rows[r] * width;
    const float* g = grad_rows + r * width;
    for (int64_t j = lane; j < width; j += 32) {
      const int64_t i = offset + j;
      float values[Rule::kStates];
      for (int k = 0; k < Rule::kStates; ++k) values[k] = load_value(states[k][i]);
      Rule::element(param[i], values, g[j] * grad_multiplier, scalars);
      for (int k = 0; k < Rule::kStates; ++k) store_value(states[k][i], values[k]);
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

namespace {
// Levels two and three of the sum of squares over the row sums at the start of `squares`.
void launch_block_squares(int64_t capacity_rows, CoalesceHeader* header, double* squares) {
  block_squares_kernel<<<blocks_for(capacity_rows / kCoalesceSquaresBlockRows + 1, kWarpsPerBlock), kThreads, 0,
                         ::opsnn::cuda::current_stream()>>>(squares, header, squares + capacity_rows);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void launch_clear_row_slots(int* row_slots, int64_t num_rows) {
  clear_row_slots_kernel<<<blocks_for(num_rows, kThreads), kThreads, 0, ::opsnn::cuda::current_stream()>>>(row_slots,
                                                                                                           num_rows);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_coalesce_begin(CoalesceHeader* header) {
  coalesce_begin_kernel<<<1, 1, 0, ::opsnn::cuda::current_stream()>>>(header);
}

void launch_claim_rows(const int64_t* indices, int64_t count, int64_t position_base, int64_t num_rows, int* row_slots,
                       int64_t* unique_rows, CoalesceHeader* header) {
  if (count == 0) return;
  claim_rows_kernel<<<blocks_for(count, kThreads), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      indices, count, position_base, num_rows, row_slots, unique_rows, header);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_assign_slots(const int64_t* unique_rows, const CoalesceHeader* header, int64_t capacity_rows, int64_t width,
                         int* row_slots, float* values) {
  assign_slots_kernel<<<blocks_for(capacity_rows * width, kThreads), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      unique_rows, header, width, row_slots, values);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_scatter_rows(const int64_t* indices, const float* rows, int64_t count, int64_t width, int64_t num_rows,
                         const int* row_slots, float* values) {
  if (count == 0) return;
  scatter_rows_kernel<<<blocks_for(count * width, kThreads), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      indices, rows, count, width, num_rows, row_slots, values);
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void launch_finalize_rows(const int64_t* unique_rows, CoalesceHeader* header, int64_t capacity_rows, int64_t width,
                          float scale, float* values, int* row_slots, double* squares) {
  finalize_rows_kernel<<<blocks_for(capacity_rows * width, kThreads), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      unique_rows, header, width, scale, values, row_slots);
  OPSNN_CUDA_CHECK(cudaGetLastError());
  launch_coalesced_squares(values, capacity_rows, width, header, squares);
}

void launch_coalesced_squares(const float* values, int64_t capacity_rows, int64_t width, CoalesceHeader* header,
                              double* squares) {
  row_squares_kernel<<<blocks_for(capacity_rows, kWarpsPerBlock), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      values, width, header, squares);
  OPSNN_CUDA_CHECK(cudaGetLastError());
  launch_block_squares(capacity_rows, header, squares);
}

size_t sorted_coalesce_scratch_bytes(int64_t total, int64_t num_rows) {
  SortedScratch layout{};
  return carve_scratch(nullptr, total, cub_bytes_for(total, num_rows), layout);
}

void launch_sorted_coalesce(const int64_t* indices, const float* rows, int64_t total, int64_t num_rows, int64_t width,
                            float scale, void* scratch, size_t scratch_bytes, int64_t* unique_rows, float* values,
                            CoalesceHeader* header, double* squares) {
  // CUB's storage is what the fixed pieces leave of the scratch (sized by sorted_coalesce_scratch_bytes):
  // no size query per call.
  SortedScratch s{};
  const size_t fixed = carve_scratch(nullptr, total, 0, s);
  OPSNN_CHECK(fixed < scratch_bytes, "sorted coalescing: scratch of ", scratch_bytes, " bytes, more than ", fixed,
              " needed");
  carve_scratch(static_cast<char*>(scratch), total, scratch_bytes - fixed, s);
  const int count = static_cast<int>(total);
  number_occurrences_kernel<<<blocks_for(total, kThreads), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      total, s.positions, header);
  OPSNN_CUDA_CHECK(cudaGetLastError());
  // Radix sort is stable: equal row ids keep their occurrence order. Bits above the table's are all zero
  // for in-range ids (out-of-range ones are reported and their sums never used).
  size_t cub_bytes = s.cub_bytes;
  OPSNN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      s.cub_storage, cub_bytes, reinterpret_cast<const unsigned long long*>(indices), s.sorted_rows, s.positions,
      s.sorted_positions, count, 0, significant_bits(num_rows)));
  cub_bytes = s.cub_bytes;
  OPSNN_CUDA_CHECK(cub::DeviceSelect::If(s.cub_storage, cub_bytes, thrust::counting_iterator<int>(0), s.run_starts,
                                         &header->row_count, count, RunStart{s.sorted_rows}));
  sum_sorted_rows_kernel<<<blocks_for(total, kWarpsPerBlock), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
      s.sorted_rows, s.sorted_positions, s.run_starts, rows, total, num_rows, width, scale, header, unique_rows, values,
      s.hot_rows, squares);
  OPSNN_CUDA_CHECK(cudaGetLastError());
  if (total > kCoalesceHotRowOccurrences) {
    const int hot_blocks = static_cast<int>(std::min<int64_t>(total / kCoalesceHotRowOccurrences + 1, 1024));
    sum_hot_rows_kernel<<<hot_blocks, dim3(32, kCoalesceSquaresLanes), 0, ::opsnn::cuda::current_stream()>>>(
        s.sorted_positions, s.run_starts, rows, total, width, scale, header, s.hot_rows, values, squares);
    OPSNN_CUDA_CHECK(cudaGetLastError());
  }
  launch_block_squares(total, header, squares);  // level one came with the sums
}

void launch_sparse_sgd(float* param, void* momentum_buffer, DType state_dtype, uint8_t* row_initialized, int64_t width,
                       const int64_t* rows, const float* grad_rows, int64_t row_count, const SgdScalars& scalars,
                       float grad_multiplier, const DeviceStepInputs* device) {
  const DeviceStepInputs inputs = device != nullptr ? *device : DeviceStepInputs{};
  with_state_type(state_dtype, [&](auto tag) {
    using State = decltype(tag);
    sparse_sgd_kernel<State><<<blocks_for(row_count, kWarpsPerBlock), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
        param, static_cast<State*>(momentum_buffer), row_initialized, width, rows, grad_rows, row_count, scalars,
        grad_multiplier, inputs);
    OPSNN_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_lazy_adam(float* param, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq, DType state_dtype,
                      int64_t width, const int64_t* rows, const float* grad_rows, int64_t row_count,
                      const AdamScalars& scalars, float grad_multiplier, const DeviceStepInputs* device) {
  const DeviceStepInputs inputs = device != nullptr ? *device : DeviceStepInputs{};
  with_state_type(state_dtype, [&](auto tag) {
    using State = decltype(tag);
    lazy_adam_kernel<State><<<blocks_for(row_count, kWarpsPerBlock), kThreads, 0, ::opsnn::cuda::current_stream()>>>(
        param, static_cast<State*>(exp_avg), static_cast<State*>(exp_avg_sq), static_cast<State*>(max_exp_avg_sq),
        width, rows, grad_rows, row_count, scalars, grad_multiplier, inputs);
    OPSNN_CUDA_CHECK(cudaGetLastError());
  });
}

void launch_sparse_rule(UpdateRule rule, float* param, void* const* states, DType state_dtype, int64_t width,
                        const int64_t* rows, const float* grad_rows, int64_t row_count, const AdamScalars& scalars,
                        float grad_multiplier, const DeviceStepInputs* device) {
  const DeviceStepInputs inputs = device != nullptr ? *device : DeviceStepInputs{};
  with_state_type(state_dtype, [&](auto tag) {
    using State = decltype(tag);
    State* typed[3] = {static_cast<State*>(states[0]), static_cast<State*>(states[1]), static_cast<State*>(states[2])};
    switch (rule) {
#define OPSNN_RULE_CASE(name, Rule)                                                                                    \
  case UpdateRule::name:                                                                                               \
    sparse_rule_kernel<Rule, State>                                                                                    \
        <<<blocks_for(row_count, kWarpsPerBlock), kThreads, 0, ::opsnn::cuda::current_stream()>>>(                     \
            param, typed[0], typed[1], typed[2], width, rows, grad_rows, row_count, scalars, grad_multiplier, inputs); \
    break;
      OPSNN_ELEMENTWISE_RULES(OPSNN_RULE_CASE)
#undef OPSNN_RULE_CASE
      default:
        throw Error(detail::concat("no lazy CUDA kernel for update rule ", static_cast<int>(rule)));
    }
    OPSNN_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace opsnn::optim::cuda
