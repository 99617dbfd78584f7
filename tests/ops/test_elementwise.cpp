// Tests for the elementwise ops (src/ops/elementwise.cpp, src/ops/cpu/elementwise.cpp): broadcasting
// rules, forward values against a double reference, finite-difference gradients, relu's kink, errors,
// and add_relu: equal bit for bit to relu(add), its one gradient sent to both inputs without aliasing.
#include <functional>

#include "ops/op_test_helpers.h"
#include "opsnn/autograd/node.h"
#include "opsnn/ops/ops.h"
#include "support/bit_patterns.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

double apply(ops::BinaryOp op, double x, double y) {
  switch (op) {
    case ops::BinaryOp::add:
      return x + y;
    case ops::BinaryOp::sub:
      return x - y;
    case ops::BinaryOp::mul:
      return x * y;
    case ops::BinaryOp::div:
      return x / y;
  }
  return 0.0;
}

// a (op) b by explicit index arithmetic: each output index maps to an index of a and of b with
// broadcast dimensions pinned to 0.
std::vector<double> reference_binary(ops::BinaryOp op, const Tensor& a, const Tensor& b) {
  Shape out_shape = ops::broadcast_shapes(a.shape(), b.shape());
  std::vector<double> a_values = a.to_vector<double>(), b_values = b.to_vector<double>();
  auto source_index = [&](const Shape& shape, const Shape& index) {
    size_t leading = out_shape.size() - shape.size();
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : index[leading + d]);
    return static_cast<size_t>(flat);
  };
  std::vector<double> result(static_cast<size_t>(shape_numel(out_shape)));
  Shape index(out_shape.size(), 0);
  for (size_t flat = 0; flat < result.size(); ++flat) {
    int64_t remaining = static_cast<int64_t>(flat);
    for (size_t d = out_shape.size(); d-- > 0;) {
      index[d] = remaining % out_shape[d];
      remaining /= out_shape[d];
    }
    result[flat] = apply(op, a_values[source_index(a.shape(), index)], b_values[source_index(b.shape(), index)]);
  }
  return result;
}

Tensor run(ops::BinaryOp op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case ops::BinaryOp::add:
      return ops::add(a, b);
    case ops::BinaryOp::sub:
      return ops::sub(a, b);
    case ops::BinaryOp::mul:
      return ops::mul(a, b);
    case ops::BinaryOp::div:
      return ops::div(a, b);
  }
  return {};
}

const std::vector<std::pair<Shape, Shape>> kBroadcastCases = {
    {{3, 4}, {3, 4}}, {{2, 3, 4, 5}, {1, 3, 1, 1}}, {{3, 1}, {1, 4}}, {{}, {2, 3}}, {{2, 3}, {}},
    {{4}, {2, 3, 4}}, {{2, 1, 4}, {3, 1}},
};

const ops::BinaryOp kOps[] = {ops::BinaryOp::add, ops::BinaryOp::sub, ops::BinaryOp::mul, ops::BinaryOp::div};

}  // namespace

