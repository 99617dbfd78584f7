// batch_norm and batch_norm_relu of the functional API: validation, training (batch statistics, running-stat
// update) and eval (running statistics) forward on the device's kernels, and both backwards for autograd.
// batch_norm_relu is relu(batch_norm) with the relu fused into the kernels: the forward writes only the
// relu output, and the training backward recomputes its mask from the input (the backends repeat the
// forward's arithmetic from the saved statistics, gamma and beta), so it keeps no relu output.
// batch_norm_relu_max_pool2d goes further on a backend that fuses it (a ResNet stem): the forward writes only
// the pooled output, and the backward reads the pooled gradient, so neither the relu output nor its
// gradient exists at full size.
// batch_norm_add_relu is relu(batch_norm + residual) the same way: one pass writes it, and the backward
// masks the upstream gradient once (by the kept output), into the tensor that is the residual's gradient
// and batch norm's input.
// Channels-last inputs [N, ..., C] are batch norm of the [rows, C] matrix they are, which the backends take
// as an [N, C] input (the CUDA backend runs kernels for channel-innermost data there). batch_norm_invstd,
// 1 / sqrt(var + eps) on the eval kernel, serves batch norms composed from ops (nn::sync_batch_norm).
#include <memory>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {
namespace {

bool is_low_precision(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

// The dtype of the per-channel tensors (gamma, beta, statistics): f32 for a low-precision input (mixed
// precision keeps them in f32), else the input's.
DType channel_dtype(const Tensor& input) { return is_low_precision(input.dtype()) ? DType::f32 : input.dtype(); }

// Checks a per-channel tensor (gamma, beta, running stats) against the input; undefined passes.
void check_channel_tensor(const Tensor& input, const Tensor& tensor, const char* what) {
  if (!tensor.defined()) return;
  const int64_t channels = input.size(1);
  OPSNN_CHECK_AS(ShapeError, tensor.dim() == 1 && tensor.size(0) == channels, "batch_norm: ", what, " ",
                 shape_str(tensor.shape()), " does not match input ", shape_str(input.shape()), " (expected [",
                 channels, "])");
  OPSNN_CHECK_AS(TypeError, tensor.dtype() == channel_dtype(input), "batch_norm: ", what, " ", tensor.str(),
                 " must be ", dtype_name(channel_dtype(input)), " for input ", input.str(),
                 is_low_precision(input.dtype()) ? " (f16/bf16 inputs keep per-channel tensors in f32)" : "");
  check_same_device(input, tensor, (std::string("batch_norm input vs ") + what).c_str());
}

void check_running_stat(const Tensor& input, const Tensor& stat, const char* what, bool training) {
  OPSNN_CHECK(stat.defined() || training, "batch_norm: eval mode needs ", what, " (got an undefined tensor)");
  check_channel_tensor(input, stat, what);
  OPSNN_CHECK(!stat.defined() || stat.is_contiguous(), "batch_norm: ", what,
              " must be contiguous: it is updated in place");
}

Tensor defined_or(const Tensor& tensor, double fill, const Tensor& input) {
  if (tensor.defined()) return tensor.contiguous().detach();
  return Tensor::full({input.size(1)}, fill, channel_dtype(input), input.device());
}

// What one training batch norm's backward saves: its input, gamma and saved statistics.
struct SavedBatchNorm {
  Tensor input, gamma, save_mean, save_invstd;
};

// One training batch norm's backward for `node`, whose inputs first, first + 1 and first + 2 are the batch
// norm's input, gamma and beta: their gradients into grads at those places. gamma's and beta's are added
// into the parameters' own gradients in place where the engine offers both accumulators (one kernel flag:
// both or neither), else written to temporaries the engine then adds. relu_output, beta and masked as
// Backend::batch_norm_backward takes them.
// Sets grads[first + 1] and grads[first + 2] (gamma's and beta's, where needed) to the engine's
// accumulators when both needed ones can take the sums in place (returns true), else to temporaries.
bool parameter_grads(const autograd::Node& node, const Tensor& gamma, size_t first,
                     const std::vector<Tensor>& accumulators, std::vector<Tensor>& grads) {
  const size_t g = first + 1, b = first + 2;
  const auto usable = [&](size_t i) { return internal::usable_accumulator(accumulators, i, gamma); };
  const bool in_place = (node.needs_grad(g) || node.needs_grad(b)) && (!node.needs_grad(g) || usable(g)) &&
                        (!node.needs_grad(b) || usable(b));
  for (size_t i : {g, b})
    if (node.needs_grad(i))
      grads[i] = in_place ? accumulators[i] : Tensor::empty(gamma.shape(), gamma.dtype(), gamma.device());
  return in_place;
}

void batch_norm_backward_into(const autograd::Node& node, const Tensor& grad_out, const Tensor& relu_output,
                              const Tensor& beta, const SavedBatchNorm& saved, size_t first,
                              const std::vector<Tensor>& accumulators, Tensor& masked, std::vector<Tensor>& grads) {
  const size_t g = first + 1, b = first + 2;
  const bool in_place = parameter_grads(node, saved.gamma, first, accumulators, grads);
  // The kernels always write the input gradient; the per-channel sums are cheap next to it.
  Tensor grad_input = Tensor::empty(saved.input.shape(), saved.input.dtype(), saved.input.device());
  backend_for(grad_out.device())
      .batch_norm_backward(grad_out, relu_output, saved.input, saved.gamma, beta, saved.save_mean, saved.save_invstd,
                           grad_input, grads[g], grads[b], masked, in_place);
  if (node.needs_grad(first)) grads[first] = grad_input;
}

// Training mode: gradients through the batch statistics. The relu mask: for batch_norm_relu, `beta` is
// defined and the kernels recompute the mask from the input; for batch_norm_add_relu (`residual`),
// relu_output is its output, and the masked gradient is also the residual's gradient (input 3): the sums
// pass, which reads the mask anyway, stores it, and the input-gradient pass reads it unmasked. Both are
// undefined for batch_norm.
class BatchNormBackward final : public autograd::Node {
 public:
  BatchNormBackward(SavedBatchNorm saved, Tensor beta, Tensor relu_output, bool residual)
      : saved_(std::move(saved)), beta_(std::move(beta)), relu_output_(std::move(relu_output)), residual_(residual) {}
  std::string name() const override {
    if (residual_) return "BatchNormAddReluBackward";
    return beta_.defined() ? "BatchNormReluBackward" : "BatchNormBackward";
  }

  std::vector<Tensor> backward(const Tensor& grad_output) override { return backward_into(grad_output, {}); }

  // gamma's and beta's gradients may be added into the parameters' own gradients in place (both or
  // neither: one kernel flag), instead of written to temporaries the engine then adds.
  bool accepts_accumulator(size_t input) const override { return input == 1 || input == 2; }

  std::vector<Tensor> backward_into(const Tensor& grad_output, const std::vector<Tensor>& accumulators) override {
    const Tensor grad_out = internal::contiguous_grad(grad_output, saved_.input.dtype());
    std::vector<Tensor> grads(residual_ ? 4 : 3);
    Tensor masked;
    if (residual_) masked = Tensor::empty(grad_out.shape(), grad_out.dtype(), grad_out.device());
    batch_norm_backward_into(*this, grad_out, relu_output_, beta_, saved_, 0, accumulators, masked, grads);
    if (residual_ && needs_grad(3)) grads[3] = masked;
    return grads;
  }
  void release() override {
    saved_ = SavedBatchNorm{};
    beta_ = relu_output_ = Tensor();
  }

 private:
  SavedBatchNorm saved_;
  Tensor beta_, relu_output_;
  bool residual_;
};

// dual_batch_norm_add_relu in training: relu(bn(input) + bn'(shortcut)). Inputs: input, gamma, beta,
// shortcut, shortcut gamma, shortcut beta. The backward is the unfused pair's: batch norm's backward masked
// by the output, whose sums pass stores the masked gradient, and the shortcut's batch-norm backward of
// that masked gradient.
class DualBatchNormAddReluBackward final : public autograd::Node {
 public:
  DualBatchNormAddReluBackward(SavedBatchNorm main, SavedBatchNorm shortcut, Tensor relu_output)
      : main_(std::move(main)), shortcut_(std::move(shortcut)), relu_output_(std::move(relu_output)) {}
  std::string name() const override { return "DualBatchNormAddReluBackward"; }

  std::vector<Tensor> backward(const Tensor& grad_output) override { return backward_into(grad_output, {}); }

  bool accepts_accumulator(size_t input) const override { return input == 1 || input == 2 || input == 4 || input == 5; }

  std::vector<Tensor> backward_into(const Tensor& grad_output, const std::vector<Tensor>& accumulators) override {
    const Tensor grad_out = internal::contiguous_grad(grad_output, main_.input.dtype());
    std::vector<Tensor> grads(6);
    Tensor masked = Tensor::empty(grad_out.shape(), grad_out.dtype(), grad_out.device());
    batch_norm_backward_into(*this, grad_out, relu_output_, Tensor(), main_, 0, accumulators, masked, grads);
    if (needs_grad(3) || needs_grad(4) || needs_grad(5)) {
      Tensor no_masked_grad;
      batch_norm_backward_into(*this, masked, Tensor(), Tensor(), shortcut_, 3, accumulators, no_masked_grad, grads);
    }
    return grads;
  }
  void release() override {
    main_ = shortcut_ = SavedBatchNorm{};
    relu_output_ = Tensor();
  }

 private:
  SavedBatchNorm main_, shortcut_;
  Tensor relu_output_;
};

// batch_norm_relu_max_pool2d in training on a fusing backend. Inputs: input, gamma, beta. Saves the
// input, its statistics and each window's choice (one byte per pooled output), not the relu output.
class BatchNormReluMaxPoolBackward final : public autograd::Node {
 public:
  BatchNormReluMaxPoolBackward(SavedBatchNorm saved, Tensor beta, Tensor offsets, const Pool2dGeometry& pool)
      : saved_(std::move(saved)), beta_(std::move(beta)), offsets_(std::move(offsets)), pool_(pool) {}
  std::string name() const override { return "BatchNormReluMaxPoolBackward"; }

  std::vector<Tensor> backward(const Tensor& grad_output) override { return backward_into(grad_output, {}); }

  bool accepts_accumulator(size_t input) const override { return input == 1 || input == 2; }

  std::vector<Tensor> backward_into(const Tensor& grad_output, const std::vector<Tensor>& accumulators) override {
    const Tensor grad_out = internal::contiguous_grad(grad_output, saved_.input.dtype());
    std::vector<Tensor> grads(3);
    const bool in_place = parameter_grads(*this, saved_.gamma, 0, accumulators, grads);
    Tensor grad_input = Tensor::empty(saved_.input.shape(), saved_.input.dtype(), saved_.input.device());
    backend_for(grad_out.device())
        .batch_norm_relu_max_pool2d_backward(grad_out, offsets_, saved_.input, saved_.gamma, beta_, saved_.save_mean,
                                             saved_.save_invstd, pool_, grad_input, grads[1], grads[2], in_place);
    if (needs_grad(0)) grads[0] = grad_input;
    return grads;
  }
  void release() override {
    saved_ = SavedBatchNorm{};
    beta_ = offsets_ = Tensor();
  }

 private:
  SavedBatchNorm saved_;
  Tensor beta_, offsets_;
  Pool2dGeometry pool_;
};

// Eval mode: out = (x - running_mean) * invstd * gamma + beta with invstd = 1 / sqrt(running_var + eps)
// constant, so grad_x = g * gamma * invstd, grad_gamma = sum g * (x - running_mean) * invstd and
// grad_beta = sum g. These reuse the two batch-norm kernels: the eval forward applied to g with zero
// shift gives grad_x, and the training backward given (running_mean, invstd) as the saved statistics
// gives exactly grad_gamma and grad_beta. After a fused relu (relu_output defined) g is first masked
// into a buffer of its own, as relu's backward would: g feeds both kernels (and with `residual` is the
// residual's gradient), and eval-mode backward is off the training path.
class BatchNormEvalBackward final : public autograd::Node {
 public:
  BatchNormEvalBackward(Tensor input, Tensor gamma, Tensor running_mean, Tensor running_var, double eps,
                        Tensor relu_output, bool residual)
      : input_(std::move(input)),
        gamma_(std::move(gamma)),
        running_mean_(std::move(running_mean)),
        running_var_(std::move(running_var)),
        relu_output_(std::move(relu_output)),
        eps_(eps),
        residual_(residual) {}
  std::string name() const override {
    if (residual_) return "BatchNormAddReluEvalBackward";
    return relu_output_.defined() ? "BatchNormReluEvalBackward" : "BatchNormEvalBackward";
  }

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    Tensor grad_out = internal::contiguous_grad(grad_output, input_.dtype());
    Backend& backend = backend_for(grad_out.device());
    std::vector<Tensor> grads(residual_ ? 4 : 3);
    if (relu_output_.defined()) {
      Tensor masked = Tensor::empty(grad_out.shape(), grad_out.dtype(), grad_out.device());
      backend.relu_backward(grad_out, relu_output_, masked);
      grad_out = masked;
      if (residual_ && needs_grad(3)) grads[3] = masked;
    }
    const Tensor zeros = Tensor::zeros(gamma_.shape(), gamma_.dtype(), gamma_.device());
    Tensor grad_input = Tensor::empty(input_.shape(), input_.dtype(), input_.device());
    if (needs_grad(1) || needs_grad(2)) {
      const Tensor ones = Tensor::ones(gamma_.shape(), gamma_.dtype(), gamma_.device());
      Tensor invstd = Tensor::empty({1, gamma_.size(0)}, gamma_.dtype(), gamma_.device());
      backend.batch_norm_forward_eval(ones.view({1, gamma_.size(0)}), ones, zeros, zeros, running_var_, eps_, false,
                                      Tensor(), invstd);
      if (needs_grad(1)) grads[1] = Tensor::empty(gamma_.shape(), gamma_.dtype(), gamma_.device());
      if (needs_grad(2)) grads[2] = Tensor::empty(gamma_.shape(), gamma_.dtype(), gamma_.device());
      Tensor no_masked_grad;
      backend.batch_norm_backward(grad_out, Tensor(), input_, gamma_, Tensor(), running_mean_,
                                  invstd.view({gamma_.size(0)}), grad_input, grads[1], grads[2], no_masked_grad, false);
    }
    if (needs_grad(0)) {
      backend.batch_norm_forward_eval(grad_out, gamma_, zeros, zeros, running_var_, eps_, false, Tensor(), grad_input);
      grads[0] = grad_input;
    }
    return grads;
  }
  void release() override { input_ = gamma_ = running_mean_ = running_var_ = relu_output_ = Tensor(); }

 private:
  Tensor input_, gamma_, running_mean_, running_var_, relu_output_;
  double eps_;
  bool residual_;
};

// 1 / sqrt(var + eps), per channel: batch norm's eval kernel applied to a row of ones with zero mean,
// unit gamma and zero beta is exactly its invstd.
Tensor invstd_of(const Tensor& var, double eps) {
  const int64_t channels = var.size(0);
  const Tensor ones = Tensor::ones({channels}, var.dtype(), var.device());
  const Tensor zeros = Tensor::zeros({channels}, var.dtype(), var.device());
  Tensor out = Tensor::empty({1, channels}, var.dtype(), var.device());
  backend_for(var.device())
      .batch_norm_forward_eval(ones.view({1, channels}), ones, zeros, zeros, var.contiguous(), eps, false, Tensor(),
                               out);
  return out.view({channels});
}

// d invstd / d var = -0.5 * (var + eps)^(-3/2) = -0.5 * invstd^3.
class BatchNormInvstdBackward final : public autograd::Node {
 public:
  explicit BatchNormInvstdBackward(Tensor invstd) : invstd_(std::move(invstd)) {}
  std::string name() const override { return "BatchNormInvstdBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const Tensor grad = internal::contiguous_grad(grad_output, invstd_.dtype());
    Backend& backend = backend_for(invstd_.device());
    Tensor cube = Tensor::empty(invstd_.shape(), invstd_.dtype(), invstd_.device());
    backend.binary(BinaryOp::mul, invstd_, invstd_, cube);
    backend.binary(BinaryOp::mul, cube, invstd_, cube);
    backend.binary(BinaryOp::mul, cube, grad, cube);
    Tensor grad_var = Tensor::empty(invstd_.shape(), invstd_.dtype(), invstd_.device());
    backend.affine(cube, -0.5, 0.0, grad_var);
    return {grad_var};
  }
  void release() override { invstd_ = Tensor(); }

