// The CUDA implementation of the row-sparse Tensor layer (sparse_update.h): prepares the chunks on the
// table's device, runs the coalescing kernels (sparse_rows.cu: sorted by default, atomics on request) with
// one host synchronization at the end (row count, first bad index, sum of squares) or, deferred, none (the
// caller's next synchronisation brings the header back), and registers the device table.
#include "optim/cuda/sparse_rows.h"

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "opsnn/optim/sparse_update.h"
#include "optim/cuda/sparse_rows_kernels.h"

namespace opsnn::optim {
namespace {

// Keeps `buffer` at least `count` elements of `dtype` on `device` (contents not preserved on growth).
void ensure_capacity(Tensor& buffer, int64_t count, DType dtype, Device device) {
  if (buffer.defined() && buffer.device() == device && buffer.numel() >= count) return;
  buffer = Tensor::empty({count}, dtype, device);
}

// The row count and sum of squares from a header read back, or the error naming the first occurrence
// outside the table.
void take_header(const cuda::CoalesceHeader& result, const std::vector<Tensor>& indices, int64_t num_rows,
                 CoalescedRows& out) {
  if (result.first_bad_position != cuda::kNoBadPosition) {
    int64_t position = static_cast<int64_t>(result.first_bad_position);
    size_t chunk = 0;
    while (position >= indices[chunk].numel()) position -= indices[chunk++].numel();
    int64_t index = 0;
    OPSNN_CUDA_CHECK(
        cudaMemcpy(&index, indices[chunk].data<int64_t>() + position, sizeof(index), cudaMemcpyDeviceToHost));
    throw Error(detail::concat("row-sparse gradient: index ", index, " (chunk ", chunk, ", position ", position,
                               ") is outside the embedding table of ", num_rows, " rows [0, ", num_rows, ")"));
  }
  out.device_row_count = result.row_count;
  out.sum_of_squares = result.sum_of_squares;
  out.non_finite = !std::isfinite(result.sum_of_squares);
}

// Reads the header back (the one host synchronization), or, deferred, enqueues its copy into pinned host
// memory for cuda_finish and publishes where the device keeps it.
void finish_coalescing(const std::vector<Tensor>& indices, int64_t num_rows, int64_t total,
                       cuda::CoalesceHeader* header, CoalescedRows& out) {
  if (!out.deferred) {
    cuda::CoalesceHeader result{};
    OPSNN_CUDA_CHECK(cudaMemcpy(&result, header, sizeof(result), cudaMemcpyDeviceToHost));
    take_header(result, indices, num_rows, out);
    return;
  }
  if (!out.host_header) {
    void* pinned = nullptr;
    OPSNN_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(cuda::CoalesceHeader)));
    out.host_header = std::shared_ptr<void>(pinned, [](void* pointer) { cudaFreeHost(pointer); });
  }
  OPSNN_CUDA_CHECK(cudaMemcpyAsync(out.host_header.get(), header, sizeof(cuda::CoalesceHeader), cudaMemcpyDeviceToHost,
                                   cudaStreamLegacy));
  out.pending = true;
  out.device_row_count = total;  // an upper bound until cuda_finish
  out.device_row_count_at = &header->row_count;
  out.device_stats = DeviceSparseStats{&header->sum_of_squares, &header->first_bad_position};
  out.pending_indices = indices;
}

// After the caller's synchronisation: the pinned copy holds the header of the deferred coalescing.
void cuda_finish(CoalescedRows& out) {
  OPSNN_CHECK(out.host_header != nullptr, "finish_coalesce: no header was copied back");
  const cuda::CoalesceHeader result = *static_cast<const cuda::CoalesceHeader*>(out.host_header.get());
  const std::vector<Tensor> indices = std::move(out.pending_indices);
  out.clear_pending();
  take_header(result, indices, out.table_rows, out);
}

