// conv_lowerings.h's lowerings of the CUDA conv2d, host side: the subsampled lowering's gather and scatter,
// and the gemm lowering's plan, im2col chunks and batched cuBLAS GEMMs, with the column budget setting
// (conv_algorithms.h). The kernels they launch are conv_lowering.cu's.
#include "ops/cuda/conv_lowerings.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "core/cuda/multiprocessors.h"
#include "ops/cuda/conv_algorithms.h"
#include "ops/cuda/device_context.h"
#include "ops/cuda/kernels.h"

namespace opsnn::ops {
namespace {

std::atomic<size_t> column_budget_setting{size_t{512} << 20};

}  // namespace

namespace detail {

// ---- the subsampled lowering (1x1, stride > 1, no padding) ----

namespace {

// im2col of a 1x1 kernel without padding: exactly x[:, :, ::stride_h, ::stride_w], as [N, C, out_h, out_w].
cuda::Im2colLayout subsample_layout(const Shape& input, const Shape& output, const Conv2dGeometry& g) {
  return {input[0], input[1], input[2], input[3], output[2], output[3], 1, 1, g.stride_h, g.stride_w, 0, 0, input[1]};
}

}  // namespace

Shape subsampled_shape(const Shape& input, const Shape& output) { return {input[0], input[1], output[2], output[3]}; }

void subsample(const Tensor& input, Tensor& sampled, const Conv2dGeometry& g) {
  const cuda::Im2colLayout layout = subsample_layout(input.shape(), sampled.shape(), g);
  cuda::dispatch_floating(input.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_im2col(input.data<T>(), sampled.data<T>(), layout);
  });
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

void unsubsample(const Tensor& sampled_grad, Tensor& grad_input, const Conv2dGeometry& g) {
  const cuda::Im2colLayout layout = subsample_layout(grad_input.shape(), sampled_grad.shape(), g);
  cuda::dispatch_floating(grad_input.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_col2im(sampled_grad.data<T>(), grad_input.data<T>(), layout);
  });
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

// ---- the gemm lowering (im2col + batched cuBLAS GEMMs) ----

GemmPlan gemm_plan(const Shape& input, const Shape& weight, const Shape& output, const Conv2dGeometry& g) {
  GemmPlan plan;
  if (g.channels_last) {
    plan.filters = weight[0];
    plan.rows = plan.rows_padded = weight[1];
    plan.pixels = output[1] * output[2];
    plan.in_plane = input[1] * input[2];
    plan.direct = plan.channels_last = true;
    return plan;
  }
  plan.filters = weight[0];
  plan.rows = input[1] * weight[2] * weight[3];
  plan.rows_padded = (plan.rows + 7) / 8 * 8;  // 16-byte aligned rows for the tensor-core GEMMs
  plan.pixels = output[2] * output[3];
  plan.in_plane = input[2] * input[3];
  plan.layout = {input[0],  input[1],   input[2],   input[3], output[2], output[3],       weight[2],
                 weight[3], g.stride_h, g.stride_w, g.pad_h,  g.pad_w,   plan.rows_padded};
  plan.direct = weight[2] == 1 && weight[3] == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 &&
                g.pad_w == 0 && plan.rows == plan.rows_padded;
  return plan;
}

namespace {

// Images per chunk when each image needs `bytes_per_image` of scratch.
int64_t images_per_chunk(int64_t images, size_t bytes_per_image) {
  const size_t fitting = conv_column_budget() / std::max<size_t>(bytes_per_image, 1);
  return std::clamp<int64_t>(static_cast<int64_t>(std::min<size_t>(fitting, INT64_MAX)), 1,
                             std::max<int64_t>(images, 1));
}

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// One operand of a strided batched GEMM: column-major data with leading dimension ld, `stride` elements
// between consecutive images (0: shared by all).
struct GemmOperand {
  const void* data;
  cudaDataType_t type;
  int64_t ld, stride;
};

// C[i] = op_a(A[i]) * op_b(B[i]) + beta * C[i] for i < count (column-major, m x n, inner k), C f32 or the
// data type, with the compute type the data type and f32 math setting allow.
void batched_gemm(cublasHandle_t handle, DType dtype, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m,
                  int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, void* c, cudaDataType_t c_type,
                  int64_t ldc, int64_t c_stride, int64_t count, float beta = 0.0f) {
  const cublasComputeType_t compute =
      dtype == DType::f32 && fp32_math() == Fp32Math::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float one = 1.0f;
  OPSNN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, op_a, op_b, cuda::checked_int(m, "conv2d"), cuda::checked_int(n, "conv2d"),
      cuda::checked_int(k, "conv2d"), &one, a.data, a.type, cuda::checked_int(a.ld, "conv2d"), a.stride, b.data, b.type,
      cuda::checked_int(b.ld, "conv2d"), b.stride, &beta, c, c_type, cuda::checked_int(ldc, "conv2d"), c_stride,
      cuda::checked_int(count, "conv2d"), compute, CUBLAS_GEMM_DEFAULT));
}

// weight [K, C, R, S] as [K, rows_padded] with the rows C*R*S..rows_padded-1 zero (weight itself when
// there are none).
Tensor padded_weight(const Tensor& weight, const GemmPlan& plan) {
  if (plan.rows == plan.rows_padded) return weight;
  Tensor padded = Tensor::empty({plan.filters, plan.rows_padded}, weight.dtype(), weight.device());
  const size_t element = dtype_size(weight.dtype());
  const size_t row = static_cast<size_t>(plan.rows) * element,
               padded_row = static_cast<size_t>(plan.rows_padded) * element;
  auto* base = static_cast<char*>(padded.data_ptr());
  const auto filters = static_cast<size_t>(plan.filters);
  if (padded_row > row)
    OPSNN_CUDA_CHECK(cudaMemset2DAsync(base + row, padded_row, 0, padded_row - row, filters, cuda::current_stream()));
  OPSNN_CUDA_CHECK(cudaMemcpy2DAsync(base, padded_row, weight.data_ptr(), row, row, filters, cudaMemcpyDeviceToDevice,
                                     cuda::current_stream()));
  return padded;
}

void im2col(const Tensor& input, int64_t first, int64_t count, const GemmPlan& plan, void* columns) {
  cuda::Im2colLayout layout = plan.layout;
  layout.images = count;
  cuda::dispatch_floating(input.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_im2col(input.data<T>() + first * plan.layout.channels * plan.in_plane, static_cast<T*>(columns),
                        layout);
  });
  OPSNN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void gemm_forward(cublasHandle_t handle, const Tensor& input, const Tensor& weight, Tensor& out, const GemmPlan& plan) {
  const DType dtype = out.dtype();
  if (plan.channels_last) {
    const cudaDataType_t type = cuda_data_type(dtype);
    batched_gemm(handle, dtype, CUBLAS_OP_T, CUBLAS_OP_N, plan.filters, input.size(0) * plan.pixels, plan.rows,
                 {weight.data_ptr(), type, plan.rows, 0}, {input.data_ptr(), type, plan.rows, 0}, out.data_ptr(), type,
                 plan.filters, 0, 1);
    return;
  }
  const size_t element = dtype_size(dtype);
  const Tensor w = padded_weight(weight, plan);
  const int64_t images = input.size(0);
  const int64_t chunk =
      plan.direct ? images : images_per_chunk(images, static_cast<size_t>(plan.rows_padded * plan.pixels) * element);
  std::optional<Storage> columns;
  if (!plan.direct)
    columns.emplace(static_cast<size_t>(chunk * plan.rows_padded * plan.pixels) * element, out.device());
  const cudaDataType_t type = cuda_data_type(dtype);
  for (int64_t first = 0; first < images; first += chunk) {
    const int64_t count = std::min(chunk, images - first);
    const void* a = plan.direct ? input.data_ptr() : columns->data();
    if (!plan.direct) im2col(input, first, count, plan, columns->data());
    batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_N, plan.pixels, plan.filters, plan.rows_padded,
                 {a, type, plan.pixels, plan.rows_padded * plan.pixels}, {w.data_ptr(), type, plan.rows_padded, 0},
                 static_cast<char*>(out.data_ptr()) + static_cast<size_t>(first * plan.filters * plan.pixels) * element,
                 type, plan.pixels, plan.filters * plan.pixels, count);
  }
}

