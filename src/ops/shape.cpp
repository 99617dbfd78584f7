// Differentiable reshape, flatten, permute, slice and concat. reshape and flatten share the input's storage when the
// input is contiguous (a non-contiguous input is copied to a contiguous one first) and reshape back in the backward;
// permute copies to a contiguous tensor and permutes the gradient back; slice copies rows and writes the gradient back
// into zeros; concat joins along a dimension moved to the front (where each piece is one contiguous block of rows,
// copied on any device) and splits the gradient the same way.
#include <memory>
#include <string>
#include <vector>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {
namespace {

class ReshapeNode final : public autograd::Node {
 public:
  ReshapeNode(Shape input_shape, DType dtype) : input_shape_(std::move(input_shape)), dtype_(dtype) {}
  std::string name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {internal::contiguous_grad(grad_output, dtype_).view(input_shape_)};
  }

 private:
  Shape input_shape_;
  DType dtype_;
};

// `shape` with its -1 (at most one) replaced so the element count matches `from`.
Shape resolve_shape(const Shape& from, const Shape& shape) {
  Shape resolved = shape;
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      OPSNN_CHECK_AS(ShapeError, infer_at < 0, "reshape: more than one -1 in ", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      OPSNN_CHECK_AS(ShapeError, resolved[i] >= 0, "reshape: invalid dimension ", resolved[i], " in ",
                     shape_str(shape));
      known *= resolved[i];
    }
  }
  const int64_t total = shape_numel(from);
  if (infer_at >= 0) {
    OPSNN_CHECK_AS(ShapeError, known != 0 && total % known == 0, "reshape: cannot reshape ", shape_str(from), " (",
                   total, " elements) into ", shape_str(shape));
    resolved[static_cast<size_t>(infer_at)] = total / known;
  }
  OPSNN_CHECK_AS(ShapeError, shape_numel(resolved) == total, "reshape: cannot reshape ", shape_str(from), " (", total,
                 " elements) into ", shape_str(shape), " (", shape_numel(resolved), " elements)");
  return resolved;
}

class PermuteNode final : public autograd::Node {
 public:
  PermuteNode(std::vector<int64_t> inverse, DType dtype) : inverse_(std::move(inverse)), dtype_(dtype) {}
  std::string name() const override { return "PermuteBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {internal::contiguous_grad(grad_output, dtype_).permute(inverse_).contiguous()};
  }

 private:
  std::vector<int64_t> inverse_;  // input dimension d is output dimension inverse_[d]
  DType dtype_;
};

// The gradient of a slice: zeros of the input's shape with the incoming gradient in the sliced rows.
class SliceNode final : public autograd::Node {
 public:
  SliceNode(Shape input_shape, DType dtype, int64_t start, int64_t end)
      : input_shape_(std::move(input_shape)), dtype_(dtype), start_(start), end_(end) {}
  std::string name() const override { return "SliceBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const Tensor grad = internal::contiguous_grad(grad_output, dtype_);
    Tensor grad_input = Tensor::zeros(input_shape_, dtype_, grad.device());
    grad_input.slice(0, start_, end_).copy_(grad);  // contiguous rows of a contiguous tensor: one copy
    return {grad_input};
  }

 private:
  Shape input_shape_;
  DType dtype_;
  int64_t start_, end_;
};

// The order that moves dimension `dim` to the front, keeping the others in order, and its inverse.
std::vector<int64_t> front_order(int64_t dim, int64_t rank) {
  std::vector<int64_t> order{dim};
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim) order.push_back(d);
  return order;
}

std::vector<int64_t> inverse_order(const std::vector<int64_t>& order) {
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  return inverse;
}

// x (contiguous) with dimension `dim` first, contiguous; x itself for dim 0.
Tensor to_front(const Tensor& x, int64_t dim) {
  return dim == 0 ? x : x.permute(front_order(dim, x.dim())).contiguous();
}

Tensor from_front(const Tensor& x, int64_t dim) {
  return dim == 0 ? x : x.permute(inverse_order(front_order(dim, x.dim()))).contiguous();
}

