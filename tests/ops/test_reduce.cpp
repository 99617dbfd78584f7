// Tests for sum and mean (src/ops/reduce.cpp, src/ops/cpu/reduce.cpp): values against a double
// reference for every dimension pattern, accuracy of long f32 sums, gradients and errors.
#include "ops/op_test_helpers.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

// Sum of x over `dims` (distinct, non-negative) in keepdim layout, by visiting every element.
std::vector<double> reference_sum(const Tensor& x, const std::vector<int64_t>& dims) {
  Shape shape = x.shape(), out_shape = x.shape();
  for (int64_t d : dims) out_shape[static_cast<size_t>(d)] = 1;
  std::vector<double> values = x.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(shape_numel(out_shape)), 0.0);
  for (size_t flat = 0; flat < values.size(); ++flat) {
    int64_t remaining = static_cast<int64_t>(flat), out_flat = 0, out_stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      int64_t index = remaining % shape[d];
      remaining /= shape[d];
      out_flat += (out_shape[d] == 1 ? 0 : index) * out_stride;
      out_stride *= out_shape[d];
    }
    out[static_cast<size_t>(out_flat)] += values[flat];
  }
  return out;
}

}  // namespace

TEST_CASE("sum and mean over everything", "[ops]") {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor total = ops::sum(x);
  CHECK(total.shape() == Shape{});
  CHECK(total.item() == 21.0);
  CHECK(ops::mean(x).item() == 3.5);
  CHECK(ops::sum(Tensor::scalar(2.5)).item() == 2.5);
  CHECK(ops::sum(Tensor::zeros({0, 3})).item() == 0.0);
}

TEST_CASE("sum over chosen dimensions matches a reference, with and without keepdim", "[ops]") {
  Generator generator(31);
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {{{2, 3, 4}, {0}},       {{2, 3, 4}, {1}},
                                                                     {{2, 3, 4}, {2}},       {{2, 3, 4}, {0, 2}},
                                                                     {{2, 3, 4}, {1, 2}},    {{2, 3, 4}, {0, 1, 2}},
                                                                     {{4, 1, 5}, {0, 1}},    {{3, 2, 4, 5}, {0, 2, 3}},
                                                                     {{3, 2, 4, 5}, {1, 3}}, {{6}, {0}}};
  for (const auto& [shape, dims] : cases) {
    INFO("shape " << shape_str(shape) << " dims " << shape_str(dims));
    Tensor x = Tensor::uniform(shape, -1.0, 1.0, generator, DType::f64);
    Tensor kept = ops::sum(x, dims, true);
    Shape keep_shape = shape;
    for (int64_t d : dims) keep_shape[static_cast<size_t>(d)] = 1;
    CHECK(kept.shape() == keep_shape);
    require_close(kept.to_vector<double>(), reference_sum(x, dims));
    Tensor dropped = ops::sum(x, dims, false);
    CHECK(dropped.numel() == kept.numel());
    CHECK(dropped.dim() == static_cast<int64_t>(shape.size() - dims.size()));
    std::vector<double> means = reference_sum(x, dims);
    int64_t count = 1;
    for (int64_t d : dims) count *= shape[static_cast<size_t>(d)];
    for (double& m : means) m /= static_cast<double>(count);
    require_close(ops::mean(x, dims, false).to_vector<double>(), means);
  }
  // Negative dimensions count from the end; an empty list reduces everything, as in PyTorch.
  Tensor x = Tensor::uniform({2, 3, 4}, -1.0, 1.0, generator, DType::f64);
  require_close(ops::sum(x, {-1}).to_vector<double>(), reference_sum(x, {2}));
  CHECK(ops::sum(x, {}).shape() == Shape{});
}

TEST_CASE("large sums use the parallel paths and stay accurate in f32", "[ops]") {
  Generator generator(32);
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0, 2}, {1}, {0}, {2}}) {
    INFO("dims " << shape_str(dims));
    Tensor x = Tensor::uniform({64, 48, 33}, -1.0, 1.0, generator, DType::f32);
    require_close(ops::sum(x, dims, true).to_vector<double>(), reference_sum(x, dims), 1e-6);
  }
  // One million copies of 0.1f: float accumulation would drift by ~1e-3 relative; double does not.
  Tensor tenths = Tensor::full({1000, 1000}, 0.1, DType::f32);
  const double exact = 1e6 * static_cast<double>(0.1f);
  CHECK(std::fabs(ops::sum(tenths).item() - exact) <= 1e-6 * exact);
  CHECK(std::fabs(ops::sum(tenths, {0, 1}).item() - exact) <= 1e-6 * exact);
}

TEST_CASE("sum and mean gradients match finite differences", "[ops]") {
  Generator generator(33);
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::sum(in[0]); }, {random_leaf({3, 4}, generator)});
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::mean(in[0]); }, {random_leaf({2, 5}, generator)});
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{2, 3, 4}, {1}}, {{2, 3, 4}, {0, 2}}, {{3, 4}, {-1}}, {{2, 1, 3}, {1}}, {{5}, {0}}};
  for (const auto& [shape, dims] : cases) {
    for (bool keepdim : {false, true}) {
      INFO("shape " << shape_str(shape) << " dims " << shape_str(dims) << " keepdim " << keepdim);
      std::vector<int64_t> reduce = dims;
      require_gradcheck([=](const std::vector<Tensor>& in) { return ops::sum(in[0], reduce, keepdim); },
                        {random_leaf(shape, generator)});
      require_gradcheck([=](const std::vector<Tensor>& in) { return ops::mean(in[0], reduce, keepdim); },
                        {random_leaf(shape, generator)});
    }
  }
}

TEST_CASE("sum rejects bad dimensions and dtypes", "[ops]") {
  Tensor x = Tensor::zeros({2, 3});
  std::string message = require_throws<ShapeError>([&] { ops::sum(x, {2}); });
  CHECK_THAT(message, Catch::Contains("2") && Catch::Contains("[2, 3]"));
  message = require_throws<ShapeError>([&] { ops::mean(x, {1, -1}); });
  CHECK_THAT(message, Catch::Contains("twice") && Catch::Contains("[2, 3]"));
  message = require_throws<TypeError>([] { ops::sum(Tensor::zeros({4}, DType::i64)); });
  CHECK_THAT(message, Catch::Contains("i64"));
  // A 0-d tensor has no dimension to reduce over: the message said "(valid: 0 to -1)".
  message = require_throws<ShapeError>([] { ops::sum(Tensor::scalar(1.0), {0}); });
  CHECK(message == "sum: dimension 0 is out of range for shape [] (a 0-d tensor has no dimensions)");
}
