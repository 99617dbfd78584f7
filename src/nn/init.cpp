// Parameter initialisers: draws from the seeded Generator copied into the tensor in place.
#include "opsnn/nn/init.h"

#include <cmath>

#include "opsnn/core/error.h"

namespace opsnn::nn::init {
namespace {

void check_floating(const Tensor& tensor, const char* initializer) {
  OPSNN_CHECK(tensor.defined(), initializer, ": undefined tensor");
  OPSNN_CHECK_AS(TypeError, is_floating(tensor.dtype()), initializer, " needs a floating tensor, got ", tensor.str());
}

double kaiming_std(const Tensor& tensor, double a, FanMode mode, Nonlinearity nonlinearity) {
  Fans fans = compute_fans(tensor.shape());
  int64_t fan = mode == FanMode::fan_in ? fans.fan_in : fans.fan_out;
  OPSNN_CHECK_AS(ShapeError, fan > 0, "kaiming initialisation of a tensor with no elements: ", tensor.str());
  return calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double negative_slope) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu:
      return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
  }
  return 1.0;
}

Fans compute_fans(const Shape& shape) {
  OPSNN_CHECK_AS(ShapeError, shape.size() >= 2, "fan in and fan out need a weight of at least 2 dimensions, got ",
                 shape_str(shape));
  int64_t receptive_field = 1;
  for (size_t d = 2; d < shape.size(); ++d) receptive_field *= shape[d];
  return Fans{shape[1] * receptive_field, shape[0] * receptive_field};
}

Tensor uniform_(Tensor tensor, double low, double high, Generator& generator) {
  check_floating(tensor, "uniform_");
  tensor.copy_(Tensor::uniform(tensor.shape(), low, high, generator, DType::f64, kCPU));
  return tensor;
}

Tensor normal_(Tensor tensor, double mean, double stddev, Generator& generator) {
  check_floating(tensor, "normal_");
  tensor.copy_(Tensor::normal(tensor.shape(), mean, stddev, generator, DType::f64, kCPU));
  return tensor;
}

Tensor constant_(Tensor tensor, double value) {
  OPSNN_CHECK(tensor.defined(), "constant_: undefined tensor");
  if (tensor.is_contiguous()) {
    tensor.fill_(value);
  } else {
    tensor.copy_(Tensor::full(tensor.shape(), value, tensor.dtype(), tensor.device()));
  }
  return tensor;
}

Tensor zeros_(Tensor tensor) { return constant_(std::move(tensor), 0.0); }
Tensor ones_(Tensor tensor) { return constant_(std::move(tensor), 1.0); }

Tensor kaiming_uniform_(Tensor tensor, Generator& generator, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_floating(tensor, "kaiming_uniform_");
  double bound = std::sqrt(3.0) * kaiming_std(tensor, a, mode, nonlinearity);
  return uniform_(std::move(tensor), -bound, bound, generator);
}

Tensor kaiming_normal_(Tensor tensor, Generator& generator, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_floating(tensor, "kaiming_normal_");
  double stddev = kaiming_std(tensor, a, mode, nonlinearity);
  return normal_(std::move(tensor), 0.0, stddev, generator);
}

}  // namespace opsnn::nn::init