TEST_CASE("broadcast_shapes follows NumPy rules", "[ops]") {
  CHECK(ops::broadcast_shapes({3, 1}, {1, 4}) == Shape{3, 4});
  CHECK(ops::broadcast_shapes({2, 3, 4, 5}, {1, 3, 1, 1}) == Shape{2, 3, 4, 5});
  CHECK(ops::broadcast_shapes({}, {2, 3}) == Shape{2, 3});
  CHECK(ops::broadcast_shapes({5}, {2, 1, 5}) == Shape{2, 1, 5});
  CHECK(ops::broadcast_shapes({0}, {1}) == Shape{0});
  std::string message = require_throws<ShapeError>([] { ops::broadcast_shapes({2, 3}, {4}); });
  CHECK_THAT(message, Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
}

TEST_CASE("binary ops match a double reference under broadcasting", "[ops]") {
  Generator generator(11);
  for (ops::BinaryOp op : kOps) {
    for (const auto& [a_shape, b_shape] : kBroadcastCases) {
      Tensor a = Tensor::uniform(a_shape, -2.0, 2.0, generator, DType::f64);
      Tensor b = Tensor::uniform(b_shape, 0.5, 2.0, generator, DType::f64);
      INFO("op " << static_cast<int>(op) << " " << shape_str(a_shape) << " with " << shape_str(b_shape));
      Tensor out = run(op, a, b);
      CHECK(out.shape() == ops::broadcast_shapes(a_shape, b_shape));
      require_close(out.to_vector<double>(), reference_binary(op, a, b));
      // f32 goes through the same kernel: compare within single precision.
      require_close(run(op, a.to(DType::f32), b.to(DType::f32)).to_vector<double>(), reference_binary(op, a, b), 1e-6);
    }
  }
}

TEST_CASE("binary ops read strided and large inputs correctly", "[ops]") {
  Generator generator(12);
  // A transposed (non-contiguous) left operand broadcast against a row.
  Tensor base = Tensor::uniform({5, 3}, -1.0, 1.0, generator, DType::f64);
  Tensor transposed = base.transpose(0, 1);  // [3, 5], strides [1, 3]
  Tensor row = Tensor::uniform({5}, -1.0, 1.0, generator, DType::f64);
  require_close(ops::mul(transposed, row).to_vector<double>(),
                reference_binary(ops::BinaryOp::mul, transposed.contiguous(), row));
  // Large enough for the multi-threaded path, including one long contiguous row.
  Tensor big = Tensor::uniform({64, 1024}, -1.0, 1.0, generator, DType::f32);
  Tensor bias = Tensor::uniform({1024}, -1.0, 1.0, generator, DType::f32);
  require_close(ops::add(big, bias).to_vector<double>(), reference_binary(ops::BinaryOp::add, big, bias), 1e-7);
  Tensor other = Tensor::uniform({64, 1024}, -1.0, 1.0, generator, DType::f32);
  require_close(ops::sub(big, other).to_vector<double>(), reference_binary(ops::BinaryOp::sub, big, other), 1e-7);
}

TEST_CASE("binary op gradients match finite differences", "[ops]") {
  Generator generator(13);
  for (ops::BinaryOp op : kOps) {
    for (const auto& [a_shape, b_shape] : kBroadcastCases) {
      INFO("op " << static_cast<int>(op) << " " << shape_str(a_shape) << " with " << shape_str(b_shape));
      Tensor a = random_leaf(a_shape, generator);
      Tensor b = random_leaf(b_shape, generator, 0.5, 2.0);  // away from 0 for div
      require_gradcheck([op](const std::vector<Tensor>& in) { return run(op, in[0], in[1]); }, {a, b});
    }
  }
}

TEST_CASE("gradients accumulate when a tensor is used twice", "[ops]") {
  Tensor x = Tensor::from_vector<double>({1.5, -2.0, 3.0}, {3});
  x.set_requires_grad(true);
  ops::sum(ops::mul(x, x)).backward();
  require_close(x.grad().to_vector<double>(), {3.0, -4.0, 6.0});
  x.set_grad(Tensor());
  ops::sum(ops::add(ops::mul(x, x), x)).backward();  // d/dx (x^2 + x) = 2x + 1
  require_close(x.grad().to_vector<double>(), {4.0, -3.0, 7.0});
  Generator generator(14);
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return ops::div(in[0], ops::add(ops::mul(in[0], in[0]), in[1])); },
      {random_leaf({2, 3}, generator), random_leaf({3}, generator, 1.0, 2.0)});
}

TEST_CASE("only inputs that require grad receive one", "[ops]") {
  Generator generator(15);
  Tensor a = random_leaf({2, 3}, generator);
  Tensor constant = Tensor::uniform({2, 3}, 1.0, 2.0, generator, DType::f64);
  ops::sum(ops::div(a, constant)).backward();
  CHECK(a.grad().defined());
  CHECK_FALSE(constant.grad().defined());
  autograd::NoGradGuard no_grad;
  CHECK_FALSE(ops::mul(a, a).requires_grad());
}

