// Tests for embedding (src/ops/embedding.cpp, src/ops/cpu/embedding.cpp): lookups for index tensors of
// any shape, dense backward with duplicate indices, row-sparse gradients, determinism, errors.
#include "ops/op_test_helpers.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

Tensor indices_of(const std::vector<int64_t>& values, const Shape& shape) {
  return Tensor::from_vector<int64_t>(values, shape);
}

// The dense [V, D] table gradient that a RowSparseGrad stands for (duplicates add up).
std::vector<double> densify(const RowSparseGrad& sparse, int64_t table_rows, int64_t width) {
  std::vector<double> dense(static_cast<size_t>(table_rows * width), 0.0);
  for (size_t part = 0; part < sparse.indices.size(); ++part) {
    std::vector<int64_t> rows = sparse.indices[part].to_vector<int64_t>();
    std::vector<double> values = sparse.rows[part].to_vector<double>();
    REQUIRE(sparse.rows[part].shape() == Shape{static_cast<int64_t>(rows.size()), width});
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t k = 0; k < width; ++k) dense[rows[i] * width + k] += values[i * width + k];
  }
  return dense;
}

}  // namespace

TEST_CASE("embedding gathers rows for indices of any shape", "[ops]") {
  Tensor weight = Tensor::from_vector<float>({0, 1, 10, 11, 20, 21, 30, 31, 40, 41}, {5, 2});
  Tensor out = ops::embedding(weight, indices_of({0, 4, 4, 2}, {2, 2}));
  CHECK(out.shape() == Shape{2, 2, 2});
  CHECK(out.to_vector<float>() == std::vector<float>{0, 1, 40, 41, 40, 41, 20, 21});
  CHECK(ops::embedding(weight, indices_of({3}, {})).shape() == Shape{2});
  CHECK(ops::embedding(weight, indices_of({}, {0})).shape() == Shape{0, 2});
}

TEST_CASE("embedding dense backward adds duplicate rows", "[ops]") {
  Tensor weight = Tensor::zeros({4, 2}, DType::f64);
  weight.set_requires_grad(true);
  ops::sum(ops::embedding(weight, indices_of({1, 1, 3, 1}, {4}))).backward();
  require_close(weight.grad().to_vector<double>(), {0, 0, 3, 3, 0, 0, 1, 1});
  Generator generator(61);
  Tensor indices = indices_of({2, 0, 2, 2, 4, 0}, {2, 3});
  require_gradcheck([&](const std::vector<Tensor>& in) { return ops::embedding(in[0], indices); },
                    {random_leaf({5, 3}, generator)});
}

TEST_CASE("sparse and dense embedding gradients agree", "[ops]") {
  Generator generator(62);
  Tensor dense_table = random_leaf({6, 3}, generator);
  Tensor sparse_table = dense_table.detach().clone();
  sparse_table.set_requires_grad(true).set_sparse_grad(true);
  Tensor upstream = Tensor::uniform({2, 4, 3}, -1.0, 1.0, generator, DType::f64);
  Tensor indices = indices_of({5, 1, 1, 0, 5, 5, 2, 1}, {2, 4});
  for (int pass = 0; pass < 2; ++pass) {  // the second pass appends; the dense gradient accumulates
    ops::embedding(dense_table, indices).backward(upstream);
    ops::embedding(sparse_table, indices).backward(upstream);
  }
  CHECK_FALSE(sparse_table.grad().defined());
  const RowSparseGrad& sparse = sparse_table.row_sparse_grad();
  REQUIRE(sparse.indices.size() == 2);
  CHECK(sparse.indices[0].shape() == Shape{8});
  CHECK(sparse.indices[0].to_vector<int64_t>() == std::vector<int64_t>{5, 1, 1, 0, 5, 5, 2, 1});
  require_close(densify(sparse, 6, 3), dense_table.grad().to_vector<double>());
  // The stored pieces are private copies: refilling the caller's buffers does not change them.
  indices.fill_(0);
  upstream.fill_(0.0);
  require_close(densify(sparse, 6, 3), dense_table.grad().to_vector<double>());
}

TEST_CASE("a large dense embedding backward is deterministic and exact", "[ops]") {
  Generator generator(63);
  const int64_t lookups = 40000, table_rows = 50, width = 16;
  std::vector<int64_t> values(lookups);
  for (int64_t& v : values) v = static_cast<int64_t>(generator.next_below(table_rows));
  Tensor indices = indices_of(values, {lookups});
  Tensor upstream = Tensor::uniform({lookups, width}, -1.0, 1.0, generator, DType::f32);
  auto table_grad = [&] {
    Tensor weight = Tensor::zeros({table_rows, width});
    weight.set_requires_grad(true);
    ops::embedding(weight, indices).backward(upstream);
    return weight.grad().to_vector<float>();
  };
  std::vector<float> first = table_grad();
  CHECK(first == table_grad());  // bitwise: the summation order is fixed
  std::vector<double> expected(table_rows * width, 0.0);
  std::vector<float> rows = upstream.to_vector<float>();
  for (int64_t i = 0; i < lookups; ++i)
    for (int64_t k = 0; k < width; ++k) expected[values[i] * width + k] += rows[i * width + k];
  std::vector<double> actual(first.begin(), first.end());
  require_close(actual, expected, 1e-4);
}

TEST_CASE("embedding rejects bad indices, shapes, dtypes and devices", "[ops]") {
  Tensor weight = Tensor::zeros({5, 2});
  std::string message = require_throws<ShapeError>([&] { ops::embedding(weight, indices_of({1, 9}, {2})); });
  CHECK_THAT(message, Catch::Contains("index 9") && Catch::Contains("5 rows"));
  message = require_throws<ShapeError>([&] { ops::embedding(weight, indices_of({-2}, {1})); });
  CHECK_THAT(message, Catch::Contains("index -2") && Catch::Contains("5 rows"));
  // An empty table: no "(valid: 0 to -1)".
  message = require_throws<ShapeError>([&] { ops::embedding(Tensor::zeros({0, 2}), indices_of({0}, {1})); });
  CHECK_THAT(message, Catch::EndsWith("is out of range for a table of 0 rows (an empty table has no valid index)"));
  message = require_throws<TypeError>([&] { ops::embedding(weight, Tensor::zeros({2}, DType::i32)); });
  CHECK_THAT(message, Catch::Contains("i64") && Catch::Contains("i32"));
  message = require_throws<ShapeError>([&] { ops::embedding(Tensor::zeros({5}), indices_of({1}, {1})); });
  CHECK_THAT(message, Catch::Contains("[5]"));
  if (Tensor on_gpu = zeros_on_gpu({2}, DType::i64); on_gpu.defined()) {
    message = require_throws<DeviceError>([&] { ops::embedding(weight, on_gpu); });
    CHECK_THAT(message, Catch::Contains("cpu") && Catch::Contains("cuda:0"));
  }
  message = require_throws<TypeError>([&] { ops::embedding(Tensor::zeros({5, 2}, DType::i32), indices_of({1}, {1})); });
  CHECK_THAT(message, Catch::Contains("i32"));
}
