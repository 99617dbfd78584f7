// CUDA matrix product out = alpha * op(a) * op(b) + beta * out on row-major matrices through cuBLAS
// (column-major): the row-major product is computed as its transpose, out^T = op(b)^T op(a)^T.
// f32 runs cublasSgemm with full f32 products, or TF32 tensor cores when the f32 math setting is tf32;
// f16 and bf16 run cublasGemmEx on tensor cores with f32 accumulation (CUBLAS_COMPUTE_32F) and f32
// alpha/beta, the result rounded once to the operands' dtype.
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
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
  cuda::require_floating(a, "gemm");
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
    if (beta == 0.0)
      OPSNN_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), cuda::current_stream()));
    else
      cuda::dispatch_floating(out.dtype(), "gemm", [&](auto tag) {
        using T = decltype(tag);
        cuda::launch_affine(out.data<T>(), static_cast<float>(beta), 0.0f, out.data<T>(), out.numel());
      });
    OPSNN_CUDA_CHECK(cudaGetLastError());
    return;
  }
  cublasHandle_t handle = cuda::handles_for(out.device().index).cublas;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  // Leading dimensions are the row lengths of the row-major buffers (cuBLAS wants at least 1).
  const int lda = std::max(1, cuda::checked_int(a.size(1), "gemm"));
  const int ldb = std::max(1, cuda::checked_int(b.size(1), "gemm"));
  const int ldc = cuda::checked_int(cols, "gemm");
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                          op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = ldc, n = cuda::checked_int(rows, "gemm"), k = cuda::checked_int(inner_a, "gemm");
  if (out.dtype() == DType::f32 && fp32_math() == Fp32Math::strict) {
    OPSNN_CUBLAS_CHECK(cublasSgemm(handle, op_b, op_a, m, n, k, &alpha_f, b.data<float>(), ldb, a.data<float>(), lda,
                                   &beta_f, out.data<float>(), ldc));
    return;
  }
  const cudaDataType_t type = out.dtype() == DType::f32   ? CUDA_R_32F
                              : out.dtype() == DType::f16 ? CUDA_R_16F
                                                          : CUDA_R_16BF;
  const cublasComputeType_t compute = out.dtype() == DType::f32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  OPSNN_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, m, n, k, &alpha_f, b.data_ptr(), type, ldb, a.data_ptr(), type,
                                  lda, &beta_f, out.data_ptr(), type, ldc, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace opsnn::ops