TEST_CASE("scale multiplies values and gradients by the factor", "[ops]") {
  Tensor x = Tensor::from_vector<double>({1.0, -2.0}, {2});
  require_close(ops::scale(x, -0.5).to_vector<double>(), {-0.5, 1.0});
  Generator generator(16);
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::scale(in[0], 2.5); },
                    {random_leaf({3, 4}, generator)});
}

TEST_CASE("relu forward, gradient away from the kink, and the kink itself", "[ops]") {
  Tensor x = Tensor::from_vector<float>({-1.0f, 0.0f, 2.0f, NAN}, {4});
  std::vector<float> out = ops::relu(x).to_vector<float>();
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 0.0f);
  CHECK(out[2] == 2.0f);
  CHECK(std::isnan(out[3]));  // NaN propagates, as in PyTorch

  // Values at least 0.1 from 0 so finite differences never straddle the kink.
  Generator generator(17);
  std::vector<double> values = Tensor::uniform({4, 5}, -1.0, 1.0, generator, DType::f64).to_vector<double>();
  for (double& v : values) v += v < 0 ? -0.1 : 0.1;
  Tensor away = Tensor::from_vector<double>(values, {4, 5});
  away.set_requires_grad(true);
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::relu(in[0]); }, {away});

  // At exactly 0 the gradient is 0 (PyTorch's choice of subgradient).
  Tensor kink = Tensor::from_vector<double>({-0.5, 0.0, 0.5}, {3});
  kink.set_requires_grad(true);
  ops::sum(ops::relu(kink)).backward();
  require_close(kink.grad().to_vector<double>(), {0.0, 0.0, 1.0});
}

TEST_CASE("elementwise ops reject mismatched shapes, dtypes and devices", "[ops]") {
  Tensor a = Tensor::zeros({2, 3});
  std::string message = require_throws<ShapeError>([&] { ops::add(a, Tensor::zeros({4, 3})); });
  CHECK_THAT(message, Catch::Contains("add") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 3]"));
  message = require_throws<TypeError>([&] { ops::mul(a, Tensor::zeros({2, 3}, DType::f64)); });
  CHECK_THAT(message, Catch::Contains("mul") && Catch::Contains("f32") && Catch::Contains("f64"));
  if (Tensor on_gpu = zeros_on_gpu({2, 3}); on_gpu.defined()) {
    message = require_throws<DeviceError>([&] { ops::sub(a, on_gpu); });
    CHECK_THAT(message, Catch::Contains("sub") && Catch::Contains("cpu") && Catch::Contains("cuda:0"));
  }
  message = require_throws<TypeError>([] { ops::div(Tensor::zeros({2}, DType::i64), Tensor::ones({2}, DType::i64)); });
  CHECK_THAT(message, Catch::Contains("i64"));
  message = require_throws<TypeError>([] { ops::relu(Tensor::zeros({2}, DType::i32)); });
  CHECK_THAT(message, Catch::Contains("i32"));
}

TEST_CASE("add_relu gradients match finite differences, fused and broadcast", "[ops]") {
  Generator generator(18);
  // Same shapes (the fused kernel), then broadcasting (the relu(add) fallback).
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::add_relu(in[0], in[1]); },
                    {random_leaf({3, 4, 5}, generator), random_leaf({3, 4, 5}, generator)});
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::add_relu(in[0], in[1]); },
                    {random_leaf({2, 3, 4}, generator), random_leaf({3, 1}, generator)});
  // A non-contiguous operand also falls back.
  const Tensor strided = Tensor::uniform({4, 3}, -1.0, 1.0, generator, DType::f64).transpose(0, 1);
  const Tensor other = Tensor::uniform({3, 4}, -1.0, 1.0, generator, DType::f64);
  REQUIRE_FALSE(strided.is_contiguous());
  require_close(ops::add_relu(strided, other).to_vector<double>(),
                ops::relu(ops::add(strided, other)).to_vector<double>(), 0.0);
}

