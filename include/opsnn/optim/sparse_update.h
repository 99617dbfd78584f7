// Row-sparse optimizer updates for Embedding tables: coalescing a RowSparseGrad (sort-and-reduce of
// duplicate indices, deterministic for any thread count), sparse SGD with per-row momentum start, and
// lazy Adam/AdamW that touch only the rows present in the gradient. Raw-array functions (so CUDA kernels
// can mirror them) plus a thin Tensor-facing layer. The per-element math is rules.h; nothing is duplicated.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "opsnn/core/half.h"
#include "opsnn/core/tensor.h"
#include "opsnn/optim/device_step.h"
#include "opsnn/optim/rules.h"
#include "opsnn/optim/step_kernels.h"

namespace opsnn::optim {

// ---- coalescing ----

// One appended piece of a row-sparse gradient: rows[i * width .. (i+1) * width) belongs to table row
// indices[i]. Rows are fp32 (the Tensor layer converts f16/bf16 chunks).
struct RowChunkView {
  const int64_t* indices = nullptr;
  const float* rows = nullptr;
  int64_t count = 0;
};

// A coalesced row-sparse gradient: strictly increasing row indices, each with the sum of all its
// occurrences, multiplied by `scale`. Reuse one object across steps to keep its buffers.
struct CoalescedRows {
  int64_t width = 0;
  std::vector<int64_t> indices;  // sorted ascending, unique
  std::vector<float> values;     // [indices.size(), width] row-major
  // Sum of squares of the coalesced (scaled) values, accumulated in double, per row then over rows in
  // index order: bit-identical for any thread count. Feeds the global grad norm and clipping.
  double sum_of_squares = 0.0;
  // Some coalesced value is inf or NaN (exactly when sum_of_squares is not finite).
  bool non_finite = false;

  // Where the rows live. On a CUDA device (coalesce() of a gradient whose chunks are there) `indices` and
  // `values` stay empty: device_indices holds row_count() unique rows and device_values their
  // [row_count, width] sums, both on `device` with room for more rows than used; sum_of_squares and
  // non_finite are still set on the host. By default the device sorts the occurrences by row id, so the
  // rows are ascending and every value and the sum of squares are the CPU's bits; with `atomics` set
  // (before coalesce()) it scatter-adds them with float atomics instead: the rows come in an unspecified
  // order and the sums' last bits vary from run to run.
  bool atomics = false;
  Device device = kCPU;
  int64_t device_row_count = 0;
  int64_t table_rows = 0;  // the table size the device rows were checked against
  Tensor device_indices;   // i64 [capacity]
  Tensor device_values;    // f32 [capacity * width]
  Tensor row_slots;        // i32 [table_rows] scratch of the CUDA coalescing: -1 for every row between calls
  Tensor device_header;    // small scratch of the CUDA coalescing (row count, first bad index, norm)
  Tensor device_scratch;   // u8 scratch of the sorted CUDA coalescing (sort buffers, CUB's storage)
  Tensor device_squares;   // f64 scratch of the CUDA sum of squares (per row, per block of rows)

  // Deferred readback (set before coalesce(), for a caller that synchronises with the device later, as
  // the optimizer's device step does): coalesce() on a device enqueues its work and a copy of its results
  // to the host and returns at once. Until finish_coalesce() - after the caller's synchronisation -
  // `pending` is set, device_row_count is only an upper bound (the occurrences), sum_of_squares is not
  // known on the host, an index outside the table has not been reported yet, and the device pointers
  // below say where the device keeps the row count, the sum of squares and the first bad occurrence.
  bool deferred = false;
  bool pending = false;
  const int* device_row_count_at = nullptr;
  DeviceSparseStats device_stats;
  std::shared_ptr<void> host_header;    // pinned host copy of the device header
  std::vector<Tensor> pending_indices;  // the chunks' indices, for the message naming a bad one
  // No deferred coalescing outstanding (what every coalesce() starts from, and finish_coalesce() ends with).
  void clear_pending() {
    pending = false;
    device_row_count_at = nullptr;
    device_stats = {};
    pending_indices.clear();
  }

