// Finite-difference gradient checking for tests: compares autograd gradients of a scalar function of
// f64 tensors with central differences, element by element, and reports the worst mismatch.
#pragma once

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "opsnn/core/tensor.h"

namespace opsnn::testing {

struct GradcheckResult {
  bool ok = true;
  double worst_error = 0.0;  // |analytic - numeric| / (atol + rtol * |numeric|), worst over all elements
  std::string report;        // where the worst element is, with both values
};

// f maps the inputs to a tensor; the check uses sum(f(inputs) * weights) with fixed pseudo-random weights
// so every output element matters. Inputs must be f64 CPU leaves; those with requires_grad are checked.
inline GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                                 double step = 1e-6, double atol = 1e-6, double rtol = 1e-5) {
  GradcheckResult result;
  auto weighted_sum = [&](const Tensor& out, std::vector<double>& weights) {
    std::vector<double> values = out.to_vector<double>();
    if (weights.empty()) {
      weights.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i)
        weights[i] = 0.5 + std::fmod(0.6180339887 * static_cast<double>(i + 1), 1.0);
    }
    double total = 0.0;
    for (size_t i = 0; i < values.size(); ++i) total += values[i] * weights[i];
    return total;
  };
  std::vector<double> weights;
  for (Tensor& input : inputs)
    if (input.requires_grad()) input.set_grad(Tensor());
  Tensor out = f(inputs);
  weighted_sum(out, weights);
  out.backward(Tensor::from_vector<double>(weights, out.shape()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& input = inputs[k];
    if (!input.requires_grad()) continue;
    Tensor analytic_grad = input.grad();
    if (!analytic_grad.defined()) {
      result.ok = false;
      result.report += "input " + std::to_string(k) + ": no gradient reached it\n";
      continue;
    }
    std::vector<double> analytic = analytic_grad.to_vector<double>();
    double* values = input.data<double>();
    for (int64_t i = 0; i < input.numel(); ++i) {
      double saved = values[i];
      values[i] = saved + step;
      double plus = weighted_sum(f(inputs).detach(), weights);
      values[i] = saved - step;
      double minus = weighted_sum(f(inputs).detach(), weights);
      values[i] = saved;
      double numeric = (plus - minus) / (2.0 * step);
      double error = std::fabs(analytic[static_cast<size_t>(i)] - numeric) / (atol + rtol * std::fabs(numeric));
      if (!(error <= result.worst_error)) {
        result.worst_error = error;
        std::ostringstream where;
        where << "input " << k << " element " << i << ": analytic " << analytic[static_cast<size_t>(i)] << " numeric "
              << numeric;
        result.report = where.str();
      }
    }
  }
  if (!(result.worst_error <= 1.0)) result.ok = false;
  return result;
}

}  // namespace opsnn::testing
