// Differentiable elementwise ops with NumPy broadcasting (add, sub, mul, div), scale, relu and the fused
// add_relu, with their backward passes; also the broadcasting helpers of op_support.h.
#include <algorithm>
#include <memory>
#include <string>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {

namespace internal {

Tensor expand_view(const Tensor& tensor, const Shape& target) {
  const Shape& shape = tensor.shape();
  OPSNN_CHECK_AS(ShapeError, shape.size() <= target.size(), "cannot broadcast ", shape_str(shape), " to ",
                 shape_str(target));
  const size_t leading = target.size() - shape.size();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = tensor.storage();
  impl->shape = target;
  impl->strides.assign(target.size(), 0);
  impl->offset = tensor.offset();
  impl->dtype = tensor.dtype();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == target[leading + i]) {
      impl->strides[leading + i] = tensor.strides()[i];
    } else {
      OPSNN_CHECK_AS(ShapeError, shape[i] == 1, "cannot broadcast ", shape_str(shape), " to ", shape_str(target));
    }
  }
  return Tensor(std::move(impl));
}

int64_t wrap_dim(int64_t d, const Shape& shape, const char* op) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  // "(valid: 0 to -1)" would be nonsense for a 0-d tensor: say it has no dimension to name instead.
  OPSNN_CHECK_AS(ShapeError, d >= -rank && d < rank, op, ": dimension ", d, " is out of range for shape ",
                 shape_str(shape),
                 rank == 0 ? std::string(" (a 0-d tensor has no dimensions)")
                           : detail::concat(" (valid: ", -rank, " to ", rank - 1, ")"));
  return d < 0 ? d + rank : d;
}

Tensor contiguous_grad(const Tensor& grad_output, DType dtype) { return grad_output.to(dtype).contiguous(); }

bool usable_accumulator(const std::vector<Tensor>& accumulators, size_t i, const Tensor& like) {
  if (accumulators.size() <= i || !accumulators[i].defined()) return false;
  const Tensor& into = accumulators[i];
  return into.dtype() == like.dtype() && into.shape() == like.shape() && into.device() == like.device() &&
         into.is_contiguous();
}

void check_same_dtype_and_device(const Tensor& a, const Tensor& b, const char* op) {
  OPSNN_CHECK_AS(TypeError, a.dtype() == b.dtype(), op, ": dtype mismatch, ", a.str(), " vs ", b.str());
  OPSNN_CHECK_AS(DeviceError, a.device() == b.device(), op, ": device mismatch, ", a.str(), " vs ", b.str());
}

}  // namespace internal

namespace {

using internal::contiguous_grad;
using internal::expand_view;
using internal::sum_to_shape;

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
  }
  return "binary";
}

// a (op) b broadcast, into a new contiguous tensor; no autograd.
Tensor broadcast_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  backend_for(a.device()).binary(op, expand_view(a, shape), expand_view(b, shape), out);
  return out;
}

Tensor scaled(const Tensor& x, double factor) {
  Tensor source = x.contiguous();
  Tensor out = Tensor::empty(source.shape(), source.dtype(), source.device());
  backend_for(source.device()).affine(source, factor, 0.0, out);
  return out;
}

class BinaryNode final : public autograd::Node {
 public:
  // Saves only what the op's backward reads: mul needs both inputs, div the divisor and the quotient.
  BinaryNode(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out)
      : op_(op), a_shape_(a.shape()), b_shape_(b.shape()), dtype_(out.dtype()) {
    if (op == BinaryOp::mul) {
      a_ = a.detach();
      b_ = b.detach();
    } else if (op == BinaryOp::div) {
      b_ = b.detach();
      out_ = out.detach();
    }
  }
  std::string name() const override { return std::string(binary_op_name(op_)) + "Backward"; }

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    Tensor grad = contiguous_grad(grad_output, dtype_);
    Tensor grad_a, grad_b;
    switch (op_) {
      case BinaryOp::add:
        if (needs_grad(0)) grad_a = sum_to_shape(grad, a_shape_);
        if (needs_grad(1)) grad_b = sum_to_shape(grad, b_shape_);
        break;
      case BinaryOp::sub:
        if (needs_grad(0)) grad_a = sum_to_shape(grad, a_shape_);
        if (needs_grad(1)) grad_b = scaled(sum_to_shape(grad, b_shape_), -1.0);
        break;
      case BinaryOp::mul:
        if (needs_grad(0)) grad_a = sum_to_shape(broadcast_binary(BinaryOp::mul, grad, b_), a_shape_);
        if (needs_grad(1)) grad_b = sum_to_shape(broadcast_binary(BinaryOp::mul, grad, a_), b_shape_);
        break;
      case BinaryOp::div: {
        // d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -(1/b) * (a/b), reusing g/b and the saved quotient.
        Tensor grad_over_b = broadcast_binary(BinaryOp::div, grad, b_);
        if (needs_grad(0)) grad_a = sum_to_shape(grad_over_b, a_shape_);
        if (needs_grad(1))
          grad_b = scaled(sum_to_shape(broadcast_binary(BinaryOp::mul, grad_over_b, out_), b_shape_), -1.0);
        break;
      }
    }
    return {grad_a, grad_b};
  }
  void release() override { a_ = b_ = out_ = Tensor(); }

 private:
  BinaryOp op_;
  Shape a_shape_, b_shape_;
  DType dtype_;
  Tensor a_, b_, out_;
};

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  internal::check_same_dtype_and_device(a, b, name);
  Shape shape;
  try {
    shape = broadcast_shapes(a.shape(), b.shape());
  } catch (const ShapeError& error) {
    throw ShapeError(detail::concat(name, ": ", error.what()));
  }
  Tensor out = broadcast_binary(op, a, b);
  if (!autograd::any_requires_grad({a, b})) return out;
  return autograd::record(out, std::make_shared<BinaryNode>(op, a, b, out), {a, b});
}

