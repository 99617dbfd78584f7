// Pooling of the functional API (max, average, global average over NCHW or NHWC): geometry validation,
// dispatch to the device's kernels, and the backward recorded for autograd.
#include <limits>
#include <memory>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {

namespace internal {
Shape checked_pool_shape(const char* op, const Tensor& input, const Pool2dGeometry& g) {
  OPSNN_CHECK_AS(ShapeError, input.dim() == 4, op, ": input must be 4-D [N, C, H, W], got ", input.str());
  OPSNN_CHECK_AS(ShapeError, g.kernel_h >= 1 && g.kernel_w >= 1, op, ": kernel ", g.kernel_h, "x", g.kernel_w,
                 " must be at least 1x1");
  OPSNN_CHECK_AS(ShapeError, g.stride_h >= 1 && g.stride_w >= 1, op, ": stride ", g.stride_h, "x", g.stride_w,
                 " must be at least 1");
  OPSNN_CHECK_AS(ShapeError, g.pad_h >= 0 && g.pad_w >= 0, op, ": padding ", g.pad_h, "x", g.pad_w,
                 " must not be negative");
  OPSNN_CHECK_AS(ShapeError, 2 * g.pad_h <= g.kernel_h && 2 * g.pad_w <= g.kernel_w, op, ": padding ", g.pad_h, "x",
                 g.pad_w, " must be at most half the kernel ", g.kernel_h, "x", g.kernel_w);
  const int64_t padded_h = input.size(2) + 2 * g.pad_h, padded_w = input.size(3) + 2 * g.pad_w;
  OPSNN_CHECK_AS(ShapeError, g.kernel_h <= padded_h && g.kernel_w <= padded_w, op, ": kernel ", g.kernel_h, "x",
                 g.kernel_w, " is larger than the padded input ", padded_h, "x", padded_w, " (input ",
                 shape_str(input.shape()), ", padding ", g.pad_h, "x", g.pad_w, ")");
  return {input.size(0), input.size(1), (padded_h - g.kernel_h) / g.stride_h + 1,
          (padded_w - g.kernel_w) / g.stride_w + 1};
}

}  // namespace internal

namespace {

using internal::checked_pool_shape;

class MaxPool2dBackward final : public autograd::Node {
 public:
  MaxPool2dBackward(Shape input_shape, Tensor indices, const Pool2dGeometry& geometry)
      : input_shape_(std::move(input_shape)), indices_(std::move(indices)), geometry_(geometry) {}
  std::string name() const override { return "MaxPool2dBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const Tensor grad_out = internal::contiguous_grad(grad_output, output_dtype);
    Tensor grad_input = Tensor::empty(input_shape_, grad_out.dtype(), grad_out.device());
    backend_for(grad_out.device()).max_pool2d_backward(grad_out, indices_, grad_input, geometry_);
    return {grad_input};
  }
  void release() override { indices_ = Tensor(); }

 private:
  Shape input_shape_;
  Tensor indices_;
  Pool2dGeometry geometry_;
};

class AvgPool2dBackward final : public autograd::Node {
 public:
  AvgPool2dBackward(Shape input_shape, const Pool2dGeometry& geometry)
      : input_shape_(std::move(input_shape)), geometry_(geometry) {}
  std::string name() const override { return "AvgPool2dBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    // Global pooling hands back its [N, C] gradient; the kernel wants [N, C, 1, 1].
    const Shape out_shape = {input_shape_[0], input_shape_[1], output_shape.size() == 4 ? output_shape[2] : 1,
                             output_shape.size() == 4 ? output_shape[3] : 1};
    const Tensor grad_out = internal::contiguous_grad(grad_output, output_dtype).view(out_shape);
    Tensor grad_input = Tensor::empty(input_shape_, grad_out.dtype(), grad_out.device());
    backend_for(grad_out.device()).avg_pool2d_backward(grad_out, grad_input, geometry_);
    return {grad_input};
  }

 private:
  Shape input_shape_;
  Pool2dGeometry geometry_;
};

}  // namespace

