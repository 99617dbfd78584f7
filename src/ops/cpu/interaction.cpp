// CPU dot interaction: per sample, the dot products of every pair of its feature vectors (the strictly
// lower triangle of x x^T, row by row) and the backward, grad_x[i] = sum over j != i of
// grad[pair(i, j)] * x[j]. Sums run in double in a fixed order (the CUDA twin's, src/ops/cuda/interaction.cu).
#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"

namespace opsnn::ops {
namespace {

// The position of the pair (i, j), j < i, in a row of the output.
inline int64_t pair_index(int64_t i, int64_t j) { return i * (i - 1) / 2 + j; }

void check_interaction_operands(const Tensor& x, const Tensor& pairs, const char* kernel) {
  OPSNN_CHECK_AS(ShapeError, x.dim() == 3, "CPU ", kernel, ": x must be [B, F, D], got ", shape_str(x.shape()));
  const int64_t features = x.size(1);
  OPSNN_CHECK_AS(ShapeError,
                 pairs.dim() == 2 && pairs.size(0) == x.size(0) && pairs.size(1) == features * (features - 1) / 2,
                 "CPU ", kernel, ": pairs ", shape_str(pairs.shape()), " do not match x ", shape_str(x.shape()),
                 " (expected [", x.size(0), ", ", features * (features - 1) / 2, "])");
  OPSNN_CHECK(x.is_contiguous() && pairs.is_contiguous(), "CPU ", kernel, ": operands must be contiguous");
  check_same_dtype(x, pairs, kernel);
}

}  // namespace

void CpuBackend::dot_interaction_forward(const Tensor& x, Tensor& out) {
  check_interaction_operands(x, out, "dot_interaction_forward");
  cpu::visit_floating(x.dtype(), "dot_interaction_forward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t batch = x.size(0), features = x.size(1), width = x.size(2), pairs = out.size(1);
    const T* input = x.data<T>();
    T* result = out.data<T>();
#pragma omp parallel for schedule(static) if (batch * pairs * width >= cpu::kParallelMinElements)
    for (int64_t b = 0; b < batch; ++b) {
      const T* sample = input + b * features * width;
      T* row = result + b * pairs;
      for (int64_t i = 1; i < features; ++i) {
        const T* left = sample + i * width;
        for (int64_t j = 0; j < i; ++j) {
          const T* right = sample + j * width;
          double sum = 0.0;
          for (int64_t d = 0; d < width; ++d) sum += static_cast<double>(left[d]) * static_cast<double>(right[d]);
          row[pair_index(i, j)] = static_cast<T>(sum);
        }
      }
    }
  });
}

void CpuBackend::dot_interaction_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_x) {
  check_interaction_operands(x, grad_out, "dot_interaction_backward");
  OPSNN_CHECK_AS(ShapeError, grad_x.shape() == x.shape() && grad_x.is_contiguous(),
                 "CPU dot_interaction_backward: grad_x ", shape_str(grad_x.shape()), " must be a contiguous ",
                 shape_str(x.shape()));
  check_same_dtype(grad_x, x, "dot_interaction_backward");
  cpu::visit_floating(x.dtype(), "dot_interaction_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t batch = x.size(0), features = x.size(1), width = x.size(2), pairs = grad_out.size(1);
    const T* input = x.data<T>();
    const T* upstream = grad_out.data<T>();
    T* result = grad_x.data<T>();
#pragma omp parallel if (batch * pairs * width >= cpu::kParallelMinElements)
    {
      std::vector<double> sums(static_cast<size_t>(width));
#pragma omp for schedule(static)
      for (int64_t b = 0; b < batch; ++b) {
        const T* sample = input + b * features * width;
        const T* row = upstream + b * pairs;
        for (int64_t i = 0; i < features; ++i) {
          std::fill(sums.begin(), sums.end(), 0.0);
          for (int64_t j = 0; j < features; ++j) {
            if (j == i) continue;
            const double g = static_cast<double>(row[j < i ? pair_index(i, j) : pair_index(j, i)]);
            const T* other = sample + j * width;
            for (int64_t d = 0; d < width; ++d) sums[static_cast<size_t>(d)] += g * static_cast<double>(other[d]);
          }
          T* destination = result + (b * features + i) * width;
          for (int64_t d = 0; d < width; ++d) destination[d] = static_cast<T>(sums[static_cast<size_t>(d)]);
        }
      }
    }
  });
}

}  // namespace opsnn::ops