class ScaleNode final : public autograd::Node {
 public:
  ScaleNode(double factor, DType dtype) : factor_(factor), dtype_(dtype) {}
  std::string name() const override { return "ScaleBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {scaled(contiguous_grad(grad_output, dtype_), factor_)};
  }

 private:
  double factor_;
  DType dtype_;
};

// Keeps the output, not the input: relu(x) > 0 exactly where x > 0 (NaN and -0 included), so the
// backward's mask is the same, and the input - typically a batch-norm output nothing else keeps - is freed
// after the forward (the output is kept anyway by whatever consumes it next).
class ReluNode final : public autograd::Node {
 public:
  explicit ReluNode(const Tensor& output) : output_(output.detach()) {}
  std::string name() const override { return "ReluBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    Tensor grad = contiguous_grad(grad_output, output_.dtype());
    Tensor grad_input = Tensor::empty(output_.shape(), output_.dtype(), output_.device());
    backend_for(output_.device()).relu_backward(grad, output_, grad_input);
    return {grad_input};
  }
  void release() override { output_ = Tensor(); }

 private:
  Tensor output_;  // contiguous
};

// relu(a + b): the relu backward on the kept output, and that one gradient goes to both inputs as add's
// backward sends its gradient (the engine copies a gradient before summing into it when another handle
// shares it, so one tensor in two slots is safe).
class AddReluNode final : public autograd::Node {
 public:
  explicit AddReluNode(const Tensor& output) : output_(output.detach()) {}
  std::string name() const override { return "AddReluBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    Tensor grad = contiguous_grad(grad_output, output_.dtype());
    Tensor grad_sum = Tensor::empty(output_.shape(), output_.dtype(), output_.device());
    backend_for(output_.device()).relu_backward(grad, output_, grad_sum);
    return {needs_grad(0) ? grad_sum : Tensor(), needs_grad(1) ? grad_sum : Tensor()};
  }
  void release() override { output_ = Tensor(); }

 private:
  Tensor output_;  // contiguous
};

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape result(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align at the right: position i of the result is position i - (rank - size) of each operand.
    const int64_t from_a = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t from_b = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    OPSNN_CHECK_AS(ShapeError, from_a == from_b || from_a == 1 || from_b == 1, "shapes ", shape_str(a), " and ",
                   shape_str(b), " cannot be broadcast together (", from_a, " vs ", from_b, " at dimension ", i,
                   " of the result)");
    result[i] = from_a == 1 ? from_b : from_a;
  }
  return result;
}

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::div, a, b); }

Tensor scale(const Tensor& x, double factor) {
  Tensor out = scaled(x, factor);
  if (!autograd::any_requires_grad({x})) return out;
  return autograd::record(out, std::make_shared<ScaleNode>(factor, x.dtype()), {x});
}

Tensor relu(const Tensor& x) {
  Tensor input = x.contiguous();
  Tensor out = Tensor::empty(input.shape(), input.dtype(), input.device());
  backend_for(input.device()).relu(input, out);
  if (!autograd::any_requires_grad({x})) return out;
  return autograd::record(out, std::make_shared<ReluNode>(out), {x});
}

Tensor add_relu(const Tensor& a, const Tensor& b) {
  const bool fusable = a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device() &&
                       a.is_contiguous() && b.is_contiguous();
  if (!fusable) return relu(add(a, b));
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  backend_for(a.device()).add_relu(a, b, out);
  if (!autograd::any_requires_grad({a, b})) return out;
  return autograd::record(out, std::make_shared<AddReluNode>(out), {a, b});
}

}  // namespace opsnn::ops
