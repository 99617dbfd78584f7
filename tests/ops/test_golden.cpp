// Golden tests: conv2d, batch_norm and cross_entropy (forward and backward) against PyTorch values in
// tests/golden/*.json, written by tools/gen_golden_ops.py in float64. The f64 kernels must match to
// rounding; the f32 kernels to f32 precision. A missing fixture fails the test.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using json = nlohmann::json;

namespace {

// Tolerances |actual - expected| <= atol + rtol * |expected|: f64 differs from PyTorch only in
// summation order; f32 runs the same fixture through single-precision kernels.
struct Tolerance {
  double atol, rtol;
};
constexpr Tolerance kF64{1e-12, 1e-10};
constexpr Tolerance kF32{2e-5, 2e-4};

json load_fixture(const std::string& file_name) {
  const std::filesystem::path path = std::filesystem::path(OPSNN_GOLDEN_DIR) / file_name;
  INFO("golden fixture " << path.string());
  if (!std::filesystem::exists(path))
    FAIL("golden fixture " << path.string()
                           << " is missing: generate it with `python3 tools/gen_golden_ops.py` on a machine with "
                              "PyTorch and commit tests/golden/");
  std::ifstream stream(path);
  json document = json::parse(stream);
  REQUIRE(document.contains("cases"));
  REQUIRE_FALSE(document["cases"].empty());
  return document;
}

Shape shape_of(const json& entry) { return entry.at("shape").get<Shape>(); }

Tensor tensor_of(const json& entry, DType dtype, bool requires_grad = false) {
  Tensor t = Tensor::from_vector<double>(entry.at("data").get<std::vector<double>>(), shape_of(entry)).to(dtype);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

void require_matches(const Tensor& actual, const json& expected, Tolerance tolerance, const std::string& what) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(actual.shape() == shape_of(expected));
  const std::vector<double> values = actual.to_vector<double>();
  const std::vector<double> reference = expected.at("data").get<std::vector<double>>();
  REQUIRE(values.size() == reference.size());
  double worst = 0.0;
  size_t worst_index = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double error =
        std::fabs(values[i] - reference[i]) / (tolerance.atol + tolerance.rtol * std::fabs(reference[i]));
    if (!(error <= worst)) {
      worst = error;
      worst_index = i;
    }
  }
  INFO(std::setprecision(17) << "worst element " << worst_index << ": " << values[worst_index] << " vs PyTorch "
                             << reference[worst_index] << " (" << worst << " x tolerance)");
  REQUIRE(worst <= 1.0);
}

Tolerance tolerance_for(DType dtype) { return dtype == DType::f64 ? kF64 : kF32; }

}  // namespace

TEST_CASE("conv2d matches PyTorch forward and backward", "[golden]") {
  const json document = load_fixture("conv2d.json");
  for (const json& c : document["cases"]) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO("case '" << c["name"].get<std::string>() << "' in " << dtype_name(dtype));
      Tensor input = tensor_of(c["input"], dtype, true);
      Tensor weight = tensor_of(c["weight"], dtype, true);
      Tensor bias = c["bias"].is_null() ? Tensor() : tensor_of(c["bias"], dtype, true);
      ops::Conv2dGeometry geometry;
      geometry.stride_h = c["stride"][0];
      geometry.stride_w = c["stride"][1];
      geometry.pad_h = c["padding"][0];
      geometry.pad_w = c["padding"][1];
      Tensor out = ops::conv2d(input, weight, bias, geometry);
      const Tolerance tolerance = tolerance_for(dtype);
      require_matches(out, c["output"], tolerance, "output");
      out.backward(tensor_of(c["grad_output"], dtype));
      require_matches(input.grad(), c["grad_input"], tolerance, "grad_input");
      require_matches(weight.grad(), c["grad_weight"], tolerance, "grad_weight");
      if (bias.defined()) require_matches(bias.grad(), c["grad_bias"], tolerance, "grad_bias");
    }
  }
}

TEST_CASE("batch_norm matches PyTorch in training and eval", "[golden]") {
  const json document = load_fixture("batch_norm.json");
  for (const json& c : document["cases"]) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO("case '" << c["name"].get<std::string>() << "' in " << dtype_name(dtype));
      Tensor input = tensor_of(c["input"], dtype, true);
      Tensor gamma = tensor_of(c["gamma"], dtype, true);
      Tensor beta = tensor_of(c["beta"], dtype, true);
      Tensor running_mean = tensor_of(c["running_mean_in"], dtype);
      Tensor running_var = tensor_of(c["running_var_in"], dtype);
      Tensor out = ops::batch_norm(input, gamma, beta, running_mean, running_var, c["training"].get<bool>(),
                                   c["momentum"].get<double>(), c["eps"].get<double>());
      const Tolerance tolerance = tolerance_for(dtype);
      require_matches(out, c["output"], tolerance, "output");
      require_matches(running_mean, c["running_mean_out"], tolerance, "running_mean after the step");
      require_matches(running_var, c["running_var_out"], tolerance, "running_var after the step");
      out.backward(tensor_of(c["grad_output"], dtype));
      require_matches(input.grad(), c["grad_input"], tolerance, "grad_input");
      require_matches(gamma.grad(), c["grad_gamma"], tolerance, "grad_gamma");
      require_matches(beta.grad(), c["grad_beta"], tolerance, "grad_beta");
    }
  }
}

TEST_CASE("cross_entropy matches PyTorch with and without label smoothing", "[golden]") {
  const json document = load_fixture("cross_entropy.json");
  for (const json& c : document["cases"]) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO("case '" << c["name"].get<std::string>() << "' in " << dtype_name(dtype));
      Tensor logits = tensor_of(c["logits"], dtype, true);
      Tensor target =
          Tensor::from_vector<int64_t>(c["target"]["data"].get<std::vector<int64_t>>(), shape_of(c["target"]));
      Tensor loss = ops::cross_entropy(logits, target, c["label_smoothing"].get<double>());
      REQUIRE(loss.numel() == 1);
      const Tolerance tolerance = tolerance_for(dtype);
      const double expected = c["loss"].get<double>();
      INFO(std::setprecision(17) << "loss " << loss.item() << " vs PyTorch " << expected);
      REQUIRE(std::fabs(loss.item() - expected) <= tolerance.atol + tolerance.rtol * std::fabs(expected));
      loss.backward();
      require_matches(logits.grad(), c["grad_logits"], tolerance, "grad_logits");
    }
  }
}
