// Row-sparse gradients for Embedding tables: deterministic sort-and-reduce coalescing, sparse SGD and lazy
// Adam/AdamW over the touched rows only (OpenMP across rows, SIMD along a row), and the Tensor layer.
#include "opsnn/optim/sparse_update.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "optim/device_table.h"

namespace opsnn::optim {
namespace {

// Below this many touched values a parallel region costs more than it saves.
constexpr int64_t kParallelValues = 1 << 15;

// Sorts the occurrences by (row index, occurrence position). Keys are unique, so the result does not
// depend on the sort algorithm: duplicates end up adjacent, in occurrence order.
void sort_occurrences(const RowChunkView* chunks, int64_t chunk_count, int64_t total, int64_t num_rows,
                      std::vector<int64_t>& sorted_index, std::vector<int64_t>& sorted_position) {
  sorted_index.resize(static_cast<size_t>(total));
  sorted_position.resize(static_cast<size_t>(total));
  // Fast path: (index, position) packed in one 64-bit key when both fit in 32 bits.
  const bool packable = num_rows <= (int64_t{1} << 32) && total <= (int64_t{1} << 32);
  if (packable) {
    thread_local std::vector<uint64_t> keys;
    keys.resize(static_cast<size_t>(total));
    int64_t position = 0;
    for (int64_t c = 0; c < chunk_count; ++c) {
      for (int64_t i = 0; i < chunks[c].count; ++i, ++position) {
        keys[position] = (static_cast<uint64_t>(chunks[c].indices[i]) << 32) | static_cast<uint64_t>(position);
      }
    }
    std::sort(keys.begin(), keys.end());
    for (int64_t i = 0; i < total; ++i) {
      sorted_index[i] = static_cast<int64_t>(keys[i] >> 32);
      sorted_position[i] = static_cast<int64_t>(keys[i] & 0xffffffffu);
    }
    return;
  }
  std::vector<std::pair<int64_t, int64_t>> keys(static_cast<size_t>(total));
  int64_t position = 0;
  for (int64_t c = 0; c < chunk_count; ++c) {
    for (int64_t i = 0; i < chunks[c].count; ++i, ++position) keys[position] = {chunks[c].indices[i], position};
  }
  std::sort(keys.begin(), keys.end());
  for (int64_t i = 0; i < total; ++i) {
    sorted_index[i] = keys[i].first;
    sorted_position[i] = keys[i].second;
  }
}

// Rows handed to an update run in parallel, so they must be unique; sorted order makes that an O(n) check.
void check_update_rows(const int64_t* rows, int64_t row_count, int64_t num_rows, int64_t width, const char* who) {
  OPSNN_CHECK(width > 0 && num_rows >= 0 && row_count >= 0, who, ": bad sizes (num_rows ", num_rows, ", width ", width,
              ", row_count ", row_count, ")");
  for (int64_t i = 0; i < row_count; ++i) {
    OPSNN_CHECK(rows[i] >= 0 && rows[i] < num_rows, who, ": row index ", rows[i], " (entry ", i,
                ") is outside the table of ", num_rows, " rows [0, ", num_rows, ")");
    OPSNN_CHECK(i == 0 || rows[i] > rows[i - 1], who,
                ": row indices must be strictly increasing (coalesced), but entry ", i, " is ", rows[i], " after ",
                rows[i - 1]);
  }
}

}  // namespace

void coalesce_rows(const RowChunkView* chunks, int64_t chunk_count, int64_t num_rows, int64_t width, float scale,
                   CoalescedRows& out) {
  OPSNN_CHECK(width > 0, "coalesce_rows: row width must be positive, got ", width);
  OPSNN_CHECK(num_rows >= 0, "coalesce_rows: table size must be non-negative, got ", num_rows);
  int64_t total = 0;
  for (int64_t c = 0; c < chunk_count; ++c) {
    const RowChunkView& chunk = chunks[c];
    OPSNN_CHECK(chunk.count >= 0, "coalesce_rows: chunk ", c, " has a negative count ", chunk.count);
    OPSNN_CHECK(chunk.count == 0 || (chunk.indices != nullptr && chunk.rows != nullptr), "coalesce_rows: chunk ", c,
                " has null data");
    for (int64_t i = 0; i < chunk.count; ++i) {
      int64_t index = chunk.indices[i];
      OPSNN_CHECK(index >= 0 && index < num_rows, "row-sparse gradient: index ", index, " (chunk ", c, ", position ", i,
                  ") is outside the embedding table of ", num_rows, " rows [0, ", num_rows, ")");
    }
    total += chunk.count;
  }

  out.width = width;
  out.sum_of_squares = 0.0;
  out.non_finite = false;
  out.device = kCPU;
  out.device_row_count = 0;
  out.clear_pending();
  // Scratch kept between calls, one set per calling thread (a training loop coalesces every step). The
  // parallel loop below reads it through plain pointers: inside it, a thread_local name would refer to
  // each worker thread's own (empty) copy.
  thread_local std::vector<int64_t> sorted_index, sorted_position, segment_start;
  thread_local std::vector<const float*> row_of_position;
  thread_local std::vector<double> row_sum_of_squares;
  sort_occurrences(chunks, chunk_count, total, num_rows, sorted_index, sorted_position);

  // Where each occurrence's row lives, by occurrence position.
  row_of_position.resize(static_cast<size_t>(total));
  {
    int64_t position = 0;
    for (int64_t c = 0; c < chunk_count; ++c) {
      for (int64_t i = 0; i < chunks[c].count; ++i, ++position) row_of_position[position] = chunks[c].rows + i * width;
    }
  }
  // Segment starts: first sorted occurrence of each unique index (plus an end marker).
  segment_start.clear();
  for (int64_t i = 0; i < total; ++i) {
    if (i == 0 || sorted_index[i] != sorted_index[i - 1]) segment_start.push_back(i);
  }
  const int64_t unique_count = static_cast<int64_t>(segment_start.size());
  segment_start.push_back(total);

  out.indices.resize(static_cast<size_t>(unique_count));
  out.values.resize(static_cast<size_t>(unique_count * width));
  row_sum_of_squares.resize(static_cast<size_t>(unique_count));
  float* values = out.values.data();
  int64_t* unique_index = out.indices.data();
  double* squares_of_row = row_sum_of_squares.data();
  const int64_t* starts = segment_start.data();
  const int64_t* index_of = sorted_index.data();
  const int64_t* position_of = sorted_position.data();
  const float* const* row_at = row_of_position.data();

#pragma omp parallel for schedule(static) if (total * width >= kParallelValues)
  for (int64_t u = 0; u < unique_count; ++u) {
    const int64_t begin = starts[u], end = starts[u + 1];
    unique_index[u] = index_of[begin];
    float* destination = values + u * width;
    if (end - begin <= kCoalesceHotRowOccurrences) {
      const float* first = row_at[position_of[begin]];
      std::copy(first, first + width, destination);
      for (int64_t occurrence = begin + 1; occurrence < end; ++occurrence) {
        const float* source = row_at[position_of[occurrence]];
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) destination[j] += source[j];
      }
    } else {  // a hot row: 32 lanes, then their fold (rules.h), as the CUDA coalescing sums it
      std::vector<float> lanes(static_cast<size_t>(kCoalesceSquaresLanes * width));
      for (int64_t lane = 0; lane < kCoalesceSquaresLanes; ++lane) {
        float* sum = lanes.data() + lane * width;
        const float* first = row_at[position_of[begin + lane]];
        std::copy(first, first + width, sum);
        for (int64_t occurrence = begin + lane + kCoalesceSquaresLanes; occurrence < end;
             occurrence += kCoalesceSquaresLanes) {
          const float* source = row_at[position_of[occurrence]];
#pragma omp simd
          for (int64_t j = 0; j < width; ++j) sum[j] += source[j];
        }
      }
      for (int64_t offset = kCoalesceSquaresLanes / 2; offset > 0; offset /= 2)
        for (int64_t lane = 0; lane < offset; ++lane)
          for (int64_t j = 0; j < width; ++j) lanes[lane * width + j] += lanes[(lane + offset) * width + j];
      std::copy(lanes.begin(), lanes.begin() + width, destination);
    }
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) destination[j] *= scale;
    double partial[kCoalesceSquaresLanes] = {};
    for (int64_t j = 0; j < width; ++j)
      partial[j % kCoalesceSquaresLanes] += static_cast<double>(destination[j]) * static_cast<double>(destination[j]);
    squares_of_row[u] = fold_lane_sums(partial);
  }
  // Rows in blocks, then the blocks (rules.h's kCoalesceSquaresBlockRows order), for any thread count.
  double block_partial[kCoalesceSquaresLanes] = {};
  int64_t block_index = 0;
  for (int64_t block = 0; block < unique_count; block += kCoalesceSquaresBlockRows, ++block_index) {
    const int64_t end = std::min<int64_t>(unique_count, block + kCoalesceSquaresBlockRows);
    double row_partial[kCoalesceSquaresLanes] = {};
    for (int64_t u = block; u < end; ++u) row_partial[(u - block) % kCoalesceSquaresLanes] += squares_of_row[u];
    block_partial[block_index % kCoalesceSquaresLanes] += fold_lane_sums(row_partial);
  }
  const double squares = fold_lane_sums(block_partial);
  out.sum_of_squares = squares;
  out.non_finite = !std::isfinite(squares);
}