Tensor max_pool2d(const Tensor& input, const Pool2dGeometry& geometry) {
  const Shape out_shape = checked_pool_shape("max_pool2d", input, geometry);
  // The argmax indices are i32 flat positions within a plane (half of PyTorch's i64 memory).
  constexpr int64_t kMaxPlane = std::numeric_limits<int32_t>::max();
  OPSNN_CHECK_AS(ShapeError, input.size(2) * input.size(3) <= kMaxPlane, "max_pool2d: a plane of ", input.size(2), "x",
                 input.size(3), " has more than 2^31 - 1 cells");
  const Tensor input_data = input.contiguous();
  Tensor out = Tensor::empty(out_shape, input.dtype(), input.device());
  Tensor indices = Tensor::empty(out_shape, DType::i32, input.device());
  backend_for(input.device()).max_pool2d_forward(input_data, out, indices, geometry);
  if (!autograd::any_requires_grad({input})) return out;
  return autograd::record(out, std::make_shared<MaxPool2dBackward>(input.shape(), indices, geometry), {input});
}

Tensor avg_pool2d(const Tensor& input, const Pool2dGeometry& geometry) {
  const Shape out_shape = checked_pool_shape("avg_pool2d", input, geometry);
  const Tensor input_data = input.contiguous();
  Tensor out = Tensor::empty(out_shape, input.dtype(), input.device());
  backend_for(input.device()).avg_pool2d_forward(input_data, out, geometry);
  if (!autograd::any_requires_grad({input})) return out;
  return autograd::record(out, std::make_shared<AvgPool2dBackward>(input.shape(), geometry), {input});
}

Tensor global_avg_pool2d(const Tensor& input) {
  OPSNN_CHECK_AS(ShapeError, input.dim() == 4, "global_avg_pool2d: input must be 4-D [N, C, H, W], got ", input.str());
  OPSNN_CHECK_AS(ShapeError, input.size(2) >= 1 && input.size(3) >= 1,
                 "global_avg_pool2d: input has an empty spatial extent, ", shape_str(input.shape()));
  // One window covering the whole plane.
  Pool2dGeometry geometry;
  geometry.kernel_h = geometry.stride_h = input.size(2);
  geometry.kernel_w = geometry.stride_w = input.size(3);
  geometry.pad_h = geometry.pad_w = 0;
  const Tensor input_data = input.contiguous();
  Tensor pooled = Tensor::empty({input.size(0), input.size(1), 1, 1}, input.dtype(), input.device());
  backend_for(input.device()).avg_pool2d_forward(input_data, pooled, geometry);
  Tensor out = pooled.view({input.size(0), input.size(1)});
  if (!autograd::any_requires_grad({input})) return out;
  return autograd::record(out, std::make_shared<AvgPool2dBackward>(input.shape(), geometry), {input});
}

Tensor global_avg_pool2d_nhwc(const Tensor& input) {
  OPSNN_CHECK_AS(ShapeError, input.dim() == 4, "global_avg_pool2d_nhwc: input must be 4-D [N, H, W, C], got ",
                 input.str());
  OPSNN_CHECK_AS(ShapeError, input.size(1) >= 1 && input.size(2) >= 1,
                 "global_avg_pool2d_nhwc: input has an empty spatial extent, ", shape_str(input.shape()));
  // [N, H, W, C] is [N, 1, H*W, C] in memory: a window of H*W rows by one column per channel, so the
  // data is read where it lies (no NCHW copy either way) and each channel's cells are summed in the
  // order global_avg_pool2d sums the NCHW plane.
  const int64_t n = input.size(0), cells = input.size(1) * input.size(2), channels = input.size(3);
  Pool2dGeometry geometry;
  geometry.kernel_h = geometry.stride_h = cells;
  geometry.kernel_w = geometry.stride_w = 1;
  geometry.pad_h = geometry.pad_w = 0;
  const Tensor pooled = avg_pool2d(reshape(input, {n, 1, cells, channels}), geometry);
  return reshape(pooled, {n, channels});
}

}  // namespace opsnn::ops
