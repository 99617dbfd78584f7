// Launchers of the CUDA sparse-row kernels (src/optim/cuda/sparse_rows.cu): plain-C++ signatures over
// device pointers, on the legacy default stream, for the orchestration in sparse_rows.cpp.
#pragma once

#include <cstdint>

#include "opsnn/core/dtype.h"
#include "opsnn/optim/rules.h"

namespace opsnn::optim::cuda {

// Device scratch of one coalescing: written by the kernels, read back by the host once at the end.
struct CoalesceHeader {
  unsigned long long first_bad_position;  // first occurrence (over all chunks) outside the table; ~0 if none
  double sum_of_squares;                  // of the scaled coalesced values
  int row_count;                          // unique rows claimed so far
  int unused;
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
// values *= scale, sum of squares into the header, row_slots back to -1.
void launch_finalize_rows(const int64_t* unique_rows, CoalesceHeader* header, int64_t capacity_rows, int64_t width,
                          float scale, float* values, int* row_slots);

void launch_sparse_sgd(float* param, void* momentum_buffer, DType state_dtype, uint8_t* row_initialized, int64_t width,
                       const int64_t* rows, const float* grad_rows, int64_t row_count, const SgdScalars& scalars,
                       float grad_multiplier);
void launch_lazy_adam(float* param, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq, DType state_dtype,
                      int64_t width, const int64_t* rows, const float* grad_rows, int64_t row_count,
                      const AdamScalars& scalars, float grad_multiplier);

}  // namespace opsnn::optim::cuda
