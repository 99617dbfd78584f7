// Parameter initialisers on the seeded Generator, as torch::nn::init: they overwrite a tensor's values
// in place (its storage and handles stay, so arena views stay views) and return the same handle.
#pragma once

#include <cstdint>

#include "opsnn/core/rng.h"
#include "opsnn/core/tensor.h"

namespace opsnn::nn::init {

enum class FanMode { fan_in, fan_out };
enum class Nonlinearity { linear, conv, sigmoid, tanh, relu, leaky_relu };

// The recommended gain for a nonlinearity (PyTorch's calculate_gain): 1 for linear, conv and sigmoid,
// 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope^2)) for leaky_relu.
double calculate_gain(Nonlinearity nonlinearity, double negative_slope = 0.01);

struct Fans {
  int64_t fan_in = 0;   // input features x receptive field (kernel area)
  int64_t fan_out = 0;  // output features x receptive field
};
// Fans of a weight [out, in, k...]; throws ShapeError for fewer than two dimensions.
Fans compute_fans(const Shape& shape);

Tensor uniform_(Tensor tensor, double low, double high, Generator& generator);
Tensor normal_(Tensor tensor, double mean, double stddev, Generator& generator);
Tensor constant_(Tensor tensor, double value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);

// Kaiming He et al., "Delving Deep into Rectifiers" (2015), section 2.2: std = gain / sqrt(fan) with
// gain = calculate_gain(nonlinearity, a). The uniform variant draws from +-sqrt(3) * std.
// The defaults (a = 0, fan_in, leaky_relu) are PyTorch's and give the relu gain sqrt(2).
Tensor kaiming_uniform_(Tensor tensor, Generator& generator, double a = 0.0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
Tensor kaiming_normal_(Tensor tensor, Generator& generator, double a = 0.0, FanMode mode = FanMode::fan_in,
                       Nonlinearity nonlinearity = Nonlinearity::leaky_relu);

}  // namespace opsnn::nn::init
