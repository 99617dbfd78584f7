// The CUDA compute backend: cuBLAS for GEMM, cuDNN for convolution (algorithm searched once per shape
// and cached), own kernels (kernels.h) for everything else. f32 only for now; other dtypes raise a
// TypeError. Its methods are defined in gemm.cpp, conv.cpp and ops.cpp; registration in register.cpp.
#pragma once

#include <memory>

#include "opsnn/core/storage.h"
#include "opsnn/ops/backend.h"

namespace opsnn {
std::unique_ptr<DeviceServices> make_cuda_services();
}

namespace opsnn::ops {

class ConvAlgorithmStore;
// The algorithm cache of conv_search.cpp as ops::save_conv_algorithms / load_conv_algorithms see it
// (conv_algorithm_records.cpp).
std::unique_ptr<ConvAlgorithmStore> make_cuda_conv_algorithm_store();

class CudaBackend final : public Backend {
 public:
  void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& out, double alpha,
            double beta) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void affine(const Tensor& x, double scale, double shift, Tensor& out) override;
  void relu(const Tensor& x, Tensor& out) override;
  void relu_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in) override;
  void add_relu(const Tensor& a, const Tensor& b, Tensor& out) override;
  void sum(const Tensor& x, const std::vector<int64_t>& reduce_dims, Tensor& out) override;
  void conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, Tensor& out,
                      const Conv2dGeometry& geometry) override;
  void conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, Tensor& grad_input,
                             const Conv2dGeometry& geometry, bool accumulate) override;
  void conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, Tensor& grad_weight,
                              const Conv2dGeometry& geometry) override;
  void batch_norm_forward_train(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                Tensor& running_var, double momentum, double eps, bool relu, const Tensor& residual,
                                const ResidualNormalization& residual_norm, Tensor& out, Tensor& save_mean,
                                Tensor& save_invstd) override;
  void batch_norm_forward_eval(const Tensor& input, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, double eps, bool relu, const Tensor& residual,
                               Tensor& out) override;
  void batch_norm_backward(const Tensor& grad_out, const Tensor& relu_output, const Tensor& input, const Tensor& gamma,
                           const Tensor& beta, const Tensor& save_mean, const Tensor& save_invstd, Tensor& grad_input,
                           Tensor& grad_gamma, Tensor& grad_beta, Tensor& masked_grad,
                           bool accumulate_parameter_grads) override;
  void max_pool2d_forward(const Tensor& input, Tensor& out, Tensor& indices, const Pool2dGeometry& geometry) override;
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_input,
                           const Pool2dGeometry& geometry) override;
  void avg_pool2d_forward(const Tensor& input, Tensor& out, const Pool2dGeometry& geometry) override;
  void avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_input, const Pool2dGeometry& geometry) override;
  bool fuses_batch_norm_relu_max_pool2d(const Tensor& input, const Pool2dGeometry& geometry) const override;
  void batch_norm_relu_max_pool2d_forward_train(const Tensor& input, const Tensor& gamma, const Tensor& beta,
                                                Tensor& running_mean, Tensor& running_var, double momentum, double eps,
                                                const Pool2dGeometry& geometry, Tensor& out, Tensor& offsets,
                                                Tensor& save_mean, Tensor& save_invstd) override;
  void batch_norm_relu_max_pool2d_backward(const Tensor& grad_out, const Tensor& offsets, const Tensor& input,
                                           const Tensor& gamma, const Tensor& beta, const Tensor& save_mean,
                                           const Tensor& save_invstd, const Pool2dGeometry& geometry,
                                           Tensor& grad_input, Tensor& grad_gamma, Tensor& grad_beta,
                                           bool accumulate_parameter_grads) override;
  void log_softmax_forward(const Tensor& logits, Tensor& out) override;
  void log_softmax_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_logits) override;
  void nll_loss_forward(const Tensor& log_probs, const Tensor& target, double label_smoothing, Tensor& out) override;
  void nll_loss_backward(const Tensor& grad_output, const Tensor& target, double label_smoothing,
                         Tensor& grad_log_probs) override;
  void embedding_forward(const Tensor& weight, const Tensor& indices, Tensor& out) override;
  void embedding_backward_dense(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight) override;
  void dot_interaction_forward(const Tensor& x, Tensor& out) override;
  void dot_interaction_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_x) override;
};

// Registers the CUDA device services and the CUDA compute backend.
void register_cuda_backend();

}  // namespace opsnn::ops
