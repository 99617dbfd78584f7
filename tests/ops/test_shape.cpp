// Tests for reshape, flatten, permute and slice (src/ops/shape.cpp): resulting shapes and element order, storage
// sharing, non-contiguous inputs, gradients and errors.
#include "ops/op_test_helpers.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

TEST_CASE("reshape keeps element order and infers one -1", "[ops]") {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor y = ops::reshape(x, {3, -1});
  CHECK(y.shape() == Shape{3, 2});
  CHECK(y.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(y.data_ptr() == x.data_ptr());  // a contiguous input is viewed, not copied
  CHECK(ops::reshape(x, {-1}).shape() == Shape{6});
  CHECK(ops::reshape(Tensor::zeros({0, 4}), {-1, 2}).shape() == Shape{0, 2});
  // A non-contiguous input is read in its logical order.
  Tensor transposed = x.transpose(0, 1);  // [[0, 3], [1, 4], [2, 5]]
  CHECK(ops::reshape(transposed, {6}).to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("flatten merges a range of dimensions", "[ops]") {
  Tensor x = Tensor::zeros({2, 3, 4, 5});
  CHECK(ops::flatten(x).shape() == Shape{2, 60});
  CHECK(ops::flatten(x, 0, -1).shape() == Shape{120});
  CHECK(ops::flatten(x, 1, 2).shape() == Shape{2, 12, 5});
  CHECK(ops::flatten(x, -2, -1).shape() == Shape{2, 3, 20});
  CHECK(ops::flatten(x, 2, 2).shape() == Shape{2, 3, 4, 5});
  CHECK(ops::flatten(Tensor::scalar(3.0), 0, -1).shape() == Shape{1});
}

TEST_CASE("reshape and flatten gradients match finite differences", "[ops]") {
  Generator generator(41);
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::reshape(in[0], {4, -1});
      },
      {random_leaf({2, 3, 2}, generator)});
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::flatten(in[0]); },
                    {random_leaf({2, 3, 2}, generator)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor flat = ops::reshape(in[0], {-1});
        return ops::mul(flat, flat);
      },
      {random_leaf({3, 4}, generator)});
}

TEST_CASE("reshape of a non-contiguous leaf sends gradients back in logical order", "[ops]") {
  Tensor leaf = Tensor::from_vector<double>({0, 1, 2, 3, 4, 5}, {2, 3}).transpose(0, 1);  // [3, 2]
  leaf.set_requires_grad(true);
  Tensor weights = Tensor::from_vector<double>({10, 20, 30, 40, 50, 60}, {6});
  ops::sum(ops::mul(ops::reshape(leaf, {6}), weights)).backward();
  REQUIRE(leaf.grad().shape() == Shape{3, 2});
  require_close(leaf.grad().to_vector<double>(), {10, 20, 30, 40, 50, 60});
}

TEST_CASE("reshape and flatten reject impossible shapes", "[ops]") {
  Tensor x = Tensor::zeros({2, 3});
  std::string message = require_throws<ShapeError>([&] { ops::reshape(x, {4}); });
  CHECK_THAT(message, Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
  message = require_throws<ShapeError>([&] { ops::reshape(x, {-1, -1}); });
  CHECK_THAT(message, Catch::Contains("-1"));
  message = require_throws<ShapeError>([&] { ops::reshape(x, {4, -1}); });
  CHECK_THAT(message, Catch::Contains("[2, 3]") && Catch::Contains("[4, -1]"));
  message = require_throws<ShapeError>([&] { ops::flatten(x, 1, 0); });
  CHECK_THAT(message, Catch::Contains("[2, 3]"));
  message = require_throws<ShapeError>([&] { ops::flatten(x, 0, 2); });
  CHECK_THAT(message, Catch::Contains("[2, 3]"));
  // A 0-d tensor takes dims 0 and -1 only (as in PyTorch); other dims were ignored and gave [1].
  const Tensor scalar = Tensor::scalar(3.0);
  CHECK(ops::flatten(scalar, -1, 0).shape() == Shape{1});
  message = require_throws<ShapeError>([&] { ops::flatten(scalar, 5, 7); });
  CHECK(message == "flatten: dimension 5 is out of range for a 0-d tensor (valid: 0 or -1)");
  message = require_throws<ShapeError>([&] { ops::flatten(scalar, 0, -2); });
  CHECK_THAT(message, Catch::Contains("dimension -2"));
}

TEST_CASE("cast_from_copy returns the copy's values and sends cast's gradient to the source", "[ops]") {
  Generator generator(31);
  Tensor master = Tensor::uniform({3, 4}, -2.0, 2.0, generator, DType::f32).set_requires_grad(true);
  const Tensor copy = master.to(DType::f64);  // what cast(master, f64) gives, held by the caller
  const Tensor out = ops::cast_from_copy(master, copy);
  REQUIRE(out.dtype() == DType::f64);
  CHECK(out.to_vector<double>() == copy.to_vector<double>());
  CHECK(out.data_ptr() == copy.data_ptr());  // no conversion ran: the copy's own data
  CHECK_FALSE(out.same(copy));               // a handle of its own carries the graph
  CHECK(copy.grad_fn() == nullptr);
  out.backward(Tensor::full({3, 4}, 2.5, DType::f64));
  REQUIRE(master.grad().dtype() == DType::f32);
  for (float value : master.grad().to_vector<float>()) CHECK(value == 2.5f);

  // Without autograd it is the copy's data with no history; bad pairs are refused.
  CHECK(ops::cast_from_copy(master.detach(), copy).grad_fn() == nullptr);
  std::string message = require_throws<ShapeError>([&] { ops::cast_from_copy(master, copy.view({4, 3})); });
  CHECK(message.find("cast_from_copy") != std::string::npos);
  message = require_throws<TypeError>([&] { ops::cast_from_copy(master, Tensor::zeros({3, 4}, DType::i64)); });
  CHECK(message.find("cast_from_copy") != std::string::npos);
}

TEST_CASE("permute reorders dimensions into a contiguous tensor", "[ops]") {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {1, 2, 3});
  Tensor y = ops::permute(x, {2, 0, 1});
  CHECK(y.shape() == Shape{3, 1, 2});
  CHECK(y.is_contiguous());
  CHECK(y.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(ops::permute(x, {-1, -3, -2}).to_vector<float>() == y.to_vector<float>());
  // NCHW -> NHWC -> NCHW is the identity.
  Generator generator(7);
  Tensor image = Tensor::uniform({2, 3, 4, 5}, -1.0, 1.0, generator);
  Tensor nhwc = ops::permute(image, {0, 2, 3, 1});
  CHECK(nhwc.shape() == Shape{2, 4, 5, 3});
  CHECK(ops::permute(nhwc, {0, 3, 1, 2}).to_vector<float>() == image.to_vector<float>());
  // The identity order still gives a tensor of its own.
  Tensor same = ops::permute(x, {0, 1, 2});
  CHECK_FALSE(same.same(x));
}

TEST_CASE("permute gradients match finite differences", "[ops]") {
  Generator generator(43);
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::permute(in[0], {0, 2, 3, 1});
      },
      {random_leaf({2, 3, 2, 4}, generator)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor moved = ops::permute(in[0], {1, 0, 2});
        return ops::mul(moved, moved);
      },
      {random_leaf({3, 2, 2}, generator)});
}