TEST_CASE("add_relu equals relu(add) bit for bit, forward and backward", "[ops]") {
  Generator generator(19);
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Shape& shape : {Shape{70001}, Shape{2, 3, 5}}) {
      const Tensor a_values = Tensor::normal(shape, 0.0, 1.0, generator, dtype);
      std::vector<double> b_list = Tensor::normal(shape, 0.0, 1.0, generator, DType::f64).to_vector<double>();
      const std::vector<double> a_list = a_values.to_vector<double>();
      for (size_t i = 0; i < b_list.size(); i += 5) b_list[i] = -a_list[i];  // sums of exactly 0: the kink
      const Tensor b_values = Tensor::from_vector<double>(b_list, shape).to(dtype);
      const Tensor upstream = Tensor::uniform(shape, -1.0, 1.0, generator, dtype);
      std::vector<Tensor> results;
      for (bool fused : {false, true}) {
        Tensor a = a_values.clone().set_requires_grad(true), b = b_values.clone().set_requires_grad(true);
        Tensor out = fused ? ops::add_relu(a, b) : ops::relu(ops::add(a, b));
        out.backward(upstream);
        results.insert(results.end(), {out.detach(), a.grad(), b.grad()});
      }
      const std::string what = shape_str(shape) + " " + std::string(dtype_name(dtype));
      require_same_bits(results[3], results[0], what + " out");
      require_same_bits(results[4], results[1], what + " grad a");
      require_same_bits(results[5], results[2], what + " grad b");
    }
  }
}

TEST_CASE("add_relu sends one gradient to both inputs without the inputs' gradients aliasing", "[ops]") {
  const Tensor upstream = Tensor::from_vector<double>({1.0, 2.0, 3.0, 4.0}, {4});
  // The same tensor twice: 2 * mask * g.
  Tensor x = Tensor::from_vector<double>({1.0, -1.0, 0.5, -0.25}, {4});
  x.set_requires_grad(true);
  ops::add_relu(x, x).backward(upstream);
  require_close(x.grad().to_vector<double>(), {2.0, 0.0, 6.0, 0.0});

  // Two leaves: their gradients are separate buffers (a later in-place step on one leaves the other).
  Tensor a = Tensor::from_vector<double>({1.0, -2.0, 0.5, 3.0}, {4}).set_requires_grad(true);
  Tensor b = Tensor::from_vector<double>({1.0, 1.0, -1.0, -4.0}, {4}).set_requires_grad(true);
  ops::add_relu(a, b).backward(upstream);
  REQUIRE(a.grad().storage() != b.grad().storage());
  a.grad().add_(Tensor::ones({4}, DType::f64));
  require_close(b.grad().to_vector<double>(), {1.0, 0.0, 0.0, 0.0});
  ops::add_relu(a, b).backward(upstream);  // accumulates into both
  require_close(a.grad().to_vector<double>(), {3.0, 1.0, 1.0, 1.0});
  require_close(b.grad().to_vector<double>(), {2.0, 0.0, 0.0, 0.0});

  // Through nodes, with one input's node receiving a second gradient that the engine sums into the
  // first: p = 2x gets mask * g + g, q = 3x gets mask * g, so grad x = 2 (mask g + g) + 3 mask g.
  Tensor leaf = Tensor::from_vector<double>({1.0, -1.0, 0.5, -0.25}, {4}).set_requires_grad(true);
  Tensor p = ops::scale(leaf, 2.0), q = ops::scale(leaf, 3.0);
  ops::add(ops::add_relu(p, q), p).backward(upstream);
  require_close(leaf.grad().to_vector<double>(), {5.0 + 2.0, 4.0, 15.0 + 6.0, 8.0});
}