template <typename State>
void sparse_sgd_step(float* param, State* momentum_buffer, uint8_t* row_initialized, int64_t num_rows, int64_t width,
                     const int64_t* rows, const float* grad_rows, int64_t row_count, const SgdScalars& scalars,
                     float grad_multiplier) {
  check_update_rows(rows, row_count, num_rows, width, "sparse_sgd_step");
  const bool has_momentum = scalars.momentum != 0.0f;
  OPSNN_CHECK(!has_momentum || (momentum_buffer != nullptr && row_initialized != nullptr), "sparse_sgd_step: momentum ",
              scalars.momentum, " needs a momentum buffer and row flags");
#pragma omp parallel for schedule(static) if (row_count * width >= kParallelValues)
  for (int64_t r = 0; r < row_count; ++r) {
    const int64_t row = rows[r];
    float* p = param + row * width;
    const float* g = grad_rows + r * width;
    SgdScalars row_scalars = scalars;
    if (!has_momentum) {
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) {
        float unused_buffer = 0.0f;  // momentum 0: sgd_element leaves it alone
        sgd_element(p[j], unused_buffer, g[j] * grad_multiplier, row_scalars);
      }
      continue;
    }
    row_scalars.first_step = row_initialized[row] == 0;
    State* buffer = momentum_buffer + row * width;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) {
      float b = load_value(buffer[j]);
      sgd_element(p[j], b, g[j] * grad_multiplier, row_scalars);
      store_value(buffer[j], b);
    }
    row_initialized[row] = 1;
  }
}