void cuda_coalesce(const RowSparseGrad& grad, int64_t num_rows, int64_t width, float scale, CoalescedRows& out) {
  OPSNN_CHECK(width > 0, "coalesce_rows: row width must be positive, got ", width);
  OPSNN_CHECK(num_rows >= 0, "coalesce_rows: table size must be non-negative, got ", num_rows);
  const Device device = grad.rows[0].device();
  std::vector<Tensor> indices, rows;  // contiguous, on `device`; rows f32
  int64_t total = 0;
  for (size_t c = 0; c < grad.indices.size(); ++c) {
    Tensor chunk_indices = grad.indices[c].to(device), chunk_rows = grad.rows[c].to(device);
    OPSNN_CHECK_AS(TypeError, chunk_indices.dtype() == DType::i64, "coalesce: chunk ", c, " indices must be i64, got ",
                   chunk_indices.str());
    OPSNN_CHECK_AS(
        TypeError,
        chunk_rows.dtype() == DType::f32 || chunk_rows.dtype() == DType::f16 || chunk_rows.dtype() == DType::bf16,
        "coalesce: chunk ", c, " rows must be f32, f16 or bf16, got ", chunk_rows.str());
    OPSNN_CHECK_AS(ShapeError,
                   chunk_rows.dim() == 2 && chunk_rows.size(0) == chunk_indices.numel() && chunk_rows.size(1) == width,
                   "coalesce: chunk ", c, " rows ", chunk_rows.str(), " do not match ", chunk_indices.numel(),
                   " indices of a table with width ", width);
    indices.push_back(chunk_indices.contiguous());
    rows.push_back(chunk_rows.to(DType::f32).contiguous());
    total += chunk_indices.numel();
  }
  // Slots are int32 on the device (half the scratch of int64 per table row).
  OPSNN_CHECK(total <= INT_MAX, "coalesce: ", total, " row occurrences in one step exceed the CUDA limit of ", INT_MAX);

  out.width = width;
  out.indices.clear();
  out.values.clear();
  out.device = device;
  out.table_rows = num_rows;
  out.device_row_count = 0;
  out.sum_of_squares = 0.0;
  out.non_finite = false;
  out.clear_pending();
  if (total == 0) return;

  static_assert(sizeof(cuda::CoalesceHeader) % sizeof(int64_t) == 0);
  ensure_capacity(out.device_header, sizeof(cuda::CoalesceHeader) / sizeof(int64_t), DType::i64, device);
  auto* header = static_cast<cuda::CoalesceHeader*>(out.device_header.data_ptr());
  ensure_capacity(out.device_indices, total, DType::i64, device);
  ensure_capacity(out.device_values, total * width, DType::f32, device);
  ensure_capacity(out.device_squares, cuda::coalesced_squares_scratch(total), DType::f64, device);
  int64_t* unique_rows = out.device_indices.data<int64_t>();
  float* values = out.device_values.data<float>();
  double* squares = out.device_squares.data<double>();
  if (!out.atomics) {
    // One chunk is sorted where it lies; several are first laid end to end (occurrence order).
    Tensor all_indices = indices[0], all_rows = rows[0];
    if (indices.size() > 1) {
      all_indices = Tensor::empty({total}, DType::i64, device);
      all_rows = Tensor::empty({total, width}, DType::f32, device);
      int64_t at = 0;
      for (size_t c = 0; c < indices.size(); ++c) {
        const int64_t n = indices[c].numel();
        OPSNN_CUDA_CHECK(cudaMemcpy(all_indices.data<int64_t>() + at, indices[c].data<int64_t>(), n * sizeof(int64_t),
                                    cudaMemcpyDeviceToDevice));
        OPSNN_CUDA_CHECK(cudaMemcpy(all_rows.data<float>() + at * width, rows[c].data<float>(),
                                    n * width * sizeof(float), cudaMemcpyDeviceToDevice));
        at += n;
      }
    }
    // Sized (CUB's size queries) only when the occurrences or the table change, not every step.
    thread_local int64_t sized_total = -1, sized_rows = -1;
    thread_local size_t scratch_bytes = 0;
    if (total != sized_total || num_rows != sized_rows) {
      scratch_bytes = cuda::sorted_coalesce_scratch_bytes(total, num_rows);
      sized_total = total;
      sized_rows = num_rows;
    }
    ensure_capacity(out.device_scratch, static_cast<int64_t>(scratch_bytes), DType::u8, device);
    cuda::launch_sorted_coalesce(all_indices.data<int64_t>(), all_rows.data<float>(), total, num_rows, width, scale,
                                 out.device_scratch.data_ptr(), static_cast<size_t>(out.device_scratch.numel()),
                                 unique_rows, values, header, squares);
    finish_coalescing(indices, num_rows, total, header, out);
    return;
  }

  if (!out.row_slots.defined() || out.row_slots.device() != device || out.row_slots.numel() != num_rows) {
    out.row_slots = Tensor::empty({num_rows}, DType::i32, device);
    cuda::launch_clear_row_slots(out.row_slots.data<int32_t>(), num_rows);
  }
  int* slots = out.row_slots.data<int32_t>();

  cuda::launch_coalesce_begin(header);
  int64_t base = 0;
  for (size_t c = 0; c < indices.size(); ++c) {
    cuda::launch_claim_rows(indices[c].data<int64_t>(), indices[c].numel(), base, num_rows, slots, unique_rows, header);
    base += indices[c].numel();
  }
  cuda::launch_assign_slots(unique_rows, header, total, width, slots, values);
  for (size_t c = 0; c < indices.size(); ++c)
    cuda::launch_scatter_rows(indices[c].data<int64_t>(), rows[c].data<float>(), indices[c].numel(), width, num_rows,
                              slots, values);
  // Also restores row_slots to -1 for every claimed row, so the scratch is clean even when we throw below.
  cuda::launch_finalize_rows(unique_rows, header, total, width, scale, values, slots, squares);
  finish_coalescing(indices, num_rows, total, header, out);
}