 private:
  Tensor invstd_;
};

// batch_norm, or batch_norm_relu with `relu`, or batch_norm_add_relu with a defined residual (and relu).
// One batch norm's checked operands as the kernels take them: the contiguous input, gamma and beta (1 and
// 0 where undefined); in training also the buffers its running statistics update (throwaway ones without
// running statistics, track_running_stats off) and those its saved statistics go to.
struct Operands {
  Tensor input, gamma, beta, mean_buffer, var_buffer, save_mean, save_invstd;
};

Operands checked_operands(const Tensor& input, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                          const Tensor& running_var, bool training, double momentum, double eps) {
  OPSNN_CHECK_AS(ShapeError, input.dim() >= 2 && input.numel() > 0,
                 "batch_norm: input must be a non-empty [N, C] or [N, C, ...], got ", input.str());
  check_channel_tensor(input, gamma, "gamma");
  check_channel_tensor(input, beta, "beta");
  check_running_stat(input, running_mean, "running_mean", training);
  check_running_stat(input, running_var, "running_var", training);
  OPSNN_CHECK_AS(ConfigError, eps >= 0.0, "batch_norm: eps must not be negative, got ", eps);
  OPSNN_CHECK_AS(ConfigError, momentum >= 0.0 && momentum <= 1.0, "batch_norm: momentum must lie in [0, 1], got ",
                 momentum);
  Operands operands{
      input.contiguous().detach(), defined_or(gamma, 1.0, input), defined_or(beta, 0.0, input), {}, {}, {}, {}};
  if (!training) return operands;
  const int64_t channels = input.size(1);
  OPSNN_CHECK_AS(ShapeError, input.numel() / channels > 1,
                 "batch_norm: training needs more than one value per channel, input ", shape_str(input.shape()));
  const DType stats_dtype = channel_dtype(input);
  operands.mean_buffer = running_mean.defined() ? running_mean : Tensor::zeros({channels}, stats_dtype, input.device());
  operands.var_buffer = running_var.defined() ? running_var : Tensor::ones({channels}, stats_dtype, input.device());
  operands.save_mean = Tensor::empty({channels}, stats_dtype, input.device());
  operands.save_invstd = Tensor::empty({channels}, stats_dtype, input.device());
  return operands;
}

Tensor batch_norm_maybe_relu(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                             Tensor& running_var, bool training, double momentum, double eps, bool relu,
                             const Tensor& residual) {
  Operands norm = checked_operands(input, gamma, beta, running_mean, running_var, training, momentum, eps);
  const Tensor& input_data = norm.input;
  const Tensor& gamma_data = norm.gamma;
  const Tensor& beta_data = norm.beta;
  const Tensor residual_data = residual.defined() ? residual.contiguous().detach() : Tensor();
  const bool add = residual.defined();
  const std::vector<Tensor> inputs =
      add ? std::vector<Tensor>{input, gamma, beta, residual} : std::vector<Tensor>{input, gamma, beta};
  Backend& backend = backend_for(input.device());
  Tensor out = Tensor::empty(input.shape(), input.dtype(), input.device());

  if (!training) {
    backend.batch_norm_forward_eval(input_data, gamma_data, beta_data, running_mean, running_var, eps, relu,
                                    residual_data, out);
    if (!autograd::any_requires_grad(inputs)) return out;
    // Snapshots: a later training step updates the running statistics in place.
    auto node = std::make_shared<BatchNormEvalBackward>(input_data, gamma_data, running_mean.clone(),
                                                        running_var.clone(), eps, relu ? out.detach() : Tensor(), add);
    return autograd::record(out, std::move(node), inputs);
  }

  backend.batch_norm_forward_train(input_data, gamma_data, beta_data, norm.mean_buffer, norm.var_buffer, momentum, eps,
                                   relu, residual_data, {}, out, norm.save_mean, norm.save_invstd);
  if (!autograd::any_requires_grad(inputs)) return out;
  // batch_norm_relu's backward recomputes the relu mask (beta); batch_norm_add_relu's reads its output.
  auto node =
      std::make_shared<BatchNormBackward>(SavedBatchNorm{input_data, gamma_data, norm.save_mean, norm.save_invstd},
                                          relu && !add ? beta_data : Tensor(), add ? out.detach() : Tensor(), add);
  return autograd::record(out, std::move(node), inputs);
}

// What an op adding `added` (named `what`) to the batch norm of `input` requires of it: the input's shape,
// dtype and device. Checked in the caller's layout: a channels-last tensor of another shape may still view
// as the input's rows.
void check_added(const Tensor& input, const Tensor& added, const char* op, const char* what) {
  OPSNN_CHECK_AS(ShapeError, added.shape() == input.shape(), op, ": ", what, " ", added.str(), " does not match input ",
                 input.str());
  OPSNN_CHECK_AS(TypeError, added.dtype() == input.dtype(), op, ": ", what, " ", added.str(),
                 " must have the input's dtype (", dtype_name(input.dtype()), ")");
  check_same_device(input, added, (std::string(op) + " input vs " + what).c_str());
}

// The channel count of a channels-last input [N, ..., C], which the ops view as [rows, C] (reshape records
// the view for autograd).
int64_t channels_last_channels(const Tensor& input) {
  OPSNN_CHECK_AS(ShapeError, input.dim() >= 2 && input.numel() > 0,
                 "batch_norm: a channels_last input must be a non-empty [N, ..., C], got ", input.str());
  return input.size(-1);
}

// Both layouts of the three ops.
Tensor batch_norm_in_layout(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                            Tensor& running_var, bool training, double momentum, double eps, bool relu,
                            const Tensor& residual, bool channels_last) {
  if (residual.defined()) check_added(input, residual, "batch_norm_add_relu", "residual");
  if (!channels_last)
    return batch_norm_maybe_relu(input, gamma, beta, running_mean, running_var, training, momentum, eps, relu,
                                 residual);
  const int64_t channels = channels_last_channels(input);
  const Tensor residual_rows = residual.defined() ? reshape(residual, {-1, channels}) : Tensor();
  return reshape(batch_norm_maybe_relu(reshape(input, {-1, channels}), gamma, beta, running_mean, running_var, training,
                                       momentum, eps, relu, residual_rows),
                 input.shape());
}

// dual_batch_norm_add_relu's training forward on [N, C, ...] inputs (channels-last ones viewed as rows):
// the shortcut's statistics alone, then one pass that normalizes both and writes the relu of the sum.
Tensor dual_batch_norm_add_relu_training(const Tensor& input, const BatchNormArgs& norm, const Tensor& shortcut,
                                         const BatchNormArgs& shortcut_norm) {
  Operands main = checked_operands(input, norm.gamma, norm.beta, norm.running_mean, norm.running_var, true,
                                   norm.momentum, norm.eps);
  Operands side = checked_operands(shortcut, shortcut_norm.gamma, shortcut_norm.beta, shortcut_norm.running_mean,
                                   shortcut_norm.running_var, true, shortcut_norm.momentum, shortcut_norm.eps);
  Backend& backend = backend_for(input.device());
  Tensor no_out;
  backend.batch_norm_forward_train(side.input, side.gamma, side.beta, side.mean_buffer, side.var_buffer,
                                   shortcut_norm.momentum, shortcut_norm.eps, false, Tensor(), {}, no_out,
                                   side.save_mean, side.save_invstd);
  Tensor out = Tensor::empty(input.shape(), input.dtype(), input.device());
  backend.batch_norm_forward_train(
      main.input, main.gamma, main.beta, main.mean_buffer, main.var_buffer, norm.momentum, norm.eps, true, side.input,
      {side.gamma, side.beta, side.save_mean, side.save_invstd}, out, main.save_mean, main.save_invstd);
  const std::vector<Tensor> inputs{input, norm.gamma, norm.beta, shortcut, shortcut_norm.gamma, shortcut_norm.beta};
  if (!autograd::any_requires_grad(inputs)) return out;
  auto node = std::make_shared<DualBatchNormAddReluBackward>(
      SavedBatchNorm{main.input, main.gamma, main.save_mean, main.save_invstd},
      SavedBatchNorm{side.input, side.gamma, side.save_mean, side.save_invstd}, out.detach());
  return autograd::record(out, std::move(node), inputs);
}

}  // namespace

