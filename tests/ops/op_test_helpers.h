// Helpers for the [ops] tests of the functional API: random f64 leaves for gradient checks, a
// GPU tensor for device-mismatch checks where a GPU exists, and value comparisons.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "opsnn/core/rng.h"
#include "opsnn/core/tensor.h"
#include "support/catch.h"
#include "support/gradcheck.h"

namespace opsnn::testing {

// Uniform values in [low, high) as an f64 leaf that requires grad.
inline Tensor random_leaf(const Shape& shape, Generator& generator, double low = -1.0, double high = 1.0) {
  Tensor t = Tensor::uniform(shape, low, high, generator, DType::f64);
  t.set_requires_grad(true);
  return t;
}

// Zeros on cuda:0 for device-mismatch checks, or an undefined tensor where no GPU exists (a CPU-only
// build cannot create a tensor on another device; those checks then run on a GPU machine only).
inline Tensor zeros_on_gpu(const Shape& shape, DType dtype = DType::f32) {
  if (cuda_device_count() == 0) return Tensor();
  return Tensor::zeros(shape, dtype, Device(DeviceType::cuda, 0));
}

// The largest |actual - expected| over |expected| + mean |expected| (so values near zero in a tensor of
// larger ones are not judged by their own tiny size); NaN anywhere makes it NaN-large (fails any bound).
inline double scaled_error(const Tensor& actual, const Tensor& expected) {
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  double mean_abs = 0.0;
  for (double v : e) mean_abs += std::fabs(v);
  mean_abs = e.empty() ? 0.0 : mean_abs / static_cast<double>(e.size());
  double worst = 0.0;
  for (size_t i = 0; i < e.size(); ++i) {
    const double error = std::fabs(a[i] - e[i]) / (std::fabs(e[i]) + mean_abs + 1e-30);
    if (!(error <= worst)) worst = error;  // a NaN sticks
  }
  return worst;
}

inline void require_close(const std::vector<double>& actual, const std::vector<double>& expected,
                          double tolerance = 1e-12) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::fabs(actual[i] - expected[i]), allowed = tolerance * (1.0 + std::fabs(expected[i]));
    if (error <= allowed) continue;  // (a NaN fails here)
    INFO("element " << i << ": " << actual[i] << " vs expected " << expected[i]);
    REQUIRE(error <= allowed);
  }
}

// Runs gradcheck and fails the test with its report when the gradients disagree.
inline void require_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                              const std::vector<Tensor>& inputs) {
  GradcheckResult result = gradcheck(f, inputs);
  INFO(result.report);
  REQUIRE(result.ok);
}

// Runs fn, requires it to throw ErrorType, and returns the message for further checks.
template <typename ErrorType, typename Fn>
std::string require_throws(Fn&& fn) {
  try {
    fn();
  } catch (const ErrorType& error) {
    return error.what();
  }
  FAIL("expected an exception");
  return {};
}

}  // namespace opsnn::testing