template <typename State>
void lazy_adam_step(float* param, State* exp_avg, State* exp_avg_sq, State* max_exp_avg_sq, int64_t num_rows,
                    int64_t width, const int64_t* rows, const float* grad_rows, int64_t row_count,
                    const AdamScalars& scalars, float grad_multiplier) {
  check_update_rows(rows, row_count, num_rows, width, "lazy_adam_step");
  OPSNN_CHECK(exp_avg != nullptr && exp_avg_sq != nullptr, "lazy_adam_step: missing moment buffers");
  OPSNN_CHECK(!scalars.amsgrad || max_exp_avg_sq != nullptr, "lazy_adam_step: amsgrad needs max_exp_avg_sq");
#pragma omp parallel for schedule(static) if (row_count * width >= kParallelValues)
  for (int64_t r = 0; r < row_count; ++r) {
    const int64_t offset = rows[r] * width;
    float* p = param + offset;
    State* m_row = exp_avg + offset;
    State* v_row = exp_avg_sq + offset;
    const float* g = grad_rows + r * width;
    if (scalars.amsgrad) {
      State* v_max_row = max_exp_avg_sq + offset;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) {
        float m = load_value(m_row[j]), v = load_value(v_row[j]), v_max = load_value(v_max_row[j]);
        adam_element(p[j], m, v, v_max, g[j] * grad_multiplier, scalars);
        store_value(m_row[j], m);
        store_value(v_row[j], v);
        store_value(v_max_row[j], v_max);
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) {
        float m = load_value(m_row[j]), v = load_value(v_row[j]), v_max = 0.0f;
        adam_element(p[j], m, v, v_max, g[j] * grad_multiplier, scalars);
        store_value(m_row[j], m);
        store_value(v_row[j], v);
      }
    }
  }
}

