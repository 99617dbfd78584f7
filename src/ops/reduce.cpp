// Differentiable sum and mean over all elements or chosen dimensions (optionally keeping them as size
// 1), with their backward passes; also sum_to_shape, which broadcasting ops use to reduce gradients.
#include <memory>
#include <string>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {
namespace {

// x's shape with each reduced dimension set to 1.
Shape keepdim_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape result = shape;
  for (int64_t d : dims) result[static_cast<size_t>(d)] = 1;
  return result;
}

// Sum over `dims` (wrapped, distinct) in keepdim layout; no autograd.
Tensor sum_keepdim(const Tensor& x, const std::vector<int64_t>& dims) {
  Tensor input = x.contiguous();
  Tensor out = Tensor::empty(keepdim_shape(input.shape(), dims), input.dtype(), input.device());
  backend_for(input.device()).sum(input, dims, out);
  return out;
}

// Wraps negative dimensions and rejects repeats; an empty list means every dimension, as in PyTorch.
std::vector<int64_t> resolve_dims(const Shape& shape, const std::vector<int64_t>& dims, const char* op) {
  std::vector<int64_t> resolved;
  if (dims.empty()) {
    for (size_t d = 0; d < shape.size(); ++d) resolved.push_back(static_cast<int64_t>(d));
    return resolved;
  }
  std::vector<bool> seen(shape.size(), false);
  for (int64_t d : dims) {
    int64_t index = internal::wrap_dim(d, shape, op);
    OPSNN_CHECK_AS(ShapeError, !seen[static_cast<size_t>(index)], op, ": dimension ", d, " appears twice in the ",
                   "reduction over ", shape_str(shape));
    seen[static_cast<size_t>(index)] = true;
    resolved.push_back(index);
  }
  return resolved;
}

class SumNode final : public autograd::Node {
 public:
  SumNode(Shape input_shape, Shape keepdim_shape, DType dtype)
      : input_shape_(std::move(input_shape)), keepdim_shape_(std::move(keepdim_shape)), dtype_(dtype) {}
  std::string name() const override { return "SumBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    // Every input element contributed once to its output: the gradient is broadcast back.
    Tensor grad = internal::contiguous_grad(grad_output, dtype_).view(keepdim_shape_);
    return {internal::expand_view(grad, input_shape_).contiguous()};
  }

 private:
  Shape input_shape_, keepdim_shape_;
  DType dtype_;
};

Tensor sum_over(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor out = sum_keepdim(x, dims);
  if (!keepdim) {
    Shape reduced_shape;
    std::vector<bool> reduced(x.shape().size(), false);
    for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
    for (size_t d = 0; d < x.shape().size(); ++d)
      if (!reduced[d]) reduced_shape.push_back(x.shape()[d]);
    out = out.view(reduced_shape);
  }
  if (!autograd::any_requires_grad({x})) return out;
  return autograd::record(out, std::make_shared<SumNode>(x.shape(), keepdim_shape(x.shape(), dims), x.dtype()), {x});
}

int64_t reduced_count(const Shape& shape, const std::vector<int64_t>& dims) {
  int64_t count = 1;
  for (int64_t d : dims) count *= shape[static_cast<size_t>(d)];
  return count;
}

}  // namespace

Tensor internal::sum_to_shape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const Shape& full = grad.shape();
  OPSNN_CHECK_AS(ShapeError, shape.size() <= full.size(), "cannot sum ", shape_str(full), " down to ",
                 shape_str(shape));
  const size_t leading = full.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < leading; ++d) dims.push_back(static_cast<int64_t>(d));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == full[leading + d]) continue;
    OPSNN_CHECK_AS(ShapeError, shape[d] == 1, "cannot sum ", shape_str(full), " down to ", shape_str(shape));
    dims.push_back(static_cast<int64_t>(leading + d));
  }
  return sum_keepdim(grad, dims).view(shape);
}

Tensor sum(const Tensor& x) { return sum_over(x, resolve_dims(x.shape(), {}, "sum"), false); }

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_over(x, resolve_dims(x.shape(), dims, "sum"), keepdim);
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<int64_t> resolved = resolve_dims(x.shape(), dims, "mean");
  // An empty reduction divides 0 by 0 and gives NaN, as in PyTorch.
  return scale(sum_over(x, resolved, keepdim), 1.0 / static_cast<double>(reduced_count(x.shape(), resolved)));
}

}  // namespace opsnn::ops
