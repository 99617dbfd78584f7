// cast of the functional API: a dtype conversion that records autograd history, so low-precision
// compute (mixed precision) can read fp32 parameters and send fp32 gradients back to them.
#include <memory>
#include <string>

#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {
namespace {

// The gradient of a conversion is the upstream gradient converted back to the source dtype. Into a leaf
// (a parameter read through its low-precision copy) it goes unconverted: the engine's accumulation into
// the leaf's gradient converts it as it adds (Tensor::add_converted_, one pass instead of a conversion
// pass and an add pass), or converts it when the leaf has no gradient yet.
class CastNode final : public autograd::Node {
 public:
  explicit CastNode(DType source_dtype) : source_dtype_(source_dtype) {}
  std::string name() const override { return "CastBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    if (inputs.size() == 1 && inputs[0].leaf && !inputs[0].function) return {grad_output};
    return {grad_output.to(source_dtype_)};
  }

 private:
  DType source_dtype_;
};

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  OPSNN_CHECK_AS(TypeError, is_floating(x.dtype()) && is_floating(dtype),
                 "cast: converts between floating dtypes, got ", x.str(), " to ", dtype_name(dtype));
  if (x.dtype() == dtype) return x;
  Tensor out = x.to(dtype);
  if (!autograd::any_requires_grad({x})) return out;
  return autograd::record(out, std::make_shared<CastNode>(x.dtype()), {x});
}

Tensor cast_from_copy(const Tensor& x, const Tensor& copy) {
  OPSNN_CHECK_AS(TypeError, is_floating(x.dtype()) && is_floating(copy.dtype()),
                 "cast_from_copy: converts between floating dtypes, got ", x.str(), " and its copy ", copy.str());
  check_same_shape(x, copy, "cast_from_copy");
  check_same_device(x, copy, "cast_from_copy");
  Tensor out = copy.detach();  // a handle of its own: the copy itself never carries this graph
  if (x.dtype() == copy.dtype() || !autograd::any_requires_grad({x})) return out;
  return autograd::record(out, std::make_shared<CastNode>(x.dtype()), {x});
}

}  // namespace opsnn::ops