template <typename Rule, typename State>
void sparse_rule_step(float* param, State* const* states, int64_t num_rows, int64_t width, const int64_t* rows,
                      const float* grad_rows, int64_t row_count, const AdamScalars& scalars, float grad_multiplier) {
  check_update_rows(rows, row_count, num_rows, width, "sparse_rule_step");
  for (int k = 0; k < Rule::kStates; ++k)
    OPSNN_CHECK(states[k] != nullptr, "sparse_rule_step: state ", k, " of ", Rule::kStates, " is missing");
#pragma omp parallel for schedule(static) if (row_count * width >= kParallelValues)
  for (int64_t r = 0; r < row_count; ++r) {
    const int64_t offset = rows[r] * width;
    float* p = param + offset;
    const float* g = grad_rows + r * width;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) {
      float values[Rule::kStates];
      for (int k = 0; k < Rule::kStates; ++k) values[k] = load_value(states[k][offset + j]);
      Rule::element(p[j], values, g[j] * grad_multiplier, scalars);
      for (int k = 0; k < Rule::kStates; ++k) store_value(states[k][offset + j], values[k]);
    }
  }
}

#define OPSNN_INSTANTIATE_SPARSE_RULE(name, Rule)                                                                    \
  template void sparse_rule_step<Rule, float>(float*, float* const*, int64_t, int64_t, const int64_t*, const float*, \
                                              int64_t, const AdamScalars&, float);                                   \
  template void sparse_rule_step<Rule, Half>(float*, Half* const*, int64_t, int64_t, const int64_t*, const float*,   \
                                             int64_t, const AdamScalars&, float);                                    \
  template void sparse_rule_step<Rule, BFloat16>(float*, BFloat16* const*, int64_t, int64_t, const int64_t*,         \
                                                 const float*, int64_t, const AdamScalars&, float);
OPSNN_ELEMENTWISE_RULES(OPSNN_INSTANTIATE_SPARSE_RULE)
#undef OPSNN_INSTANTIATE_SPARSE_RULE

template void sparse_sgd_step<float>(float*, float*, uint8_t*, int64_t, int64_t, const int64_t*, const float*, int64_t,
                                     const SgdScalars&, float);
template void sparse_sgd_step<Half>(float*, Half*, uint8_t*, int64_t, int64_t, const int64_t*, const float*, int64_t,
                                    const SgdScalars&, float);
template void sparse_sgd_step<BFloat16>(float*, BFloat16*, uint8_t*, int64_t, int64_t, const int64_t*, const float*,
                                        int64_t, const SgdScalars&, float);
template void lazy_adam_step<float>(float*, float*, float*, float*, int64_t, int64_t, const int64_t*, const float*,
                                    int64_t, const AdamScalars&, float);
template void lazy_adam_step<Half>(float*, Half*, Half*, Half*, int64_t, int64_t, const int64_t*, const float*, int64_t,
                                   const AdamScalars&, float);
template void lazy_adam_step<BFloat16>(float*, BFloat16*, BFloat16*, BFloat16*, int64_t, int64_t, const int64_t*,
                                       const float*, int64_t, const AdamScalars&, float);