void cuda_sparse_rule(UpdateRule rule, float* param, void* const* states, DType state_dtype, int64_t width,
                      const int64_t* rows, const float* grad_rows, int64_t row_count, const AdamScalars& scalars,
                      float grad_multiplier, const DeviceStepInputs* device) {
  cuda::launch_sparse_rule(rule, param, states, state_dtype, width, rows, grad_rows, row_count, scalars,
                           grad_multiplier, device);
}

void cuda_sparse_sgd(float* param, void* momentum_buffer, DType state_dtype, uint8_t* row_initialized, int64_t width,
                     const int64_t* rows, const float* grad_rows, int64_t row_count, const SgdScalars& scalars,
                     float grad_multiplier, const DeviceStepInputs* device) {
  cuda::launch_sparse_sgd(param, momentum_buffer, state_dtype, row_initialized, width, rows, grad_rows, row_count,
                          scalars, grad_multiplier, device);
}

void cuda_lazy_adam(float* param, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq, DType state_dtype,
                    int64_t width, const int64_t* rows, const float* grad_rows, int64_t row_count,
                    const AdamScalars& scalars, float grad_multiplier, const DeviceStepInputs* device) {
  cuda::launch_lazy_adam(param, exp_avg, exp_avg_sq, max_exp_avg_sq, state_dtype, width, rows, grad_rows, row_count,
                         scalars, grad_multiplier, device);
}

}  // namespace

void register_cuda_sparse_gradient_kernels() {
  SparseRowKernels kernels;
  kernels.coalesce = cuda_coalesce;
  kernels.finish = cuda_finish;
  kernels.sgd_step = cuda_sparse_sgd;
  kernels.adam_step = cuda_lazy_adam;
  kernels.rule_step = cuda_sparse_rule;
  register_sparse_row_kernels(DeviceType::cuda, kernels);
  register_cuda_topk_kernels();
}

}  // namespace opsnn::optim