bool gemm_backward_input_accumulates(const GemmPlan& plan) { return plan.channels_last || plan.direct; }

void gemm_backward_input(cublasHandle_t handle, const Tensor& grad_out, const Tensor& weight, Tensor& grad_input,
                         const GemmPlan& plan, bool accumulate) {
  OPSNN_CHECK(!accumulate || gemm_backward_input_accumulates(plan),
              "conv2d: this GEMM lowering cannot add the input gradient in place");
  const float beta = accumulate ? 1.0f : 0.0f;
  const DType dtype = grad_input.dtype();
  const size_t element = dtype_size(dtype);
  const cudaDataType_t type = cuda_data_type(dtype);
  const int64_t images = grad_input.size(0);
  if (plan.channels_last) {
    batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_N, plan.rows, images * plan.pixels, plan.filters,
                 {weight.data_ptr(), type, plan.rows, 0}, {grad_out.data_ptr(), type, plan.filters, 0},
                 grad_input.data_ptr(), type, plan.rows, 0, 1, beta);
    return;
  }
  const Tensor w = padded_weight(weight, plan);
  if (plan.direct) {
    batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_T, plan.pixels, plan.rows_padded, plan.filters,
                 {grad_out.data_ptr(), type, plan.pixels, plan.filters * plan.pixels},
                 {w.data_ptr(), type, plan.rows_padded, 0}, grad_input.data_ptr(), type, plan.pixels,
                 plan.rows_padded * plan.pixels, images, beta);
    return;
  }
  const int64_t chunk = images_per_chunk(images, static_cast<size_t>(plan.rows_padded * plan.pixels) * sizeof(float));
  Storage columns(static_cast<size_t>(chunk * plan.rows_padded * plan.pixels) * sizeof(float), grad_input.device());
  for (int64_t first = 0; first < images; first += chunk) {
    const int64_t count = std::min(chunk, images - first);
    const char* dy = static_cast<const char*>(grad_out.data_ptr()) +
                     static_cast<size_t>(first * plan.filters * plan.pixels) * element;
    batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_T, plan.pixels, plan.rows_padded, plan.filters,
                 {dy, type, plan.pixels, plan.filters * plan.pixels}, {w.data_ptr(), type, plan.rows_padded, 0},
                 columns.data(), CUDA_R_32F, plan.pixels, plan.rows_padded * plan.pixels, count);
    cuda::Im2colLayout layout = plan.layout;
    layout.images = count;
    cuda::dispatch_floating(dtype, "conv2d", [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_col2im(static_cast<const float*>(columns.data()),
                          grad_input.data<T>() + first * plan.layout.channels * plan.in_plane, layout);
    });
    OPSNN_CUDA_CHECK(cudaGetLastError());
  }
}