// The gradient of a concat: the pieces of the incoming gradient along `dim`, one per input.
class ConcatNode final : public autograd::Node {
 public:
  ConcatNode(std::vector<int64_t> sizes, int64_t dim, DType dtype)
      : sizes_(std::move(sizes)), dim_(dim), dtype_(dtype) {}
  std::string name() const override { return "ConcatBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const Tensor front = to_front(internal::contiguous_grad(grad_output, dtype_), dim_);
    std::vector<Tensor> grads;
    int64_t offset = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      grads.push_back(needs_grad(i) ? from_front(front.slice(0, offset, offset + sizes_[i]).contiguous(), dim_)
                                    : Tensor());
      offset += sizes_[i];
    }
    return grads;
  }

 private:
  std::vector<int64_t> sizes_;  // each input's extent along dim_
  int64_t dim_;
  DType dtype_;
};

}  // namespace

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  OPSNN_CHECK_AS(ShapeError, !tensors.empty(), "concat: no tensors to join");
  const Tensor& first = tensors.front();
  OPSNN_CHECK_AS(ShapeError, first.dim() >= 1, "concat: a 0-d tensor has no dimension to join along, got ",
                 first.str());
  const int64_t axis = internal::wrap_dim(dim, first.shape(), "concat");
  Shape shape = first.shape();
  shape[static_cast<size_t>(axis)] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    internal::check_same_dtype_and_device(first, t, "concat");
    bool fits = t.dim() == first.dim();
    for (int64_t d = 0; fits && d < t.dim(); ++d) fits = d == axis || t.size(d) == first.size(d);
    OPSNN_CHECK_AS(ShapeError, fits, "concat: tensor ", i, " ", shape_str(t.shape()),
                   " does not line up with tensor 0 ", shape_str(first.shape()), " outside dimension ", axis);
    sizes.push_back(t.size(axis));
    shape[static_cast<size_t>(axis)] += t.size(axis);
  }
  Shape front_shape;
  for (int64_t d : front_order(axis, first.dim())) front_shape.push_back(shape[static_cast<size_t>(d)]);
  Tensor front = Tensor::empty(front_shape, first.dtype(), first.device());
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    // Along the first dimension a piece is one contiguous block of the result: a plain device copy.
    front.slice(0, offset, offset + sizes[i]).copy_(to_front(tensors[i].detach().contiguous(), axis));
    offset += sizes[i];
  }
  Tensor out = from_front(front, axis);
  if (!autograd::any_requires_grad(tensors)) return out;
  return autograd::record(out, std::make_shared<ConcatNode>(std::move(sizes), axis, first.dtype()), tensors);
}

Tensor slice(const Tensor& x, int64_t start, int64_t end) {
  OPSNN_CHECK_AS(ShapeError, x.dim() >= 1, "slice: a 0-d tensor has no rows to slice, got ", x.str());
  const int64_t rows = x.size(0);
  OPSNN_CHECK_AS(ShapeError, 0 <= start && start <= end && end <= rows, "slice: rows [", start, ", ", end,
                 ") are out of range for ", shape_str(x.shape()), " (", rows, " rows)");
  Tensor out = x.detach().slice(0, start, end).contiguous();
  if (!autograd::any_requires_grad({x})) return out;
  return autograd::record(out, std::make_shared<SliceNode>(x.shape(), x.dtype(), start, end), {x});
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& order) {
  // Tensor::permute checks that `order` is a permutation of x's dimensions. A new TensorImpl even where
  // the order keeps the layout (contiguous() then returns the view).
  Tensor out = x.detach().permute(order).contiguous();
  if (!autograd::any_requires_grad({x})) return out;
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    inverse[static_cast<size_t>(order[i] < 0 ? order[i] + x.dim() : order[i])] = static_cast<int64_t>(i);
  return autograd::record(out, std::make_shared<PermuteNode>(std::move(inverse), x.dtype()), {x});
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape resolved = resolve_shape(x.shape(), shape);
  Tensor out = x.contiguous().view(resolved);  // always a new TensorImpl, never x itself
  if (!autograd::any_requires_grad({x})) return out;
  return autograd::record(out, std::make_shared<ReshapeNode>(x.shape(), x.dtype()), {x});
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  const Shape& shape = x.shape();
  if (shape.empty()) {
    // A scalar flattens to one element, as in PyTorch, which (like it) takes dims 0 and -1 as naming the
    // scalar itself; any other dim is as invalid as it would be for a 1-d tensor.
    for (int64_t d : {start_dim, end_dim})
      OPSNN_CHECK_AS(ShapeError, d == 0 || d == -1, "flatten: dimension ", d,
                     " is out of range for a 0-d tensor (valid: 0 or -1)");
    return reshape(x, {1});
  }
  const int64_t start = internal::wrap_dim(start_dim, shape, "flatten");
  const int64_t end = internal::wrap_dim(end_dim, shape, "flatten");
  OPSNN_CHECK_AS(ShapeError, start <= end, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim,
                 " for shape ", shape_str(shape));
  Shape flat(shape.begin(), shape.begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= shape[static_cast<size_t>(d)];
  flat.push_back(merged);
  flat.insert(flat.end(), shape.begin() + end + 1, shape.end());
  return reshape(x, flat);
}

}  // namespace opsnn::ops