Tensor dual_batch_norm_add_relu(const Tensor& input, const BatchNormArgs& norm, const Tensor& shortcut,
                                const BatchNormArgs& shortcut_norm, bool training, bool channels_last) {
  OPSNN_CHECK(shortcut.defined(), "dual_batch_norm_add_relu: the shortcut is undefined");
  check_added(input, shortcut, "dual_batch_norm_add_relu", "shortcut");
  if (!training) {  // off the training path: the unfused pair
    Tensor mean = shortcut_norm.running_mean, var = shortcut_norm.running_var;
    const Tensor residual = batch_norm(shortcut, shortcut_norm.gamma, shortcut_norm.beta, mean, var, false,
                                       shortcut_norm.momentum, shortcut_norm.eps, channels_last);
    Tensor main_mean = norm.running_mean, main_var = norm.running_var;
    return batch_norm_add_relu(input, residual, norm.gamma, norm.beta, main_mean, main_var, false, norm.momentum,
                               norm.eps, channels_last);
  }
  if (!channels_last) return dual_batch_norm_add_relu_training(input, norm, shortcut, shortcut_norm);
  const int64_t channels = channels_last_channels(input);
  return reshape(dual_batch_norm_add_relu_training(reshape(input, {-1, channels}), norm,
                                                   reshape(shortcut, {-1, channels}), shortcut_norm),
                 input.shape());
}

