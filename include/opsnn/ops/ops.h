// The differentiable functional API: each function validates its arguments (messages name both sides),
// runs the kernel of the tensor's device (backend.h) and records its backward for autograd.
#pragma once

#include <cstdint>
#include <vector>

#include "opsnn/core/tensor.h"
#include "opsnn/ops/backend.h"

namespace opsnn::ops {

// ---- dense algebra ----
Tensor matmul(const Tensor& a, const Tensor& b);                               // [M,K] x [K,N]
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias);  // x W^T + b; bias optional

// ---- dtype conversion between floating dtypes; the gradient is converted back. Returns x when it
// already has dtype.
Tensor cast(const Tensor& x, DType dtype);
// cast(x, copy.dtype()) when the caller already holds its value: `copy` is x rounded to another floating
// dtype (a parameter copy the optimizer keeps, optim::Optimizer::enable_param_copy). Nothing is converted
// in the forward (the result shares copy's data); the gradient reaches x as cast's does.
Tensor cast_from_copy(const Tensor& x, const Tensor& copy);

// ---- elementwise with broadcasting (NumPy rules) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double factor);  // x * factor
Tensor relu(const Tensor& x);
// relu(a + b): one fused pass (kept for the backward as relu's output) when a and b have one shape,
// dtype and device; other operands go through relu(add(a, b)), broadcasting included.
Tensor add_relu(const Tensor& a, const Tensor& b);
Shape broadcast_shapes(const Shape& a, const Shape& b);  // throws ShapeError naming both shapes

// ---- reductions ----
Tensor sum(const Tensor& x);  // all elements -> scalar
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// ---- shape ----
Tensor reshape(const Tensor& x, const Shape& shape);  // one dimension may be -1
Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);
// x with its dimensions reordered: dimension i of the result is dimension order[i] of x (order a
// permutation of 0 .. dim - 1), copied to a contiguous tensor. The gradient is permuted back.
Tensor permute(const Tensor& x, const std::vector<int64_t>& order);
// Entries [start, end) of x's first dimension, as a contiguous tensor (a contiguous range of x's elements,
// so the backward writes the gradient into a zero tensor of x's shape with one device copy on any device).
// ShapeError for a 0-d x or a range outside the dimension.
Tensor slice(const Tensor& x, int64_t start, int64_t end);
// The tensors joined along dimension `dim` (negative counts from the end) into one contiguous tensor:
// every other dimension equal, one dtype and device. The gradient is split back into the pieces.
// ShapeError for an empty list or shapes that do not line up.
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim);

// ---- convolution, normalization, pooling (NCHW; convolution and batch norm also channels-last) ----
// input [N, C, H, W] -> [N, K, H', W'], or with geometry.channels_last [N, H, W, C] -> [N, H', W', K];
// the weight is [K, C, kH, kW] in both layouts.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& geometry = {});
// training: batch statistics, updates running_mean/running_var in place; eval: running statistics.
// Mixed precision: an f16/bf16 input may come with f32 gamma, beta and running statistics; statistics
// are then computed in f32 (or wider), the output has the input's dtype and gamma/beta gradients are f32.
// The channel axis is 1 ([N, C] or [N, C, ...]), or with channels_last the last one ([N, ..., C], e.g.
// NHWC activations), statistics then per channel over all other positions.
Tensor batch_norm(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                  bool channels_last = false);
// relu(batch_norm(...)) with the same arguments, the relu fused into batch norm's last elementwise pass and
// its mask into the backward's passes (the batch-norm output before the relu is never stored).
Tensor batch_norm_relu(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                       Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                       bool channels_last = false);
// relu(batch_norm(input, ...) + residual), the residual of the input's shape, dtype and device: a ResNet
// block's last batch norm, shortcut add and relu in one pass over the data, equal bit for bit to batch_norm
// followed by add_relu. The backward masks the upstream gradient once; that tensor is the residual's
// gradient and what batch norm's backward reads.
Tensor batch_norm_add_relu(const Tensor& input, const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                           Tensor& running_mean, Tensor& running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5, bool channels_last = false);
// A batch norm's parameters, running statistics and settings as batch_norm takes them (gamma / beta
// undefined: 1 and 0; the running statistics are updated in place in training).
struct BatchNormArgs {
  Tensor gamma, beta, running_mean, running_var;
  double momentum = 0.1, eps = 1e-5;
};
// relu(batch_norm(input, norm) + batch_norm(shortcut, shortcut_norm)), the shortcut of the input's shape,
// dtype and device: a ResNet block's end with its downsampling shortcut's batch norm folded into the same
// pass, so the shortcut's normalized values are never stored (its statistics take a pass of their own).
// Equal bit for bit to batch_norm on the shortcut followed by batch_norm_add_relu, forward, running
// statistics and every gradient; eval mode computes it that way.
Tensor dual_batch_norm_add_relu(const Tensor& input, const BatchNormArgs& norm, const Tensor& shortcut,
                                const BatchNormArgs& shortcut_norm, bool training, bool channels_last = false);
// 1 / sqrt(var + eps) element by element for a 1-d tensor of per-channel variances (>= 0), on batch norm's
// own kernels; the gradient is -0.5 * invstd^3. What a batch norm composed from ops (nn::sync_batch_norm)
// normalises with.
Tensor batch_norm_invstd(const Tensor& var, double eps);
Tensor max_pool2d(const Tensor& input, const Pool2dGeometry& geometry);
// max_pool2d(batch_norm_relu(input, ...), pool) for an NCHW input [N, C, H, W] (a ResNet stem's tail). In
// training on a backend that fuses the pair (CUDA: stride-2 windows up to 5 wide) the forward writes only
// the pooled output (bit for bit the composition's), and neither direction stores the relu output or its
// gradient: the backward's batch-norm sums run over the windows and its input gradient gathers them.
// Elsewhere (eval, the CPU, other geometries) it is the composition.
Tensor batch_norm_relu_max_pool2d(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                  Tensor& running_var, bool training, double momentum, double eps,
                                  const Pool2dGeometry& pool);
Tensor avg_pool2d(const Tensor& input, const Pool2dGeometry& geometry);
Tensor global_avg_pool2d(const Tensor& input);       // [N, C, H, W] -> [N, C]
Tensor global_avg_pool2d_nhwc(const Tensor& input);  // [N, H, W, C] -> [N, C], the same sums

// ---- softmax and losses ----
Tensor log_softmax(const Tensor& logits);  // over the last dimension of [N, K]
// Mean cross-entropy of logits [N, K] against class indices (i64 [N]), with optional label smoothing.
// f16/bf16 logits are cast to f32 first: the loss is always computed and returned in f32.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, double label_smoothing = 0.0);

// ---- embedding ----
// weight [V, D], indices i64 of any shape -> indices.shape + [D]. If weight.sparse_grad(), backward
// appends a RowSparseGrad to the weight instead of a dense gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices);

// ---- feature interaction ----
// DLRM's dot interaction (Naumov et al. 2019, "Deep Learning Recommendation Model for Personalization and
// Recommendation Systems"): x [B, F, D], F feature vectors per sample, -> [B, F(F-1)/2], the dot product
// of every pair j < i in the order (1, 0), (2, 0), (2, 1), (3, 0), ... (the strictly lower triangle of
// x x^T, row by row). f32 or f64 on the CPU, f32 on CUDA.
Tensor dot_interaction(const Tensor& x);

}  // namespace opsnn::ops