TEST_CASE("permute rejects orders that are not permutations", "[ops]") {
  Tensor x = Tensor::zeros({2, 3, 4});
  std::string message = require_throws<ShapeError>([&] { ops::permute(x, {0, 1}); });
  CHECK_THAT(message, Catch::Contains("permute") && Catch::Contains("[0, 1]") && Catch::Contains("[2, 3, 4]"));
  message = require_throws<ShapeError>([&] { ops::permute(x, {0, 1, 1}); });
  CHECK_THAT(message, Catch::Contains("twice") && Catch::Contains("[0, 1, 1]"));
  message = require_throws<ShapeError>([&] { ops::permute(x, {0, 1, 3}); });
  CHECK_THAT(message, Catch::Contains("permute") && Catch::Contains("3"));
}

TEST_CASE("slice copies rows of the first dimension and sends their gradient back into zeros", "[ops]") {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  Tensor rows = ops::slice(x, 1, 3);
  CHECK(rows.shape() == Shape{2, 2});
  CHECK(rows.to_vector<float>() == std::vector<float>{2, 3, 4, 5});
  CHECK(ops::slice(x, 2, 2).shape() == Shape{0, 2});
  // A non-contiguous input is read in its logical order: rows of the transpose [[0, 2, 4, 6], [1, 3, 5, 7]].
  CHECK(ops::slice(x.transpose(0, 1), 1, 2).to_vector<float>() == std::vector<float>{1, 3, 5, 7});

  Tensor leaf = Tensor::from_vector<double>({1, 2, 3, 4, 5}, {5});
  leaf.set_requires_grad(true);
  ops::sum(ops::mul(ops::slice(leaf, 1, 4), Tensor::from_vector<double>({10, 20, 30}, {3}))).backward();
  require_close(leaf.grad().to_vector<double>(), {0, 10, 20, 30, 0});

  Generator generator(43);
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor part = ops::slice(in[0], 1, 3);
        return ops::mul(part, part);
      },
      {random_leaf({4, 3, 2}, generator)});
  // Two slices of one tensor: both gradients reach it.
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return ops::mul(ops::slice(in[0], 0, 3), ops::slice(in[0], 3, 6)); },
      {random_leaf({6}, generator)});
}

TEST_CASE("slice rejects ranges outside the first dimension and 0-d tensors", "[ops]") {
  Tensor x = Tensor::zeros({4, 2});
  CHECK(require_throws<ShapeError>([&] { ops::slice(x, 3, 5); }) ==
        "slice: rows [3, 5) are out of range for [4, 2] (4 rows)");
  CHECK_THAT(require_throws<ShapeError>([&] { ops::slice(x, 3, 2); }), Catch::Contains("[3, 2)"));
  CHECK_THAT(require_throws<ShapeError>([&] { ops::slice(x, -1, 2); }), Catch::Contains("[-1, 2)"));
  CHECK_THAT(require_throws<ShapeError>([&] { ops::slice(Tensor::scalar(1.0), 0, 1); }), Catch::Contains("0-d tensor"));
}
