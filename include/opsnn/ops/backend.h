// The kernel interface every compute backend implements (cpu/ with Eigen + OpenMP, cuda/ with cuBLAS,
// cuDNN and own kernels), and the registry the functional ops dispatch through by tensor device.
// Kernels receive contiguous tensors (except where noted) and preallocated outputs of the right shape
// and dtype; the functional layer (ops.h) validates arguments and records autograd history.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "opsnn/core/tensor.h"

namespace opsnn::ops {

enum class BinaryOp : uint8_t { add, sub, mul, div };

struct Conv2dGeometry {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  // Activations (input, output and their gradients) are [N, H, W, C] instead of [N, C, H, W]; the
  // weight stays [K, C, kH, kW].
  bool channels_last = false;
};

struct Pool2dGeometry {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // average pooling: divide by the full window (PyTorch's default)
};

// A residual that batch_norm_forward_train normalizes itself: the residual tensor is then the input of
// another batch norm, whose training statistics were saved by its own batch_norm_forward_train with an
// undefined out, and what is added is that batch norm's output, the dtype's rounding of
// (r - save_mean) * (gamma * save_invstd) + beta as its normalizing pass computes it (bit for bit), which is
// never stored. All four undefined: the residual is added as it is.
struct ResidualNormalization {
  Tensor gamma, beta, save_mean, save_invstd;
  bool defined() const { return gamma.defined(); }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- dense algebra ----
  // out[M,N] = alpha * op(a) * op(b) + beta * out, all 2-D row-major contiguous.
  virtual void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& out, double alpha,
                    double beta) = 0;