  int64_t row_count() const { return device.is_cpu() ? static_cast<int64_t>(indices.size()) : device_row_count; }
};

// Sums duplicate rows of all chunks into `out`. The occurrences of one index are summed in occurrence
// order (chunk order, then position within the chunk) in fp32 starting from the first occurrence, then
// multiplied once by `scale` (e.g. 1/loss_scale): the same arithmetic as accumulating a dense gradient
// row by row and unscaling it. A row occurring more than kCoalesceHotRowOccurrences times is summed in
// rules.h's 32 lanes instead (the order the GPU parallelises). The sum of squares follows rules.h's
// kCoalesceSquaresBlockRows order. Row indices outside [0, num_rows) throw opsnn::Error naming the first bad index (in
// occurrence order), its chunk and position, and the table size.
void coalesce_rows(const RowChunkView* chunks, int64_t chunk_count, int64_t num_rows, int64_t width, float scale,
                   CoalescedRows& out);

// Completes a deferred coalescing (CoalescedRows::deferred) once the device's work is done: the row
// count, sum of squares and non_finite from the host copy, or the error naming the first index outside
// the table (as coalesce() would have thrown). Nothing to do when `out` is not pending.
void finish_coalesce(CoalescedRows& out);

// ---- updates over coalesced rows (raw arrays) ----
//
// param, states: the whole table, row-major [num_rows, width] (e.g. a segment of the arena). rows:
// `row_count` strictly increasing indices in [0, num_rows) (a coalesced gradient; checked, since rows are
// updated in parallel); grad_rows: [row_count, width]. Each gradient value is multiplied by
// `grad_multiplier` (a clip factor, for instance) before the rule sees it. Rows not listed are not read
// or written: parameters and states of untouched rows stay bit-identical.

// Sparse SGD. Weight decay (L2) applies to touched rows only. Momentum semantics ("per-row first step"):
// dense SGD sets buf = g on its first step; here each row does so the first time it is touched, recorded
// in row_initialized[row] (0: never touched, the buffer's content is ignored; set to 1 by this call).
// After that the row's buffer follows buf = momentum*buf + (1-dampening)*g on the steps that touch it
// only; it does not decay on steps that skip the row (lazy momentum, as lazy Adam). scalars.first_step is
// ignored (the flags replace it). momentum_buffer and row_initialized may be null when momentum == 0.
template <typename State>
void sparse_sgd_step(float* param, State* momentum_buffer, uint8_t* row_initialized, int64_t num_rows, int64_t width,
                     const int64_t* rows, const float* grad_rows, int64_t row_count, const SgdScalars& scalars,
                     float grad_multiplier = 1.0f);

// Lazy Adam/AdamW (as TensorFlow's LazyAdam): m, v (and v_max with amsgrad) and the parameter update only
// on touched rows, with the bias corrections of the global step carried by `scalars` (a row touched
// for the first time at step t is corrected with 1/(1-beta^t), not as if it were its own step 1). AdamW
// decoupled decay and Adam L2 decay likewise apply to touched rows only. max_exp_avg_sq may be null
// unless scalars.amsgrad.
template <typename State>
void lazy_adam_step(float* param, State* exp_avg, State* exp_avg_sq, State* max_exp_avg_sq, int64_t num_rows,
                    int64_t width, const int64_t* rows, const float* grad_rows, int64_t row_count,
                    const AdamScalars& scalars, float grad_multiplier = 1.0f);

// Lazy updates of a single-pass element-wise rule (builtin_list.h's OPSNN_ELEMENTWISE_RULES; Adagrad for
// embeddings): the rule's element function on the touched rows only, with this step's scalars; the states
// of untouched rows are not read or written (Adagrad's sum of a row grows only on steps that touch it,
// as torch.optim.Adagrad with sparse gradients). states: Rule::kStates arrays of the table's shape.
template <typename Rule, typename State>
void sparse_rule_step(float* param, State* const* states, int64_t num_rows, int64_t width, const int64_t* rows,
                      const float* grad_rows, int64_t row_count, const AdamScalars& scalars,
                      float grad_multiplier = 1.0f);

extern template void sparse_sgd_step<float>(float*, float*, uint8_t*, int64_t, int64_t, const int64_t*, const float*,
                                            int64_t, const SgdScalars&, float);
extern template void sparse_sgd_step<Half>(float*, Half*, uint8_t*, int64_t, int64_t, const int64_t*, const float*,
                                           int64_t, const SgdScalars&, float);
extern template void sparse_sgd_step<BFloat16>(float*, BFloat16*, uint8_t*, int64_t, int64_t, const int64_t*,
                                               const float*, int64_t, const SgdScalars&, float);
extern template void lazy_adam_step<float>(float*, float*, float*, float*, int64_t, int64_t, const int64_t*,
                                           const float*, int64_t, const AdamScalars&, float);
extern template void lazy_adam_step<Half>(float*, Half*, Half*, Half*, int64_t, int64_t, const int64_t*, const float*,
                                          int64_t, const AdamScalars&, float);
extern template void lazy_adam_step<BFloat16>(float*, BFloat16*, BFloat16*, BFloat16*, int64_t, int64_t, const int64_t*,
                                              const float*, int64_t, const AdamScalars&, float);

// ---- device implementations of the Tensor-facing layer ----

// One device type's sparse-row kernels (the Tensor layer dispatches on the table's device through this
// table, no #ifdef). Pointers are on that device; `rows` are the unique indices of a
// CoalescedRows coalesced there (in range by construction), `row_count` of them.
struct SparseRowKernels {
  // Coalesces a gradient whose chunks live on the device into `out` (device fields); same contract as
  // coalesce() below, including the error for an index outside the table.
  void (*coalesce)(const RowSparseGrad& grad, int64_t num_rows, int64_t width, float scale,
                   CoalescedRows& out) = nullptr;
  // Completes a deferred coalescing (finish_coalesce()).
  void (*finish)(CoalescedRows& out) = nullptr;
  // The updates; `device` (or null) overrides the step's values and the row count (DeviceStepInputs).
  void (*sgd_step)(float* param, void* momentum_buffer, DType state_dtype, uint8_t* row_initialized, int64_t width,
                   const int64_t* rows, const float* grad_rows, int64_t row_count, const SgdScalars& scalars,
                   float grad_multiplier, const DeviceStepInputs* device) = nullptr;
  void (*adam_step)(float* param, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq, DType state_dtype,
                    int64_t width, const int64_t* rows, const float* grad_rows, int64_t row_count,
                    const AdamScalars& scalars, float grad_multiplier, const DeviceStepInputs* device) = nullptr;
  // An element-wise rule's lazy update (sparse_rule_step); states: the rule's kStates device arrays.
  void (*rule_step)(UpdateRule rule, float* param, void* const* states, DType state_dtype, int64_t width,
                    const int64_t* rows, const float* grad_rows, int64_t row_count, const AdamScalars& scalars,
                    float grad_multiplier, const DeviceStepInputs* device) = nullptr;
};

void register_sparse_row_kernels(DeviceType type, const SparseRowKernels& kernels);
// The kernels of device's type; DeviceError naming the device when none are registered.
const SparseRowKernels& sparse_row_kernels(Device device);

// ---- Tensor-facing layer (CPU tensors, or CUDA tensors through sparse_row_kernels) ----

// Coalesces a table's RowSparseGrad. Each chunk: indices i64 of any shape with n_k elements, rows
// [n_k, width] in f32/f16/bf16 (non-f32 rows are converted to f32 first). Throws ShapeError/TypeError
// naming the chunk on malformed input. When the first chunk's rows live on a CUDA device, coalescing
// runs there (the other chunks are moved to it) and the result stays there; no chunks: an empty CPU result.
void coalesce(const RowSparseGrad& grad, int64_t num_rows, int64_t width, float scale, CoalescedRows& out);
CoalescedRows coalesce(const RowSparseGrad& grad, int64_t num_rows, int64_t width, float scale = 1.0f);

// The tensors and the coalesced gradient must be on one device. param: f32 [num_rows, width], contiguous.
// momentum_buffer: same shape, f32/f16/bf16 (undefined Tensor
// when momentum == 0). row_initialized: u8 [num_rows] (undefined when momentum == 0).
// `device` (a GPU table only, or null): the step's values and row count come from the device (a deferred
// coalescing's gradient may be passed while pending).
void sparse_sgd_step(const Tensor& param, const Tensor& momentum_buffer, const Tensor& row_initialized,
                     const CoalescedRows& grad, const SgdScalars& scalars, float grad_multiplier = 1.0f,
                     const DeviceStepInputs* device = nullptr);
// exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad, else undefined): param's shape, one dtype among
// f32/f16/bf16.
void lazy_adam_step(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                    const CoalescedRows& grad, const AdamScalars& scalars, float grad_multiplier = 1.0f,
                    const DeviceStepInputs* device = nullptr);
// An element-wise rule's lazy update (rule: one of OPSNN_ELEMENTWISE_RULES); states: its kStates tensors,
// param's shape, one dtype among f32/f16/bf16.
void sparse_rule_step(UpdateRule rule, const Tensor& param, const std::vector<Tensor>& states,
                      const CoalescedRows& grad, const AdamScalars& scalars, float grad_multiplier = 1.0f,
                      const DeviceStepInputs* device = nullptr);

}  // namespace opsnn::optim