// ---- Tensor layer ----
namespace {

DeviceTable<SparseRowKernels>& sparse_row_table() {
  static DeviceTable<SparseRowKernels> table;
  return table;
}

// Contiguous and on `device` (the parameter's).
void check_on_device(const Tensor& tensor, Device device, const char* what, const char* who) {
  OPSNN_CHECK_AS(DeviceError, tensor.device() == device, who, ": ", what, " must be on ", device.str(),
                 " with the parameter, got ", tensor.str());
  OPSNN_CHECK_AS(ShapeError, tensor.is_contiguous(), who, ": ", what, " must be contiguous, got ", tensor.str());
}

// Checks a 2-D f32 table and returns its [num_rows, width]. A gradient with no rows fits any device.
std::pair<int64_t, int64_t> check_table(const Tensor& param, const CoalescedRows& grad, const DeviceStepInputs* device,
                                        const char* who) {
  OPSNN_CHECK(param.defined(), who, ": the parameter is undefined");
  OPSNN_CHECK_AS(UsageError, device == nullptr || !param.device().is_cpu(), who,
                 ": the step's values come from the device only for a table on a GPU, not ", param.str());
  OPSNN_CHECK_AS(UsageError, !grad.pending || device != nullptr, who,
                 ": the gradient's coalescing is still pending (finish_coalesce), so its row count is unknown here");
  check_on_device(param, param.device(), "the parameter", who);
  OPSNN_CHECK_AS(TypeError, param.dtype() == DType::f32, who, ": the parameter (master weight) must be f32, got ",
                 param.str());
  OPSNN_CHECK_AS(ShapeError, param.dim() == 2, who, ": the parameter must be a [rows, width] table, got ", param.str());
  OPSNN_CHECK_AS(ShapeError, grad.width == param.size(1), who, ": gradient rows of width ", grad.width,
                 " do not fit the table ", param.str());
  if (grad.device.is_cpu()) {
    OPSNN_CHECK_AS(ShapeError, static_cast<int64_t>(grad.values.size()) == grad.row_count() * grad.width, who,
                   ": coalesced gradient holds ", grad.values.size(), " values for ", grad.row_count(),
                   " rows of width ", grad.width);
  } else {
    OPSNN_CHECK_AS(ShapeError, grad.table_rows == param.size(0), who, ": the gradient was coalesced for a table of ",
                   grad.table_rows, " rows, not ", param.str());
  }
  OPSNN_CHECK_AS(DeviceError, grad.row_count() == 0 || grad.device == param.device(), who,
                 ": the coalesced gradient is on ", grad.device.str(), " but the parameter is ", param.str());
  return {param.size(0), param.size(1)};
}

void check_state(const Tensor& state, const Tensor& param, DType dtype, const char* what, const char* who) {
  OPSNN_CHECK(state.defined(), who, ": ", what, " is undefined");
  check_on_device(state, param.device(), what, who);
  check_same_shape(state, param, who);
  OPSNN_CHECK_AS(TypeError, state.dtype() == dtype, who, ": ", what, " is ", dtype_name(state.dtype()),
                 " but the other states are ", dtype_name(dtype));
  OPSNN_CHECK_AS(TypeError, dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, who, ": ", what,
                 " must be stored as f32, f16 or bf16, got ", dtype_name(dtype));
}

}  // namespace

void register_sparse_row_kernels(DeviceType type, const SparseRowKernels& kernels) {
  sparse_row_table().set(type, kernels);
}

const SparseRowKernels& sparse_row_kernels(Device device) {
  const SparseRowKernels* kernels = sparse_row_table().find(device.type);
  OPSNN_CHECK_AS(DeviceError, kernels != nullptr, "no sparse-row update kernels for ", device.str(),
                 " in this build; keep the table on the cpu");
  return *kernels;
}

void coalesce(const RowSparseGrad& grad, int64_t num_rows, int64_t width, float scale, CoalescedRows& out) {
  OPSNN_CHECK_AS(ShapeError, grad.indices.size() == grad.rows.size(), "coalesce: ", grad.indices.size(),
                 " index tensors but ", grad.rows.size(), " row tensors");
  if (!grad.rows.empty() && grad.rows[0].defined() && !grad.rows[0].device().is_cpu()) {
    sparse_row_kernels(grad.rows[0].device()).coalesce(grad, num_rows, width, scale, out);
    return;
  }
  std::vector<Tensor> keep_alive;  // contiguous / f32 copies the views point into
  std::vector<RowChunkView> chunks;
  keep_alive.reserve(2 * grad.indices.size());
  for (size_t c = 0; c < grad.indices.size(); ++c) {
    Tensor indices = grad.indices[c].to(kCPU), rows = grad.rows[c].to(kCPU);
    OPSNN_CHECK_AS(TypeError, indices.dtype() == DType::i64, "coalesce: chunk ", c, " indices must be i64, got ",
                   indices.str());
    OPSNN_CHECK_AS(TypeError, rows.dtype() == DType::f32 || rows.dtype() == DType::f16 || rows.dtype() == DType::bf16,
                   "coalesce: chunk ", c, " rows must be f32, f16 or bf16, got ", rows.str());
    OPSNN_CHECK_AS(ShapeError, rows.dim() == 2 && rows.size(0) == indices.numel() && rows.size(1) == width,
                   "coalesce: chunk ", c, " rows ", rows.str(), " do not match ", indices.numel(),
                   " indices of a table with width ", width);
    keep_alive.push_back(indices.contiguous());
    keep_alive.push_back(rows.to(DType::f32).contiguous());
    chunks.push_back(
        {keep_alive[keep_alive.size() - 2].data<int64_t>(), keep_alive.back().data<float>(), indices.numel()});
  }
  coalesce_rows(chunks.data(), static_cast<int64_t>(chunks.size()), num_rows, width, scale, out);
}

