// CPU matrix product out = alpha * op(a) * op(b) + beta * out on row-major matrices: Eigen's GEMM in the
// CPU variant in use (core/cpu_variants.h; Eigen spreads large products over OpenMP threads itself), or
// for fp32 oneDNN's sgemm where OPSNN_CPU_ENGINE says so (onednn.h).
#include "core/cpu_variants.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernel_support.h"
#include "ops/cpu/onednn.h"

namespace opsnn::ops {

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
  auto with_eigen = [&] {
    cpu::visit_floating(a.dtype(), "gemm", [&](auto tag) {
      using T = decltype(tag);
      opsnn::cpu::Matmul<T> product;
      product.a = a.data<T>();
      product.lda = a.size(1);
      product.transpose_a = transpose_a;
      product.b = b.data<T>();
      product.ldb = b.size(1);
      product.transpose_b = transpose_b;
      product.out = out.data<T>();
      product.ldo = cols;
      product.m = rows;
      product.n = cols;
      product.k = inner_a;
      product.alpha = static_cast<T>(alpha);
      product.beta = static_cast<T>(beta);
      opsnn::cpu::matmul(product);
    });
  };
  if (a.dtype() != DType::f32 || onednn::policy() == onednn::Policy::eigen) return with_eigen();
  // beta != 0 reads out: auto's timing runs would accumulate twice, so only plain products are timed.
  const bool timed_safely = beta == 0.0 || onednn::policy() != onednn::Policy::timed;
  auto with_onednn = [&] {
    onednn::sgemm(transpose_a, transpose_b, rows, cols, inner_a, static_cast<float>(alpha), a.data<float>(), a.size(1),
                  b.data<float>(), b.size(1), static_cast<float>(beta), out.data<float>(), cols);
  };
  if (!timed_safely) return with_onednn();
  onednn::run_on_engine({0, rows, cols, inner_a, transpose_a ? 1 : 0, transpose_b ? 1 : 0}, with_eigen, with_onednn);
}

}  // namespace opsnn::ops
