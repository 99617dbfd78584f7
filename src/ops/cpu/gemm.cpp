// CPU matrix product out = alpha * op(a) * op(b) + beta * out on row-major matrices, through Eigen
// (which spreads large products over OpenMP threads itself).
#include <Eigen/Core>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"

namespace opsnn::ops {
namespace {

template <typename T>
void gemm_typed(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& out, T alpha, T beta) {
  using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMajorMatrix> a_matrix(a.data<T>(), a.size(0), a.size(1));
  Eigen::Map<const RowMajorMatrix> b_matrix(b.data<T>(), b.size(0), b.size(1));
  Eigen::Map<RowMajorMatrix> out_matrix(out.data<T>(), out.size(0), out.size(1));
  auto multiply = [&](const auto& lhs, const auto& rhs) {
    // beta == 0 must not read out: it may hold uninitialized memory (NaN * 0 is NaN).
    if (beta == T(0)) {
      out_matrix.noalias() = alpha * (lhs * rhs);
    } else {
      if (beta != T(1)) out_matrix *= beta;
      out_matrix.noalias() += alpha * (lhs * rhs);
    }
  };
  if (transpose_a && transpose_b)
    multiply(a_matrix.transpose(), b_matrix.transpose());
  else if (transpose_a)
    multiply(a_matrix.transpose(), b_matrix);
  else if (transpose_b)
    multiply(a_matrix, b_matrix.transpose());
  else
    multiply(a_matrix, b_matrix);
}

}  // namespace

void CpuBackend::gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& out, double alpha,
                      double beta) {
  OPSNN_CHECK_AS(ShapeError, a.dim() == 2 && b.dim() == 2 && out.dim() == 2, "CPU gemm: needs 2-D operands, got ",
                 shape_str(a.shape()), ", ", shape_str(b.shape()), " -> ", shape_str(out.shape()));
  OPSNN_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(), "CPU gemm: operands must be contiguous");
  check_same_dtype(a, b, "CPU gemm");
  check_same_dtype(a, out, "CPU gemm");
  int64_t rows = transpose_a ? a.size(1) : a.size(0);
  int64_t inner_a = transpose_a ? a.size(0) : a.size(1);
  int64_t inner_b = transpose_b ? b.size(1) : b.size(0);
  int64_t cols = transpose_b ? b.size(0) : b.size(1);
  OPSNN_CHECK_AS(ShapeError, inner_a == inner_b && out.size(0) == rows && out.size(1) == cols, "CPU gemm: op(a) ", rows,
                 "x", inner_a, " times op(b) ", inner_b, "x", cols, " cannot give out ", shape_str(out.shape()));
  cpu::visit_floating(a.dtype(), "gemm", [&](auto tag) {
    using T = decltype(tag);
    gemm_typed<T>(a, transpose_a, b, transpose_b, out, static_cast<T>(alpha), static_cast<T>(beta));
  });
}

}  // namespace opsnn::ops