  // ---- elementwise ----
  // out = a (op) b where a and b are strided views already broadcast to out's shape (stride 0 on
  // broadcast dimensions); out is contiguous.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // out = x * scale + shift
  virtual void affine(const Tensor& x, double scale, double shift, Tensor& out) = 0;
  virtual void relu(const Tensor& x, Tensor& out) = 0;
  // grad_in = grad_out where x > 0, else 0 (x: the relu input or, the same mask, its output)
  virtual void relu_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in) = 0;
  // out = relu(a + b) in one pass (the residual add of a ResNet block): a, b and out contiguous, one shape.
  virtual void add_relu(const Tensor& a, const Tensor& b, Tensor& out) = 0;

  // ---- reductions ----
  // out has x's shape with every dimension in `reduce_dims` set to 1 (keepdim); sums over them.
  virtual void sum(const Tensor& x, const std::vector<int64_t>& reduce_dims, Tensor& out) = 0;

  // ---- convolution (NCHW input, or NHWC with geometry.channels_last; OIHW weight always) ----
  virtual void conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor& out,
                              const Conv2dGeometry& geometry) = 0;  // bias may be undefined
  // grad_input = the input gradient, or with accumulate grad_input += it (the gradient another consumer
  // of the input gave, summed in place where the kernels can: autograd's Node::backward_into).
  virtual void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, Tensor& grad_input,
                                     const Conv2dGeometry& geometry, bool accumulate) = 0;
  virtual void conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, Tensor& grad_weight,
                                      const Conv2dGeometry& geometry) = 0;

  // ---- batch normalization over N, H, W per channel (input [N, C, ...]; the channels-last op passes its
  // [N, H, W, C] input as [N * H * W, C]) ----
  // Training: normalizes with batch statistics, saves mean and 1/sqrt(var + eps), and updates running
  // stats: running = (1 - momentum) * running + momentum * batch (unbiased variance), as PyTorch.
  // With `relu` both forwards write relu(batch norm) instead, fused into the normalizing pass. residual:
  // undefined, or (with relu only) a contiguous tensor of the input's shape and dtype added before the relu,
  // relu(batch norm + residual), the normalized value rounded to the dtype first: what batch norm followed
  // by add_relu stores (a ResNet block's last batch norm, its shortcut and the relu in one pass). With
  // residual_norm defined the training forward normalizes the residual first (a downsampling shortcut's
  // batch norm in the same pass). An undefined out (training, without relu and residual): the statistics
  // and the running-stat update only, no normalizing pass.
  virtual void batch_norm_forward_train(const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                        Tensor& running_mean, Tensor& running_var, double momentum, double eps,
                                        bool relu, const Tensor& residual, const ResidualNormalization& residual_norm,
                                        Tensor& out, Tensor& save_mean, Tensor& save_invstd) = 0;
  virtual void batch_norm_forward_eval(const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& running_mean, const Tensor& running_var, double eps, bool relu,
                                       const Tensor& residual, Tensor& out) = 0;
  // Backward of the training forward; grad_gamma / grad_beta may be undefined when not needed.
  // The fused relu's mask, grad_out counting only where the relu output is positive (masked as it is
  // read), comes from one of two places, or neither for a plain batch norm:
  //  - relu_output: the fused output, read;
  //  - beta (the forward's, with relu_output undefined): recomputed from the input. The training forward
  //    computes each value from save_mean, save_invstd, gamma and beta alone, and the backward repeats that
  //    arithmetic and the rounding to the dtype, so the mask is the relu output's bit for bit without the
  //    relu output kept or read.
  // masked_grad: undefined, or (with relu_output) a dense tensor of grad_out's shape and dtype that
  // receives the masked gradient, relu's backward, bit for bit (batch_norm_add_relu's residual gradient):
  // the pass that reads the mask stores it, so no separate relu-backward pass reads grad_out and
  // relu_output again. With accumulate_parameter_grads the defined ones of grad_gamma / grad_beta are
  // added into (the parameters' gradients, in place) instead of written.
  virtual void batch_norm_backward(const Tensor& grad_out, const Tensor& relu_output, const Tensor& input,
                                   const Tensor& gamma, const Tensor& beta, const Tensor& save_mean,
                                   const Tensor& save_invstd, Tensor& grad_input, Tensor& grad_gamma, Tensor& grad_beta,
                                   Tensor& masked_grad, bool accumulate_parameter_grads) = 0;

  // ---- pooling (NCHW) ----
  // indices (i32, out's shape) hold the flat h*W+w position of each window's maximum (first on ties);
  // the backward takes the forward's geometry (a device may gather over the windows covering a cell).
  virtual void max_pool2d_forward(const Tensor& input, Tensor& out, Tensor& indices,
                                  const Pool2dGeometry& geometry) = 0;
  virtual void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_input,
                                   const Pool2dGeometry& geometry) = 0;
  virtual void avg_pool2d_forward(const Tensor& input, Tensor& out, const Pool2dGeometry& geometry) = 0;
  virtual void avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_input, const Pool2dGeometry& geometry) = 0;

  // ---- training batch_norm_relu followed by max pooling, fused (a ResNet stem's tail) ----
  // Whether this backend runs a training batch_norm_relu of an [N, C, H, W] input like this one (the calls
  // take it contiguous) followed by max pooling of `geometry` in the two calls below;
  // ops::batch_norm_relu_max_pool2d composes the unfused ops where not (the base class fuses nothing). The
  // forward updates the running stats and writes the saved statistics as batch_norm_forward_train does,
  // and out as max_pool2d_forward of batch_norm_relu's output does, bit for bit; offsets (u8, out's shape)
  // receives each window's choice as dh * kernel_w + dw within the window. The backward takes the pooled
  // output's gradient and writes batch norm's input gradient; grad_gamma / grad_beta as
  // batch_norm_backward's (with accumulate_parameter_grads added into). Neither keeps a relu output or its
  // gradient of the input's size.
  virtual bool fuses_batch_norm_relu_max_pool2d(const Tensor& input, const Pool2dGeometry& geometry) const;
  virtual void batch_norm_relu_max_pool2d_forward_train(const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                                        Tensor& running_mean, Tensor& running_var, double momentum,
                                                        double eps, const Pool2dGeometry& geometry, Tensor& out,
                                                        Tensor& offsets, Tensor& save_mean, Tensor& save_invstd);
  virtual void batch_norm_relu_max_pool2d_backward(const Tensor& grad_out, const Tensor& offsets, const Tensor& input,
                                                   const Tensor& gamma, const Tensor& beta, const Tensor& save_mean,
                                                   const Tensor& save_invstd, const Pool2dGeometry& geometry,
                                                   Tensor& grad_input, Tensor& grad_gamma, Tensor& grad_beta,
                                                   bool accumulate_parameter_grads);

  // ---- softmax and loss (logits [N, K]) ----
  virtual void log_softmax_forward(const Tensor& logits, Tensor& out) = 0;
  virtual void log_softmax_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_logits) = 0;
  // Mean over N of the smoothed negative log-likelihood: target i64 [N]; out is a 1-element tensor.
  // loss_i = -(1 - s) * logp[i, t_i] - s / K * sum_k logp[i, k]
  virtual void nll_loss_forward(const Tensor& log_probs, const Tensor& target, double label_smoothing, Tensor& out) = 0;
  // grad_output: the loss's gradient, a 1-element tensor on this device (read there, not by the host); the
  // targets are the forward's, already checked (an index outside [0, K) gives a NaN row on the GPU).
  virtual void nll_loss_backward(const Tensor& grad_output, const Tensor& target, double label_smoothing,
                                 Tensor& grad_log_probs) = 0;

  // ---- embedding ----
  // out[i, :] = weight[indices[i], :]; indices i64, any count; out [n, D].
  virtual void embedding_forward(const Tensor& weight, const Tensor& indices, Tensor& out) = 0;
  // grad_weight[indices[i], :] += grad_out[i, :] (duplicates accumulate; deterministic on the CPU).
  virtual void embedding_backward_dense(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight) = 0;

  // ---- feature interaction (DLRM's dot interaction) ----
  // x [B, F, D] -> out [B, F(F-1)/2]: out[b, p] = <x[b, i, :], x[b, j, :]> for the pairs j < i taken
  // row by row (p = i(i-1)/2 + j), the strictly lower triangle of x[b] x[b]^T. Products summed in
  // double over d in order, rounded once.
  virtual void dot_interaction_forward(const Tensor& x, Tensor& out) = 0;
  // grad_x[b, i, :] = sum over j != i, in increasing j, of grad_out[b, pair(i, j)] * x[b, j, :] (double
  // sums, rounded once); grad_x is overwritten.
  virtual void dot_interaction_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_x) = 0;
};

