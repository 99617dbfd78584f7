// The lowerings of the CUDA conv2d, host side (conv_lowerings.cpp; the kernels are conv_lowering.cu's):
// the subsampled lowering, which runs a 1x1 stride > 1 convolution without padding as cuDNN's stride-1
// convolution of x[:, :, ::stride_h, ::stride_w] with one gather or scatter copy around it, and the gemm
// lowering, im2col into per-image column matrices and batched cuBLAS GEMMs (plain GEMMs on the data where
// it already is the column matrix, channels-last 1x1 stride-1 convolutions among them), its scratch bounded
// by the column budget (the batch runs in chunks of images). Which applies, and whether it runs, is the
// search's (conv_search.h). Internal to src/ops/cuda/.
#pragma once

#include <cstdint>

#include "ops/cuda/device_context.h"
#include "ops/cuda/kernels.h"
#include "opsnn/core/tensor.h"
#include "opsnn/ops/backend.h"

namespace opsnn::ops::detail {

// ---- the subsampled lowering (1x1, stride > 1, no padding) ----

inline constexpr Conv2dGeometry kUnitStride{};  // stride 1, no padding

// The shape of x[:, :, ::stride_h, ::stride_w] for an input and the strided convolution's output.
Shape subsampled_shape(const Shape& input, const Shape& output);

// sampled = input[:, :, ::stride_h, ::stride_w] (g's strides).
void subsample(const Tensor& input, Tensor& sampled, const Conv2dGeometry& g);

// grad_input = the sampled positions' gradients, zero elsewhere (col2im of the 1x1 layout).
void unsubsample(const Tensor& sampled_grad, Tensor& grad_input, const Conv2dGeometry& g);

// ---- the gemm lowering (im2col + batched cuBLAS GEMMs) ----

struct GemmPlan {
  cuda::Im2colLayout layout;  // for the whole batch; chunks change `images`
  int64_t filters = 0, rows = 0, rows_padded = 0, pixels = 0, in_plane = 0;
  // A 1x1 stride-1 convolution without padding on channels that need no row padding: each image's
  // [C, H*W] input already is its column matrix, and the input gradient is the GEMM's output.
  bool direct = false;
  // Channels-last (always 1x1, stride 1, no padding): the NHWC input is an [N*H*W, C] matrix and the
  // [K, C, 1, 1] weight a [K, C] one (KRSC and KCRS agree for 1x1), so each direction is plain GEMMs.
  bool channels_last = false;
};

// The plan of the gemm lowering for a convolution of these shapes (its tensors' own) and geometry.
GemmPlan gemm_plan(const Shape& input, const Shape& weight, const Shape& output, const Conv2dGeometry& g);

// Per image: out[K, P] = W[K, rows] * columns[rows, P] (row-major; cuBLAS sees the transposes).
// Channels-last: out[N*P, K] = X[N*P, C] * W[K, C]^T in one GEMM.
void gemm_forward(cublasHandle_t handle, const Tensor& input, const Tensor& weight, Tensor& out, const GemmPlan& plan);

// Per image: dcolumns[rows, P] = W^T * dY[K, P] in f32, then col2im into grad_input; a direct plan's
// GEMM writes grad_input itself.
// Channels-last: grad_input[N*P, C] = dY[N*P, K] * W[K, C] in one GEMM. With accumulate the GEMM adds to
// grad_input instead (beta 1), for the plans gemm_backward_input_accumulates: direct and channels-last.
void gemm_backward_input(cublasHandle_t handle, const Tensor& grad_out, const Tensor& weight, Tensor& grad_input,
                         const GemmPlan& plan, bool accumulate = false);
bool gemm_backward_input_accumulates(const GemmPlan& plan);

// Per image: partial[K, rows_padded] = dY[K, P] * columns[rows, P]^T in f32 (channels-last: dY[P, K]^T *
// X[P, C]); the partials summed over the images in order (double) into an f32 [K, rows] result, converted
// to the weight's dtype.
void gemm_backward_weight(cublasHandle_t handle, const Tensor& grad_out, const Tensor& input, Tensor& grad_weight,
                          const GemmPlan& plan);

}  // namespace opsnn::ops::detail