void finish_coalesce(CoalescedRows& out) {
  if (!out.pending) return;
  sparse_row_kernels(out.device).finish(out);
}

CoalescedRows coalesce(const RowSparseGrad& grad, int64_t num_rows, int64_t width, float scale) {
  CoalescedRows out;
  coalesce(grad, num_rows, width, scale, out);
  return out;
}

void sparse_sgd_step(const Tensor& param, const Tensor& momentum_buffer, const Tensor& row_initialized,
                     const CoalescedRows& grad, const SgdScalars& scalars, float grad_multiplier,
                     const DeviceStepInputs* device) {
  const char* who = "sparse_sgd_step";
  const std::pair<int64_t, int64_t> table = check_table(param, grad, device, who);  // lambdas below capture both
  const int64_t num_rows = table.first, width = table.second;
  const bool on_device = !param.device().is_cpu();
  if (scalars.momentum == 0.0f) {
    if (on_device) {
      if (grad.row_count() > 0)
        sparse_row_kernels(param.device())
            .sgd_step(param.data<float>(), nullptr, DType::f32, nullptr, width, grad.device_indices.data<int64_t>(),
                      grad.device_values.data<float>(), grad.row_count(), scalars, grad_multiplier, device);
      return;
    }
    sparse_sgd_step<float>(param.data<float>(), nullptr, nullptr, num_rows, width, grad.indices.data(),
                           grad.values.data(), grad.row_count(), scalars, grad_multiplier);
    return;
  }
  OPSNN_CHECK(momentum_buffer.defined() && row_initialized.defined(), who, ": momentum ", scalars.momentum,
              " needs a momentum buffer and row flags");
  check_state(momentum_buffer, param, momentum_buffer.dtype(), "the momentum buffer", who);
  check_on_device(row_initialized, param.device(), "row_initialized", who);
  OPSNN_CHECK_AS(TypeError, row_initialized.dtype() == DType::u8, who, ": row_initialized must be u8, got ",
                 row_initialized.str());
  OPSNN_CHECK_AS(ShapeError, row_initialized.numel() == num_rows, who, ": row_initialized ", row_initialized.str(),
                 " must hold one flag per table row (", num_rows, ")");
  if (on_device) {
    if (grad.row_count() > 0)
      sparse_row_kernels(param.device())
          .sgd_step(param.data<float>(), momentum_buffer.data_ptr(), momentum_buffer.dtype(),
                    row_initialized.data<uint8_t>(), width, grad.device_indices.data<int64_t>(),
                    grad.device_values.data<float>(), grad.row_count(), scalars, grad_multiplier, device);
    return;
  }
  visit_dtype(momentum_buffer.dtype(), [&](auto tag) {
    using State = decltype(tag);
    if constexpr (std::is_same_v<State, float> || std::is_same_v<State, Half> || std::is_same_v<State, BFloat16>) {
      sparse_sgd_step<State>(param.data<float>(), momentum_buffer.data<State>(), row_initialized.data<uint8_t>(),
                             num_rows, width, grad.indices.data(), grad.values.data(), grad.row_count(), scalars,
                             grad_multiplier);
    }
  });
}

