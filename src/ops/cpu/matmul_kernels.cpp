// cpu::Matmul through Eigen's GEMM (which spreads large products over OpenMP threads itself), compiled
// once per CPU variant: Eigen's kernels then use that variant's vector units.
#include "ops/cpu/matmul_kernels.h"

#include <Eigen/Core>

#ifndef OPSNN_CPU_VARIANT
#error "compiled once per CPU variant (CMakeLists.txt: OPSNN_CPU_VARIANT_SOURCES)"
#endif

namespace opsnn::ops::cpu::OPSNN_CPU_VARIANT {
namespace {

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstStrided = Eigen::Map<const RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using Strided = Eigen::Map<RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename T>
void matmul_typed(const opsnn::cpu::Matmul<T>& p) {
  const ConstStrided<T> a(p.a, p.transpose_a ? p.k : p.m, p.transpose_a ? p.m : p.k, Eigen::OuterStride<>(p.lda));
  const ConstStrided<T> b(p.b, p.transpose_b ? p.n : p.k, p.transpose_b ? p.k : p.n, Eigen::OuterStride<>(p.ldb));
  Strided<T> out(p.out, p.m, p.n, Eigen::OuterStride<>(p.ldo));
  auto multiply = [&](const auto& lhs, const auto& rhs) {
    if (p.beta == T(0)) {  // never reads out
      if (p.alpha == T(1))
        out.noalias() = lhs * rhs;
      else
        out.noalias() = p.alpha * (lhs * rhs);
      return;
    }
    if (p.beta != T(1)) out *= p.beta;
    if (p.alpha == T(1))
      out.noalias() += lhs * rhs;
    else
      out.noalias() += p.alpha * (lhs * rhs);
  };
  if (p.transpose_a && p.transpose_b)
    multiply(a.transpose(), b.transpose());
  else if (p.transpose_a)
    multiply(a.transpose(), b);
  else if (p.transpose_b)
    multiply(a, b.transpose());
  else
    multiply(a, b);
}

}  // namespace

void matmul_f32(const opsnn::cpu::Matmul<float>& product) { matmul_typed(product); }
void matmul_f64(const opsnn::cpu::Matmul<double>& product) { matmul_typed(product); }

}  // namespace opsnn::ops::cpu::OPSNN_CPU_VARIANT
