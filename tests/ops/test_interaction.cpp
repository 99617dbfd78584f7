// Tests for dot_interaction (src/ops/interaction.cpp, src/ops/cpu/interaction.cpp) and concat
// (src/ops/shape.cpp): values against a direct computation, the pair order, finite-difference gradients
// in f64, the degenerate shapes and the argument errors.
#include <cmath>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/core/error.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

TEST_CASE("dot_interaction gives the lower triangle of x x^T row by row", "[ops]") {
  // Sample 0: vectors a = (1, 2), b = (3, 4), c = (5, -6); sample 1 their doubles.
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, -6, 2, 4, 6, 8, 10, -12}, {2, 3, 2});
  Tensor out = ops::dot_interaction(x);
  REQUIRE(out.shape() == Shape{2, 3});
  // (b, a), (c, a), (c, b)
  CHECK(out.to_vector<float>() == std::vector<float>{11, -7, -9, 44, -28, -36});
}

TEST_CASE("dot_interaction matches a direct sum for every pair", "[ops]") {
  Generator generator(71);
  const int64_t batch = 3, features = 7, width = 5;
  Tensor x = Tensor::uniform({batch, features, width}, -1.0, 1.0, generator, DType::f64);
  const std::vector<double> values = x.to_vector<double>();
  const std::vector<double> out = ops::dot_interaction(x).to_vector<double>();
  REQUIRE(out.size() == static_cast<size_t>(batch * features * (features - 1) / 2));
  size_t position = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 1; i < features; ++i)
      for (int64_t j = 0; j < i; ++j) {
        double expected = 0.0;
        for (int64_t d = 0; d < width; ++d)
          expected += values[static_cast<size_t>((b * features + i) * width + d)] *
                      values[static_cast<size_t>((b * features + j) * width + d)];
        INFO("sample " << b << " pair (" << i << ", " << j << ")");
        CHECK(std::fabs(out[position++] - expected) <= 1e-14);
      }
}

TEST_CASE("dot_interaction gradients match finite differences in f64", "[ops]") {
  Generator generator(72);
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::dot_interaction(in[0]); },
                    {random_leaf({3, 5, 4}, generator)});
  // DLRM's shape on a small width: 27 vectors (the bottom MLP output and 26 embeddings) per sample.
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::dot_interaction(in[0]); },
                    {random_leaf({2, 27, 3}, generator)});
  // Through a function of the output, so the upstream gradient is not uniform.
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::mul(ops::dot_interaction(in[0]), in[1]); },
                    {random_leaf({2, 4, 3}, generator), random_leaf({2, 6}, generator)});
}

TEST_CASE("dot_interaction with one feature has no pairs and a zero gradient", "[ops]") {
  Tensor x = Tensor::ones({4, 1, 3}, DType::f64);
  x.set_requires_grad(true);
  Tensor out = ops::dot_interaction(x);
  CHECK(out.shape() == Shape{4, 0});
  ops::sum(out).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().to_vector<double>() == std::vector<double>(12, 0.0));
  CHECK(ops::dot_interaction(Tensor::zeros({0, 5, 2})).shape() == Shape{0, 10});
}

TEST_CASE("dot_interaction refuses inputs that are not [batch features dim] floats", "[ops]") {
  CHECK_THROWS_AS(ops::dot_interaction(Tensor::zeros({3, 4})), ShapeError);
  CHECK_THROWS_WITH(ops::dot_interaction(Tensor::zeros({3, 4})), Catch::Contains("[batch, features, dim]"));
  CHECK_THROWS_AS(ops::dot_interaction(Tensor::zeros({2, 3, 4}, DType::i64)), TypeError);
}

TEST_CASE("concat joins along any dimension and splits the gradient back", "[ops]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 1, 2});
  Tensor b = Tensor::from_vector<float>({5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 2});
  Tensor joined = ops::concat({a, b}, 1);
  REQUIRE(joined.shape() == Shape{2, 3, 2});
  CHECK(joined.to_vector<float>() == std::vector<float>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12});
  CHECK(ops::concat({a, a}, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4});
  CHECK(ops::concat({a, a}, -1).shape() == Shape{2, 1, 4});
  CHECK(ops::concat({a, a}, -1).to_vector<float>() == std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4});

  Generator generator(73);
  for (int64_t dim : {0, 1, 2, -1}) {
    INFO("dim " << dim);
    Shape small{2, 3, 4}, large{2, 3, 4};
    const int64_t axis = dim < 0 ? dim + 3 : dim;
    small[static_cast<size_t>(axis)] = 1;
    large[static_cast<size_t>(axis)] = 3;
    require_gradcheck(
        [dim](const std::vector<Tensor>& in) {
          return ops::concat({in[0], in[1], in[2]}, dim);
        },
        {random_leaf(small, generator), random_leaf({2, 3, 4}, generator), random_leaf(large, generator)});
  }
}

TEST_CASE("concat leaves inputs without requires_grad alone and refuses pieces that do not line up", "[ops]") {
  Generator generator(74);
  Tensor constant = Tensor::uniform({2, 3}, -1.0, 1.0, generator, DType::f64);
  Tensor leaf = random_leaf({2, 1}, generator);
  ops::sum(ops::concat({constant, leaf}, 1)).backward();
  CHECK_FALSE(constant.grad().defined());
  CHECK(leaf.grad().to_vector<double>() == std::vector<double>{1, 1});

  CHECK_THROWS_WITH(ops::concat({}, 0), Catch::Contains("no tensors"));
  CHECK_THROWS_WITH(ops::concat({Tensor::zeros({2, 3}), Tensor::zeros({3, 3})}, 1),
                    Catch::Contains("tensor 1 [3, 3] does not line up with tensor 0 [2, 3] outside dimension 1"));
  CHECK_THROWS_AS(ops::concat({Tensor::zeros({2, 3}), Tensor::zeros({2, 3, 1})}, 0), ShapeError);
  CHECK_THROWS_AS(ops::concat({Tensor::zeros({2, 3}), Tensor::zeros({2, 3})}, 2), ShapeError);
  CHECK_THROWS(ops::concat({Tensor::zeros({2, 3}), Tensor::zeros({2, 3}, DType::f64)}, 0));
  CHECK_THROWS_AS(ops::concat({Tensor::scalar(1.0)}, 0), ShapeError);
}