void lazy_adam_step(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                    const CoalescedRows& grad, const AdamScalars& scalars, float grad_multiplier,
                    const DeviceStepInputs* device) {
  const char* who = "lazy_adam_step";
  const std::pair<int64_t, int64_t> table = check_table(param, grad, device, who);  // lambdas below capture both
  const int64_t num_rows = table.first, width = table.second;
  OPSNN_CHECK(exp_avg.defined(), who, ": exp_avg is undefined");
  const DType state_dtype = exp_avg.dtype();
  check_state(exp_avg, param, state_dtype, "exp_avg", who);
  check_state(exp_avg_sq, param, state_dtype, "exp_avg_sq", who);
  if (scalars.amsgrad) check_state(max_exp_avg_sq, param, state_dtype, "max_exp_avg_sq (amsgrad)", who);
  if (!param.device().is_cpu()) {
    if (grad.row_count() > 0)
      sparse_row_kernels(param.device())
          .adam_step(param.data<float>(), exp_avg.data_ptr(), exp_avg_sq.data_ptr(),
                     scalars.amsgrad ? max_exp_avg_sq.data_ptr() : nullptr, state_dtype, width,
                     grad.device_indices.data<int64_t>(), grad.device_values.data<float>(), grad.row_count(), scalars,
                     grad_multiplier, device);
    return;
  }
  visit_dtype(state_dtype, [&](auto tag) {
    using State = decltype(tag);
    if constexpr (std::is_same_v<State, float> || std::is_same_v<State, Half> || std::is_same_v<State, BFloat16>) {
      State* max_state = scalars.amsgrad ? max_exp_avg_sq.data<State>() : nullptr;
      lazy_adam_step<State>(param.data<float>(), exp_avg.data<State>(), exp_avg_sq.data<State>(), max_state, num_rows,
                            width, grad.indices.data(), grad.values.data(), grad.row_count(), scalars, grad_multiplier);
    }
  });
}

void sparse_rule_step(UpdateRule rule, const Tensor& param, const std::vector<Tensor>& states,
                      const CoalescedRows& grad, const AdamScalars& scalars, float grad_multiplier,
                      const DeviceStepInputs* device) {
  const char* who = "sparse_rule_step";
  const std::pair<int64_t, int64_t> table = check_table(param, grad, device, who);  // lambdas below capture both
  const int64_t num_rows = table.first, width = table.second;
  int state_count = -1;
#define OPSNN_RULE_STATES(name, Rule) \
  if (rule == UpdateRule::name) state_count = Rule::kStates;
  OPSNN_ELEMENTWISE_RULES(OPSNN_RULE_STATES)
#undef OPSNN_RULE_STATES
  OPSNN_CHECK(state_count >= 0, who, ": update rule ", static_cast<int>(rule), " is not an element-wise rule");
  OPSNN_CHECK(static_cast<int>(states.size()) == state_count && state_count <= kMaxOptimizerStates, who,
              ": the rule has ", state_count, " states, got ", states.size());
  const DType state_dtype = state_count > 0 ? states[0].dtype() : DType::f32;
  void* pointers[kMaxOptimizerStates] = {};
  for (int k = 0; k < state_count; ++k) {
    check_state(states[static_cast<size_t>(k)], param, state_dtype, "a state", who);
    pointers[k] = states[static_cast<size_t>(k)].data_ptr();
  }
  if (!param.device().is_cpu()) {
    if (grad.row_count() > 0)
      sparse_row_kernels(param.device())
          .rule_step(rule, param.data<float>(), pointers, state_dtype, width, grad.device_indices.data<int64_t>(),
                     grad.device_values.data<float>(), grad.row_count(), scalars, grad_multiplier, device);
    return;
  }
  visit_dtype(state_dtype, [&](auto tag) {
    using State = decltype(tag);
    if constexpr (std::is_same_v<State, float> || std::is_same_v<State, Half> || std::is_same_v<State, BFloat16>) {
      State* typed[kMaxOptimizerStates] = {};
      for (int k = 0; k < kMaxOptimizerStates; ++k) typed[k] = static_cast<State*>(pointers[k]);
      switch (rule) {
#define OPSNN_RULE_CASE(name, Rule)                                                                 \
  case UpdateRule::name:                                                                            \
    sparse_rule_step<Rule, State>(param.data<float>(), typed, num_rows, width, grad.indices.data(), \
                                  grad.values.data(), grad.row_count(), scalars, grad_multiplier);  \
    break;
        OPSNN_ELEMENTWISE_RULES(OPSNN_RULE_CASE)
#undef OPSNN_RULE_CASE
        default:
          break;
      }
    }
  });
}

}  // namespace opsnn::optim