Tensor batch_norm(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum, double eps, bool channels_last) {
  return batch_norm_in_layout(input, gamma, beta, running_mean, running_var, training, momentum, eps, false, Tensor(),
                              channels_last);
}

Tensor batch_norm_relu(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                       Tensor& running_var, bool training, double momentum, double eps, bool channels_last) {
  return batch_norm_in_layout(input, gamma, beta, running_mean, running_var, training, momentum, eps, true, Tensor(),
                              channels_last);
}

Tensor batch_norm_add_relu(const Tensor& input, const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                           Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps,
                           bool channels_last) {
  OPSNN_CHECK(residual.defined(), "batch_norm_add_relu: the residual is undefined");
  return batch_norm_in_layout(input, gamma, beta, running_mean, running_var, training, momentum, eps, true, residual,
                              channels_last);
}

Tensor batch_norm_relu_max_pool2d(const Tensor& input, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                  Tensor& running_var, bool training, double momentum, double eps,
                                  const Pool2dGeometry& pool) {
  const Shape out_shape = internal::checked_pool_shape("batch_norm_relu_max_pool2d", input, pool);
  Backend& backend = backend_for(input.device());
  if (!training || !backend.fuses_batch_norm_relu_max_pool2d(input, pool))
    return max_pool2d(batch_norm_relu(input, gamma, beta, running_mean, running_var, training, momentum, eps), pool);
  Operands norm = checked_operands(input, gamma, beta, running_mean, running_var, true, momentum, eps);
  Tensor out = Tensor::empty(out_shape, input.dtype(), input.device());
  Tensor offsets = Tensor::empty(out_shape, DType::u8, input.device());
  backend.batch_norm_relu_max_pool2d_forward_train(norm.input, norm.gamma, norm.beta, norm.mean_buffer, norm.var_buffer,
                                                   momentum, eps, pool, out, offsets, norm.save_mean, norm.save_invstd);
  const std::vector<Tensor> inputs{input, gamma, beta};
  if (!autograd::any_requires_grad(inputs)) return out;
  auto node = std::make_shared<BatchNormReluMaxPoolBackward>(
      SavedBatchNorm{norm.input, norm.gamma, norm.save_mean, norm.save_invstd}, norm.beta, offsets, pool);
  return autograd::record(out, std::move(node), inputs);
}

Tensor batch_norm_invstd(const Tensor& var, double eps) {
  OPSNN_CHECK_AS(ShapeError, var.dim() == 1 && var.numel() > 0,
                 "batch_norm_invstd: var must be a non-empty 1-d tensor of per-channel variances, got ", var.str());
  OPSNN_CHECK_AS(TypeError, var.dtype() == DType::f32 || var.dtype() == DType::f64,
                 "batch_norm_invstd: var must be f32 or f64 (batch norm's per-channel dtypes), got ", var.str());
  OPSNN_CHECK_AS(ConfigError, eps >= 0.0, "batch_norm_invstd: eps must not be negative, got ", eps);
  Tensor out = invstd_of(var, eps);
  if (!autograd::any_requires_grad({var})) return out;
  return autograd::record(out, std::make_shared<BatchNormInvstdBackward>(out.detach()), {var});
}

}  // namespace opsnn::ops