// Weight-gradient partials for `images` images: one per image, except for channels-last convolutions,
// whose images are consecutive rows of one [N*H*W, C] matrix, so a partial may cover several of them (one
// longer K; fewer partials to write, sum and hold). One image each while the GEMM has few output tiles
// (the partials are then its parallelism); for large gradients enough partials for about two waves of
// 128x128 tiles (a 2048 x 512 gradient of 256 images: 5 partials where there were 256, 1 GiB of f32
// partials written and read before).
int64_t partials_for(const GemmPlan& plan, int64_t images) {
  if (!plan.channels_last) return images;
  const int64_t tiles = ((plan.rows + 127) / 128) * ((plan.filters + 127) / 128);
  return std::clamp<int64_t>((2 * cuda::multiprocessor_count() + tiles - 1) / tiles, 1, std::max<int64_t>(images, 1));
}

// Images per partial: ceil(images / partials_for(images)), so the groups of that many images and the one
// group of the rest number at most partials_for(images), and at most partials_for(chunk) for a chunk's
// worth or fewer (what the partials buffer holds).
int64_t images_per_partial(const GemmPlan& plan, int64_t images) {
  const int64_t partials = partials_for(plan, images);
  return (images + partials - 1) / partials;
}

void gemm_backward_weight(cublasHandle_t handle, const Tensor& grad_out, const Tensor& input, Tensor& grad_weight,
                          const GemmPlan& plan) {
  const DType dtype = grad_weight.dtype();
  const size_t element = dtype_size(dtype);
  const int64_t images = input.size(0);
  const size_t per_image = (plan.direct ? 0 : static_cast<size_t>(plan.rows_padded * plan.pixels) * element) +
                           static_cast<size_t>(plan.filters * plan.rows_padded) * sizeof(float);
  const int64_t chunk = images_per_chunk(images, per_image);
  std::optional<Storage> columns;
  if (!plan.direct)
    columns.emplace(static_cast<size_t>(chunk * plan.rows_padded * plan.pixels) * element, grad_weight.device());
  Storage partials(static_cast<size_t>(partials_for(plan, chunk) * plan.filters * plan.rows_padded) * sizeof(float),
                   grad_weight.device());
  Tensor sums =
      dtype == DType::f32 ? grad_weight : Tensor::empty(grad_weight.shape(), DType::f32, grad_weight.device());
  const cudaDataType_t type = cuda_data_type(dtype);
  for (int64_t first = 0; first < images; first += chunk) {
    const int64_t count = std::min(chunk, images - first);
    const void* a = plan.direct ? static_cast<const char*>(input.data_ptr()) +
                                      static_cast<size_t>(first * plan.rows_padded * plan.pixels) * element
                                : columns->data();
    if (!plan.direct) im2col(input, first, count, plan, columns->data());
    const char* dy = static_cast<const char*>(grad_out.data_ptr()) +
                     static_cast<size_t>(first * plan.filters * plan.pixels) * element;
    int64_t partial_count = count;
    if (plan.channels_last) {
      // Groups of `group` images, one partial each (K = group * pixels), and the rest in one more.
      const int64_t group = images_per_partial(plan, count), whole = count / group, rest = count - whole * group;
      const int64_t matrix = plan.filters * plan.rows;
      if (whole > 0)
        batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_T, plan.rows, plan.filters, group * plan.pixels,
                     {a, type, plan.rows, group * plan.rows * plan.pixels},
                     {dy, type, plan.filters, group * plan.filters * plan.pixels}, partials.data(), CUDA_R_32F,
                     plan.rows, matrix, whole);
      if (rest > 0) {
        const size_t skipped = static_cast<size_t>(whole * group * plan.pixels) * element;
        batched_gemm(handle, dtype, CUBLAS_OP_N, CUBLAS_OP_T, plan.rows, plan.filters, rest * plan.pixels,
                     {static_cast<const char*>(a) + skipped * static_cast<size_t>(plan.rows), type, plan.rows, 0},
                     {dy + skipped * static_cast<size_t>(plan.filters), type, plan.filters, 0},
                     static_cast<float*>(partials.data()) + whole * matrix, CUDA_R_32F, plan.rows, matrix, 1);
      }
      partial_count = whole + (rest > 0 ? 1 : 0);
    } else {
      batched_gemm(handle, dtype, CUBLAS_OP_T, CUBLAS_OP_N, plan.rows_padded, plan.filters, plan.pixels,
                   {a, type, plan.pixels, plan.rows_padded * plan.pixels},
                   {dy, type, plan.pixels, plan.filters * plan.pixels}, partials.data(), CUDA_R_32F, plan.rows_padded,
                   plan.filters * plan.rows_padded, count);
    }
    cuda::launch_sum_partials(static_cast<const float*>(partials.data()), partial_count, plan.filters, plan.rows,
                              plan.rows_padded, sums.data<float>(), first > 0);
    OPSNN_CUDA_CHECK(cudaGetLastError());
  }
  if (dtype != DType::f32) grad_weight.copy_(sums);
}

}  // namespace detail

void set_conv_column_budget(size_t bytes) { column_budget_setting.store(bytes); }
size_t conv_column_budget() { return column_budget_setting.load(); }

}  // namespace opsnn::ops
