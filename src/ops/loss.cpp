// Differentiable log-softmax over the classes of [N, K] logits, negative log-likelihood and
// cross-entropy (both the mean over N, with optional label smoothing as in PyTorch), with backward.
#include <memory>
#include <string>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {
namespace {

class LogSoftmaxNode final : public autograd::Node {
 public:
  explicit LogSoftmaxNode(const Tensor& out) : out_(out.detach()) {}
  std::string name() const override { return "LogSoftmaxBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    Tensor grad = internal::contiguous_grad(grad_output, out_.dtype());
    Tensor grad_logits = Tensor::empty(out_.shape(), out_.dtype(), out_.device());
    backend_for(out_.device()).log_softmax_backward(grad, out_, grad_logits);
    return {grad_logits};
  }
  void release() override { out_ = Tensor(); }

 private:
  Tensor out_;  // the log-probabilities: their exp is the softmax the backward needs
};

class NllLossNode final : public autograd::Node {
 public:
  NllLossNode(Tensor target, double label_smoothing, Shape shape, DType dtype, Device device)
      : target_(std::move(target)),
        label_smoothing_(label_smoothing),
        shape_(std::move(shape)),
        dtype_(dtype),
        device_(device) {}
  std::string name() const override { return "NllLossBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    Tensor grad_log_probs = Tensor::empty(shape_, dtype_, device_);
    backend_for(device_).nll_loss_backward(grad_output, target_, label_smoothing_, grad_log_probs);
    return {grad_log_probs};
  }
  void release() override { target_ = Tensor(); }

 private:
  Tensor target_;  // a private contiguous copy: callers may refill their target buffer before backward
  double label_smoothing_;
  Shape shape_;
  DType dtype_;
  Device device_;
};

void check_class_rows(const Tensor& t, const char* op, const char* what) {
  OPSNN_CHECK_AS(ShapeError, t.dim() == 2 && t.size(0) > 0 && t.size(1) > 0, op, ": ", what,
                 " must be [N, K] with N, K > 0, got ", shape_str(t.shape()));
}

}  // namespace

Tensor log_softmax(const Tensor& logits) {
  check_class_rows(logits, "log_softmax", "logits");
  Tensor input = logits.contiguous();
  Tensor out = Tensor::empty(input.shape(), input.dtype(), input.device());
  backend_for(input.device()).log_softmax_forward(input, out);
  if (!autograd::any_requires_grad({logits})) return out;
  return autograd::record(out, std::make_shared<LogSoftmaxNode>(out), {logits});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, double label_smoothing) {
  check_class_rows(log_probs, "nll_loss", "log_probs");
  OPSNN_CHECK_AS(TypeError, target.dtype() == DType::i64, "nll_loss: targets must be i64 class indices, got ",
                 target.str());
  OPSNN_CHECK_AS(DeviceError, target.device() == log_probs.device(), "nll_loss: device mismatch, log_probs ",
                 log_probs.str(), " vs targets ", target.str());
  OPSNN_CHECK_AS(ShapeError, target.dim() == 1 && target.size(0) == log_probs.size(0), "nll_loss: targets ",
                 shape_str(target.shape()), " do not match log_probs ", shape_str(log_probs.shape()), " (expected [",
                 log_probs.size(0), "])");
  OPSNN_CHECK_AS(ConfigError, label_smoothing >= 0.0 && label_smoothing <= 1.0, "nll_loss: label_smoothing ",
                 label_smoothing, " is outside [0, 1]");
  Tensor input = log_probs.contiguous();
  Tensor labels = target.clone();
  Tensor out = Tensor::empty({}, input.dtype(), input.device());
  backend_for(input.device()).nll_loss_forward(input, labels, label_smoothing, out);
  if (!autograd::any_requires_grad({log_probs})) return out;
  auto node = std::make_shared<NllLossNode>(labels, label_smoothing, input.shape(), input.dtype(), input.device());
  return autograd::record(out, std::move(node), {log_probs});
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing) {
  const bool low_precision = logits.dtype() == DType::f16 || logits.dtype() == DType::bf16;
  return nll_loss(log_softmax(low_precision ? cast(logits, DType::f32) : logits), target, label_smoothing);
}

}  // namespace opsnn::ops
