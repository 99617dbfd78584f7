// CPU embedding lookup (gather rows of the table) and its dense backward (scatter-add rows), which
// groups the lookups by table row so duplicates add up in a fixed order on any number of threads.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"

namespace opsnn::ops {
namespace {

// Runs serially before any parallel loop: an exception must not leave an OpenMP region.
void check_indices(const Tensor& indices, int64_t table_rows, const char* kernel) {
  OPSNN_CHECK_AS(TypeError, indices.dtype() == DType::i64, "CPU ", kernel, ": indices must be i64, got ",
                 dtype_name(indices.dtype()));
  OPSNN_CHECK(indices.is_contiguous(), "CPU ", kernel, ": indices must be contiguous");
  const int64_t* values = indices.data<int64_t>();
  for (int64_t i = 0; i < indices.numel(); ++i)
    OPSNN_CHECK_AS(ShapeError, values[i] >= 0 && values[i] < table_rows, "embedding: index ", values[i], " (position ",
                   i, ") is out of range for a table of ", table_rows, " rows ",
                   table_rows == 0 ? std::string("(an empty table has no valid index)")
                                   : detail::concat("(valid: 0 to ", table_rows - 1, ")"));
}

void check_rows_layout(const Tensor& rows, const Tensor& indices, const Tensor& table, const char* kernel) {
  OPSNN_CHECK_AS(ShapeError, table.dim() == 2, "CPU ", kernel, ": table must be [V, D], got ",
                 shape_str(table.shape()));
  OPSNN_CHECK_AS(ShapeError, rows.dim() == 2 && rows.size(0) == indices.numel() && rows.size(1) == table.size(1),
                 "CPU ", kernel, ": rows ", shape_str(rows.shape()), " do not match ", indices.numel(),
                 " indices of a table ", shape_str(table.shape()));
  OPSNN_CHECK(rows.is_contiguous() && table.is_contiguous(), "CPU ", kernel, ": operands must be contiguous");
  check_same_dtype(rows, table, kernel);
}

}  // namespace

void CpuBackend::embedding_forward(const Tensor& weight, const Tensor& indices, Tensor& out) {
  check_rows_layout(out, indices, weight, "embedding_forward");
  check_indices(indices, weight.size(0), "embedding_forward");
  cpu::visit_floating(weight.dtype(), "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t count = indices.numel(), width = weight.size(1);
    const int64_t* rows = indices.data<int64_t>();
    const T* table = weight.data<T>();
    T* result = out.data<T>();
#pragma omp parallel for schedule(static) if (out.numel() >= cpu::kParallelMinElements)
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(result + i * width, table + rows[i] * width, static_cast<size_t>(width) * sizeof(T));
  });
}

void CpuBackend::embedding_backward_dense(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight) {
  check_rows_layout(grad_out, indices, grad_weight, "embedding_backward_dense");
  check_indices(indices, grad_weight.size(0), "embedding_backward_dense");
  cpu::visit_floating(grad_weight.dtype(), "embedding_backward_dense", [&](auto tag) {
    using T = decltype(tag);
    const int64_t count = indices.numel(), width = grad_weight.size(1);
    const int64_t* rows = indices.data<int64_t>();
    const T* upstream = grad_out.data<T>();
    T* result = grad_weight.data<T>();
    // Positions sorted by table row (stable: equal rows keep lookup order), then one task per distinct
    // row adds its lookups in that order: no two threads write one row, and the sum order is fixed.
    std::vector<int64_t> order(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return rows[x] < rows[y]; });
    std::vector<int64_t> group_starts;
    for (int64_t i = 0; i < count; ++i)
      if (i == 0 || rows[order[static_cast<size_t>(i)]] != rows[order[static_cast<size_t>(i - 1)]])
        group_starts.push_back(i);
    group_starts.push_back(count);
    const int64_t groups = static_cast<int64_t>(group_starts.size()) - 1;
#pragma omp parallel for schedule(dynamic, 16) if (grad_out.numel() >= cpu::kParallelMinElements)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = group_starts[static_cast<size_t>(g)], end = group_starts[static_cast<size_t>(g + 1)];
      T* destination = result + rows[order[static_cast<size_t>(begin)]] * width;
      for (int64_t p = begin; p < end; ++p) {
        const T* source = upstream + order[static_cast<size_t>(p)] * width;
#pragma omp simd
        for (int64_t k = 0; k < width; ++k) destination[k] += source[k];
      }
    }
  });
}

}  // namespace opsnn::ops
