// Differentiable matrix product and fully connected layer (x W^T + b) on the backend's gemm, with their
// backward passes. A transposed view is handed to gemm as a transpose flag rather than copied.
#include <memory>
#include <string>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {
namespace {

// A 2-D operand as gemm wants it: a contiguous matrix and whether the logical operand is its transpose.
struct GemmOperand {
  Tensor matrix;
  bool transposed = false;
};

GemmOperand as_gemm_operand(const Tensor& t) {
  if (t.is_contiguous()) return {t, false};
  // The transpose of a contiguous matrix (what x.transpose(0, 1) gives) needs no copy.
  if (t.strides()[0] == 1 && t.strides()[1] == t.size(0)) return {t.transpose(0, 1), true};
  return {t.contiguous(), false};
}

// out = A B (or A B + out when accumulating), where A is a, transposed when flip_a, and B likewise.
void gemm_into(const GemmOperand& a, bool flip_a, const GemmOperand& b, bool flip_b, Tensor& out, bool accumulate) {
  backend_for(out.device())
      .gemm(a.matrix, a.transposed != flip_a, b.matrix, b.transposed != flip_b, out, 1.0, accumulate ? 1.0 : 0.0);
}

Tensor new_matrix(int64_t rows, int64_t cols, const Tensor& like) {
  return Tensor::empty({rows, cols}, like.dtype(), like.device());
}

class MatmulNode final : public autograd::Node {
 public:
  MatmulNode(GemmOperand a, GemmOperand b, Shape a_shape, Shape b_shape)
      : a_(std::move(a)), b_(std::move(b)), a_shape_(std::move(a_shape)), b_shape_(std::move(b_shape)) {}
  std::string name() const override { return "MatmulBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    GemmOperand grad{internal::contiguous_grad(grad_output, a_.matrix.dtype()), false};
    Tensor grad_a, grad_b;
    if (needs_grad(0)) {  // dL/dA = G B^T
      grad_a = new_matrix(a_shape_[0], a_shape_[1], grad.matrix);
      gemm_into(grad, false, b_, true, grad_a, false);
    }
    if (needs_grad(1)) {  // dL/dB = A^T G
      grad_b = new_matrix(b_shape_[0], b_shape_[1], grad.matrix);
      gemm_into(a_, true, grad, false, grad_b, false);
    }
    return {grad_a, grad_b};
  }
  void release() override { a_ = b_ = GemmOperand(); }

 private:
  GemmOperand a_, b_;
  Shape a_shape_, b_shape_;
};

class LinearNode final : public autograd::Node {
 public:
  LinearNode(GemmOperand input, GemmOperand weight, Shape input_shape, bool has_bias)
      : input_(std::move(input)),
        weight_(std::move(weight)),
        input_shape_(std::move(input_shape)),
        has_bias_(has_bias) {}
  std::string name() const override { return "LinearBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const int64_t rows = input_.transposed ? input_.matrix.size(1) : input_.matrix.size(0);
    const int64_t in_features = input_shape_.back();
    const int64_t out_features = weight_.transposed ? weight_.matrix.size(1) : weight_.matrix.size(0);
    GemmOperand grad{internal::contiguous_grad(grad_output, weight_.matrix.dtype()).view({rows, out_features}), false};
    Tensor grad_input, grad_weight, grad_bias;
    if (needs_grad(0)) {  // dL/dX = G W
      grad_input = new_matrix(rows, in_features, grad.matrix);
      gemm_into(grad, false, weight_, false, grad_input, false);
      grad_input = grad_input.view(input_shape_);
    }
    if (needs_grad(1)) {  // dL/dW = G^T X
      grad_weight = new_matrix(out_features, in_features, grad.matrix);
      gemm_into(grad, true, input_, false, grad_weight, false);
    }
    if (has_bias_ && needs_grad(2)) grad_bias = internal::sum_to_shape(grad.matrix, {out_features});
    if (has_bias_) return {grad_input, grad_weight, grad_bias};
    return {grad_input, grad_weight};
  }
  void release() override { input_ = weight_ = GemmOperand(); }

 private:
  GemmOperand input_, weight_;
  Shape input_shape_;
  bool has_bias_;
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  internal::check_same_dtype_and_device(a, b, "matmul");
  OPSNN_CHECK_AS(ShapeError, a.dim() == 2 && b.dim() == 2, "matmul: expects 2-D operands [M, K] x [K, N], got ",
                 shape_str(a.shape()), " x ", shape_str(b.shape()));
  OPSNN_CHECK_AS(ShapeError, a.size(1) == b.size(0), "matmul: inner dimensions differ, ", shape_str(a.shape()), " x ",
                 shape_str(b.shape()), " (", a.size(1), " vs ", b.size(0), ")");
  GemmOperand a_operand = as_gemm_operand(a), b_operand = as_gemm_operand(b);
  Tensor out = new_matrix(a.size(0), b.size(1), a);
  gemm_into(a_operand, false, b_operand, false, out, false);
  if (!autograd::any_requires_grad({a, b})) return out;
  auto node =
      std::make_shared<MatmulNode>(GemmOperand{a_operand.matrix.detach(), a_operand.transposed},
                                   GemmOperand{b_operand.matrix.detach(), b_operand.transposed}, a.shape(), b.shape());
  return autograd::record(out, std::move(node), {a, b});
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  internal::check_same_dtype_and_device(input, weight, "linear");
  OPSNN_CHECK_AS(ShapeError, weight.dim() == 2, "linear: weight must be [out_features, in_features], got ",
                 shape_str(weight.shape()));
  OPSNN_CHECK_AS(ShapeError, input.dim() >= 1 && input.size(-1) == weight.size(1), "linear: input ",
                 shape_str(input.shape()), " does not match weight ", shape_str(weight.shape()),
                 " (the input's last dimension must be in_features = ", weight.size(1), ")");
  const int64_t out_features = weight.size(0);
  if (bias.defined()) {
    internal::check_same_dtype_and_device(bias, weight, "linear (bias vs weight)");
    OPSNN_CHECK_AS(ShapeError, bias.dim() == 1 && bias.size(0) == out_features, "linear: bias ",
                   shape_str(bias.shape()), " does not match weight ", shape_str(weight.shape()), " (expected [",
                   out_features, "])");
  }
  // Leading dimensions of the input fold into the rows of one matrix product.
  const int64_t in_features = weight.size(1);
  const int64_t rows = shape_numel(Shape(input.shape().begin(), input.shape().end() - 1));
  GemmOperand input_operand =
      input.dim() == 2 ? as_gemm_operand(input) : GemmOperand{input.contiguous().view({rows, in_features}), false};
  GemmOperand weight_operand = as_gemm_operand(weight);
  Tensor out;
  if (bias.defined()) {  // start from the bias in every row and let gemm accumulate onto it
    out = internal::expand_view(bias, {rows, out_features}).clone();
    gemm_into(input_operand, false, weight_operand, true, out, true);
  } else {
    out = new_matrix(rows, out_features, weight);
    gemm_into(input_operand, false, weight_operand, true, out, false);
  }
  Shape out_shape = input.shape();
  out_shape.back() = out_features;
  out = out.view(out_shape);
  std::vector<Tensor> inputs{input, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::any_requires_grad(inputs)) return out;
  auto node = std::make_shared<LinearNode>(GemmOperand{input_operand.matrix.detach(), input_operand.transposed},
                                           GemmOperand{weight_operand.matrix.detach(), weight_operand.transposed},
                                           input.shape(), bias.defined());
  return autograd::record(out, std::move(node), inputs);
}

}  // namespace opsnn::ops
