// CUDA matrix product out = alpha * op(a) * op(b) + beta * out on row-major matrices through cuBLAS
// (column-major): the row-major product is computed as its transpose, out^T = op(b)^T op(a)^T.
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_context.h"
#include "ops/cuda/kernels.h"

namespace opsnn::ops {

void CudaBackend::gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& out, double alpha,
                       double beta) {
  OPSNN_CHECK_AS(ShapeError, a.dim() == 2 && b.dim() == 2 && out.dim() == 2, "CUDA gemm: needs 2-D operands, got ",
                 shape_str(a.shape()), ", ", shape_str(b.shape()), " -> ", shape_str(out.shape()));
  OPSNN_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(), "CUDA gemm: operands must be contiguous");
  cuda::require_f32(a, "gemm");
  check_same_dtype(a, b, "CUDA gemm");
  check_same_dtype(a, out, "CUDA gemm");
  cuda::require_on(b, out.device(), "gemm");
  cuda::require_on(a, out.device(), "gemm");
  const int64_t rows = transpose_a ? a.size(1) : a.size(0);
  const int64_t inner_a = transpose_a ? a.size(0) : a.size(1);
  const int64_t inner_b = transpose_b ? b.size(1) : b.size(0);
  const int64_t cols = transpose_b ? b.size(0) : b.size(1);
  OPSNN_CHECK_AS(ShapeError, inner_a == inner_b && out.size(0) == rows && out.size(1) == cols, "CUDA gemm: op(a) ",
                 rows, "x", inner_a, " times op(b) ", inner_b, "x", cols, " cannot give out ", shape_str(out.shape()));
  if (rows == 0 || cols == 0) return;
  cuda::DeviceGuard guard(out.device().index);
  if (inner_a == 0) {  // an empty sum: out = beta * out, never reading out when beta is 0
    if (beta == 0.0) OPSNN_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), nullptr));
    else cuda::launch_affine(out.data<float>(), static_cast<float>(beta), 0.0f, out.data<float>(), out.numel());
    OPSNN_CUDA_CHECK(cudaGetLastError());
    return;
  }
  cublasHandle_t handle = cuda::handles_for(out.device().index).cublas;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  // Leading dimensions are the row lengths of the row-major buffers (cuBLAS wants at least 1).
  const int lda = std::max(1, cuda::checked_int(a.size(1), "gemm"));
  const int ldb = std::max(1, cuda::checked_int(b.size(1), "gemm"));
  const int ldc = cuda::checked_int(cols, "gemm");
  OPSNN_CUBLAS_CHECK(cublasSgemm(handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ldc, cuda::checked_int(rows, "gemm"), cuda::checked_int(inner_a, "gemm"), &alpha_f,
                                 b.data<float>(), ldb, a.data<float>(), lda, &beta_f, out.data<float>(), ldc));
}

}  // namespace opsnn::ops
