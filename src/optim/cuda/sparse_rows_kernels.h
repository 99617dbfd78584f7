// Launchers of the CUDA sparse-row kernels (src/optim/cuda/sparse_rows.cu): plain-C++ signatures over
// device pointers, on the legacy default stream, for the orchestration in sparse_rows.cpp.
#pragma once

#include <cstdint>

#include "opsnn/core/dtype.h"
#include "opsnn/optim/device_step.h"
#include "opsnn/optim/rules.h"
#include "opsnn/optim/step_kernels.h"

namespace opsnn::optim::cuda {

// Device scratch of one coalescing: written by the kernels, read back by the host once at the end.
struct CoalesceHeader {
  unsigned long long first_bad_position;  // first occurrence (over all chunks) outside the table; ~0 if none
  double sum_of_squares;                  // of the scaled coalesced values
  int row_count;                          // unique rows claimed so far
  int hot_row_count;                      // sorted coalescing: rows of more than kCoalesceHotRowOccurrences occurrences
  unsigned int blocks_done;               // the sum of squares' blocks that have written their block sums
  unsigned int unused;
};
inline constexpr unsigned long long kNoBadPosition = ~0ull;

// Sets every slot of `row_slots` to -1 (a fresh scratch; the kernels restore it after each coalescing).
void launch_clear_row_slots(int* row_slots, int64_t num_rows);
void launch_coalesce_begin(CoalesceHeader* header);
// Occurrences [0, count) of one chunk, `position_base` = occurrences of the chunks before it: claims a slot
// for each row seen for the first time (row_slots -1 -> -2, unique_rows[slot] = row) and records the
// first index outside [0, num_rows).
void launch_claim_rows(const int64_t* indices, int64_t count, int64_t position_base, int64_t num_rows, int* row_slots,
                       int64_t* unique_rows, CoalesceHeader* header);
// For every claimed slot: row_slots[row] = slot, and the slot's values start at -0.0f.
void launch_assign_slots(const int64_t* unique_rows, const CoalesceHeader* header, int64_t capacity_rows, int64_t width,
                         int* row_slots, float* values);
// values[slot(row)] += rows[i] for every in-range occurrence (atomicAdd).
void launch_scatter_rows(const int64_t* indices, const float* rows, int64_t count, int64_t width, int64_t num_rows,
                         const int* row_slots, float* values);
// values *= scale, row_slots back to -1, then launch_coalesced_squares.
void launch_finalize_rows(const int64_t* unique_rows, CoalesceHeader* header, int64_t capacity_rows, int64_t width,
                          float scale, float* values, int* row_slots, double* squares);
// The sum of squares of the header's row_count rows of `values` in rules.h's order (fold_lane_sums at
// three levels), into the header. squares: scratch of coalesced_squares_scratch(capacity_rows) doubles.
void launch_coalesced_squares(const float* values, int64_t capacity_rows, int64_t width, CoalesceHeader* header,
                              double* squares);
inline int64_t coalesced_squares_scratch(int64_t capacity_rows) {
  return capacity_rows + capacity_rows / kCoalesceSquaresBlockRows + 1;
}

// ---- deterministic coalescing: sort by row id, sum each row's occurrences in occurrence order ----
// Device scratch bytes launch_sorted_coalesce needs for `total` occurrences in a table of num_rows rows.
size_t sorted_coalesce_scratch_bytes(int64_t total, int64_t num_rows);
// Coalesces `total` occurrences (indices: i64, rows: f32 [total, width]) the way the CPU's coalesce_rows
// does, bit for bit: a stable radix sort of (row id, occurrence position), each unique row's values summed
// in occurrence order and then scaled, unique rows ascending; the sum of squares in the same order as
// launch_coalesced_squares (each row's with its sums, then the blocks; squares: the same scratch). Writes
// the unique rows and their values, and the row count, first bad position and sum of squares into the
// header (begun here).
void launch_sorted_coalesce(const int64_t* indices, const float* rows, int64_t total, int64_t num_rows, int64_t width,
                            float scale, void* scratch, size_t scratch_bytes, int64_t* unique_rows, float* values,
                            CoalesceHeader* header, double* squares);

// The updates over coalesced rows, one warp per row. device (or null): the step's values and the row
// count from device memory (device_step.h's DeviceStepInputs); row_count is then an upper bound.
void launch_sparse_sgd(float* param, void* momentum_buffer, DType state_dtype, uint8_t* row_initialized, int64_t width,
                       const int64_t* rows, const float* grad_rows, int64_t row_count, const SgdScalars& scalars,
                       float grad_multiplier, const DeviceStepInputs* device);
void launch_lazy_adam(float* param, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq, DType state_dtype,
                      int64_t width, const int64_t* rows, const float* grad_rows, int64_t row_count,
                      const AdamScalars& scalars, float grad_multiplier, const DeviceStepInputs* device);
// An element-wise rule's lazy update (rule: one of OPSNN_ELEMENTWISE_RULES).
void launch_sparse_rule(UpdateRule rule, float* param, void* const* states, DType state_dtype, int64_t width,
                        const int64_t* rows, const float* grad_rows, int64_t row_count, const AdamScalars& scalars,
                        float grad_multiplier, const DeviceStepInputs* device);

}  // namespace opsnn::optim::cuda
