// conv2d of the functional API: argument validation, dispatch to the device's kernels, and the
// backward (input, weight and bias gradients) recorded for autograd. NCHW or, with
// geometry.channels_last, NHWC activations; the backends take either (backend.h).
#include <memory>

#include "ops/op_support.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"

namespace opsnn::ops {
namespace {

// Output size of a convolution along one axis: floor((in + 2 pad - kernel) / stride) + 1.
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  return (in + 2 * pad - kernel) / stride + 1;
}

// Where the activations keep their channels and spatial sizes: NCHW, or NHWC with channels_last.
struct ActivationAxes {
  int64_t channels, height, width;
  const char* layout;
};

ActivationAxes activation_axes(const Conv2dGeometry& geometry) {
  return geometry.channels_last ? ActivationAxes{3, 1, 2, "[N, H, W, C] (channels_last)"}
                                : ActivationAxes{1, 2, 3, "[N, C, H, W]"};
}

Shape checked_output_shape(const Tensor& input, const Tensor& weight, const Tensor& bias,
                           const Conv2dGeometry& geometry) {
  const ActivationAxes axes = activation_axes(geometry);
  OPSNN_CHECK_AS(ShapeError, input.dim() == 4, "conv2d: input must be 4-D ", axes.layout, ", got ", input.str());
  OPSNN_CHECK_AS(ShapeError, weight.dim() == 4, "conv2d: weight must be 4-D [out_channels, in_channels, kH, kW], got ",
                 weight.str());
  check_same_dtype(input, weight, "conv2d input vs weight");
  check_same_device(input, weight, "conv2d input vs weight");
  const int64_t in_channels = input.size(axes.channels), in_h = input.size(axes.height), in_w = input.size(axes.width);
  OPSNN_CHECK_AS(ShapeError, in_channels == weight.size(1), "conv2d: input ", axes.layout, " has ", in_channels,
                 " channels but weight expects ", weight.size(1), " (input ", shape_str(input.shape()), " vs weight ",
                 shape_str(weight.shape()), ")");
  if (bias.defined()) {
    check_same_dtype(input, bias, "conv2d input vs bias");
    check_same_device(input, bias, "conv2d input vs bias");
    OPSNN_CHECK_AS(ShapeError, bias.dim() == 1 && bias.size(0) == weight.size(0), "conv2d: bias ",
                   shape_str(bias.shape()), " does not match weight ", shape_str(weight.shape()), " (expected [",
                   weight.size(0), "])");
  }
  OPSNN_CHECK_AS(ShapeError, geometry.stride_h >= 1 && geometry.stride_w >= 1, "conv2d: stride ", geometry.stride_h,
                 "x", geometry.stride_w, " must be at least 1");
  OPSNN_CHECK_AS(ShapeError, geometry.pad_h >= 0 && geometry.pad_w >= 0, "conv2d: padding ", geometry.pad_h, "x",
                 geometry.pad_w, " must not be negative");
  const int64_t padded_h = in_h + 2 * geometry.pad_h, padded_w = in_w + 2 * geometry.pad_w;
  OPSNN_CHECK_AS(ShapeError,
                 weight.size(2) >= 1 && weight.size(3) >= 1 && weight.size(2) <= padded_h && weight.size(3) <= padded_w,
                 "conv2d: kernel ", weight.size(2), "x", weight.size(3), " does not fit the padded input ", padded_h,
                 "x", padded_w, " (input ", axes.layout, " ", shape_str(input.shape()), " vs weight ",
                 shape_str(weight.shape()), ", padding ", geometry.pad_h, "x", geometry.pad_w, ")");
  const int64_t out_h = conv_output_size(in_h, weight.size(2), geometry.stride_h, geometry.pad_h);
  const int64_t out_w = conv_output_size(in_w, weight.size(3), geometry.stride_w, geometry.pad_w);
  if (geometry.channels_last) return {input.size(0), out_h, out_w, weight.size(0)};
  return {input.size(0), weight.size(0), out_h, out_w};
}

class Conv2dBackward final : public autograd::Node {
 public:
  Conv2dBackward(Tensor input, Tensor weight, const Conv2dGeometry& geometry)
      : input_(std::move(input)), weight_(std::move(weight)), geometry_(geometry) {}

  std::string name() const override { return "Conv2dBackward"; }

  std::vector<Tensor> backward(const Tensor& grad_output) override { return backward_into(grad_output, {}); }

  // The input gradient may be added into another consumer's gradient of the input in place (a ResNet
  // block's input feeds its first convolution and its shortcut).
  bool accepts_accumulator(size_t input) const override { return input == 0; }

  std::vector<Tensor> backward_into(const Tensor& grad_output, const std::vector<Tensor>& accumulators) override {
    const Tensor grad_out = internal::contiguous_grad(grad_output, input_.dtype());
    Backend& backend = backend_for(grad_out.device());
    std::vector<Tensor> grads(3);
    if (needs_grad(0)) {
      if (internal::usable_accumulator(accumulators, 0, input_)) {
        grads[0] = accumulators[0];
        backend.conv2d_backward_input(grad_out, weight_, grads[0], geometry_, true);
      } else {
        grads[0] = Tensor::empty(input_.shape(), input_.dtype(), input_.device());
        backend.conv2d_backward_input(grad_out, weight_, grads[0], geometry_, false);
      }
    }
    if (needs_grad(1)) {
      grads[1] = Tensor::empty(weight_.shape(), weight_.dtype(), weight_.device());
      backend.conv2d_backward_weight(grad_out, input_, grads[1], geometry_);
    }
    if (needs_grad(2)) {
      // The bias gradient sums the output gradient over batch and space.
      const ActivationAxes axes = activation_axes(geometry_);
      const int64_t filters = grad_out.size(axes.channels);
      Shape summed_shape{1, 1, 1, 1};
      summed_shape[static_cast<size_t>(axes.channels)] = filters;
      Tensor summed = Tensor::empty(summed_shape, grad_out.dtype(), grad_out.device());
      backend.sum(grad_out, {0, axes.height, axes.width}, summed);
      grads[2] = summed.view({filters});
    }
    return grads;
  }

  void release() override {
    input_ = Tensor();
    weight_ = Tensor();
  }

 private:
  Tensor input_, weight_;  // contiguous, detached
  Conv2dGeometry geometry_;
};

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& geometry) {
  const Shape out_shape = checked_output_shape(input, weight, bias, geometry);
  const Tensor input_data = input.contiguous().detach();
  const Tensor weight_data = weight.contiguous().detach();
  const Tensor bias_data = bias.defined() ? bias.contiguous().detach() : Tensor();
  Tensor out = Tensor::empty(out_shape, input.dtype(), input.device());
  backend_for(input.device()).conv2d_forward(input_data, weight_data, bias_data, out, geometry);
  if (!autograd::any_requires_grad({input, weight, bias})) return out;
  auto node = std::make_shared<Conv2dBackward>(input_data, weight_data, geometry);
  return autograd::record(out, std::move(node), {input, weight, bias});
}

}  // namespace opsnn::ops