// How f32 matrix products and convolutions may compute. strict: full f32 products (FMA math), so CUDA
// results match the CPU to rounding. tf32: the CUDA backend may use TF32 tensor cores (inputs rounded
// to a 10-bit mantissa, f32 accumulation), like PyTorch's allow_tf32. Process-wide; the CPU ignores it;
// f16/bf16 operands always use tensor cores with f32 accumulation.
enum class Fp32Math : uint8_t { strict, tf32 };
void set_fp32_math(Fp32Math math);
Fp32Math fp32_math();

// Deterministic convolutions (default true): the CUDA backend picks cuDNN algorithms only among those
// cuDNN marks deterministic (no atomic accumulation), so a convolution repeats bit for bit with the same
// choice (the choices are timed: a whole run repeats with save/load_conv_algorithms below; where cuDNN
// has no deterministic algorithm for a shape it falls back, see src/ops/cuda/conv_algorithms.h). false lets the fastest
// win, like PyTorch's cudnn.benchmark without use_deterministic_algorithms. Process-wide; the CPU is always
// deterministic. train.deterministic sets it for a run.
void set_conv_deterministic(bool deterministic);
bool conv_deterministic();

// The GPU convolution choices. Each shape and direction is decided by timing at its first use (cuDNN's
// algorithms, opsnn's lowerings), and timings vary: two processes may choose differently, and each
// deterministic choice rounds its own way. save_conv_algorithms() gives this process's choices as JSON
// text (format "opsnn-conv-algorithms"; no entries without a GPU); load_conv_algorithms() makes this
// process use the given ones instead of timing those shapes, so a run repeats another's bits. Entries
// recorded on another GPU model or cuDNN version are skipped (counted), and choices already made here
// are kept. Malformed text is a DataError naming `origin` and the field. train.conv_algorithms drives
// both for opsnn-train.
struct ConvAlgorithmLoad {
  size_t applied = 0;  // entries this process will use
  size_t skipped = 0;  // entries for another GPU model / cuDNN version, or a shape already decided here
};
std::string save_conv_algorithms();
ConvAlgorithmLoad load_conv_algorithms(std::string_view json, const std::string& origin);

void register_backend(DeviceType type, std::unique_ptr<Backend> backend);
// The backend for the tensor's device; throws DeviceError listing what is compiled in.
Backend& backend_for(Device device);

// What the batch-norm forwards require of a defined residual (`what` names the caller): relu set, and the
// input's shape, dtype and device, contiguous; of a defined residual_norm: a residual, and four tensors of
// one value per channel on the input's device; of an undefined out: no relu, no residual.
void check_batch_norm_residual(const Tensor& input, bool relu, const Tensor& residual, const char* what,
                               const ResidualNormalization& residual_norm = {}, bool has_out = true);
// What batch_norm_backward requires of its relu mask: relu_output and beta not both defined; a defined
// relu_output of grad_out's shape and dtype; a defined masked_grad only with relu_output, of grad_out's
// shape, dtype and device, contiguous.
void check_relu_mask(const Tensor& grad_out, const Tensor& relu_output, const Tensor& beta, const Tensor& masked_grad,
                     const char* what);

}  // namespace opsnn::ops
