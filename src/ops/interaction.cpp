// Differentiable dot interaction (DLRM's): the pairwise dot products of the F feature vectors of each
// sample, the strictly lower triangle of x x^T row by row. The backward needs the input, which the node
// keeps; both directions run on the backend of x's device.
#include <memory>
#include <string>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {
namespace {

class DotInteractionNode final : public autograd::Node {
 public:
  explicit DotInteractionNode(Tensor x) : x_(std::move(x)) {}
  std::string name() const override { return "DotInteractionBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    if (!needs_grad(0)) return {Tensor()};
    Tensor grad = internal::contiguous_grad(grad_output, x_.dtype());
    Tensor grad_x = Tensor::empty(x_.shape(), x_.dtype(), x_.device());
    backend_for(x_.device()).dot_interaction_backward(grad, x_, grad_x);
    return {grad_x};
  }
  void release() override { x_ = Tensor(); }

 private:
  Tensor x_;  // the contiguous input, detached
};

}  // namespace

Tensor dot_interaction(const Tensor& x) {
  OPSNN_CHECK_AS(ShapeError, x.dim() == 3, "dot_interaction: x must be [batch, features, dim], got ",
                 shape_str(x.shape()));
  OPSNN_CHECK_AS(TypeError, is_floating(x.dtype()), "dot_interaction: x must be floating, got ", x.str());
  const int64_t features = x.size(1);
  int64_t pairs = 0;
  OPSNN_CHECK_AS(ShapeError, !__builtin_mul_overflow(features, features - 1, &pairs), "dot_interaction: ", features,
                 " features have more pairs than a 64-bit count holds");
  pairs /= 2;
  Tensor input = x.detach().contiguous();
  Tensor out = Tensor::empty({x.size(0), pairs}, x.dtype(), x.device());
  backend_for(x.device()).dot_interaction_forward(input, out);
  if (!autograd::any_requires_grad({x})) return out;
  return autograd::record(out, std::make_shared<DotInteractionNode>(input), {x});
}

}  // namespace opsnn::ops
