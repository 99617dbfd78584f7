// The log-loss of always predicting a click probability p on labels whose click rate is p: the binary
// entropy in nats. The datasets of click logs report it as the loss a model must beat.
#pragma once

#include <cmath>

namespace opsnn::data {

inline double binary_entropy(double p) {
  double result = 0.0;
  if (p > 0.0) result -= p * std::log(p);
  if (p < 1.0) result -= (1.0 - p) * std::log1p(-p);
  return result;
}

}  // namespace opsnn::data
