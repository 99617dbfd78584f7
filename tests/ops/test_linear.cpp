// Tests for matmul and linear (src/ops/linear.cpp) and the CPU gemm kernel (src/ops/cpu/gemm.cpp):
// values against hand and double references, finite-difference gradients, transposed views, errors.
#include <array>
#include <utility>

#include "ops/op_test_helpers.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

// [M, K] x [K, N] by triple loop in double.
std::vector<double> reference_matmul(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  const int64_t rows = a.size(0), inner = a.size(1), cols = b.size(1);
  std::vector<double> out(static_cast<size_t>(rows * cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < inner; ++k)
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] += x[i * inner + k] * y[k * cols + j];
  return out;
}

}  // namespace

TEST_CASE("matmul computes a hand-checked product", "[ops]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor out = ops::matmul(a, b);
  CHECK(out.shape() == Shape{2, 2});
  require_close(out.to_vector<double>(), {58, 64, 139, 154});
}

TEST_CASE("matmul matches a double reference in f32, transposed views included", "[ops]") {
  Generator generator(21);
  Tensor a = Tensor::uniform({64, 80}, -1.0, 1.0, generator, DType::f32);
  Tensor b = Tensor::uniform({80, 48}, -1.0, 1.0, generator, DType::f32);
  require_close(ops::matmul(a, b).to_vector<double>(), reference_matmul(a, b), 1e-5);
  // Transposed views go to gemm as flags; a sliced (non-contiguous, non-transposed) view is copied.
  Tensor a_t = Tensor::uniform({80, 64}, -1.0, 1.0, generator, DType::f32).transpose(0, 1);
  Tensor b_t = Tensor::uniform({48, 80}, -1.0, 1.0, generator, DType::f32).transpose(0, 1);
  require_close(ops::matmul(a_t, b_t).to_vector<double>(), reference_matmul(a_t.contiguous(), b_t.contiguous()), 1e-5);
  Tensor sliced = Tensor::uniform({64, 100}, -1.0, 1.0, generator, DType::f32).slice(1, 10, 90);
  require_close(ops::matmul(sliced, b).to_vector<double>(), reference_matmul(sliced.contiguous(), b), 1e-5);
}

TEST_CASE("gemm kernel honours transpose flags, alpha and beta", "[ops]") {
  Tensor a = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});  // used transposed: [2, 3]
  Tensor b = Tensor::from_vector<double>({1, 0, 2, 1, 0, 1}, {2, 3});  // used transposed: [3, 2]
  Tensor out = Tensor::from_vector<double>({1, 1, 1, 1}, {2, 2});
  ops::backend_for(kCPU).gemm(a, true, b, true, out, 2.0, 0.5);
  // a^T = [[1,3,5],[2,4,6]], b^T = [[1,1],[0,0],[2,1]]: a^T b^T = [[11, 6], [14, 8]]
  require_close(out.to_vector<double>(), {22.5, 12.5, 28.5, 16.5});
  Tensor bad = Tensor::zeros({3, 3}, DType::f64);
  CHECK_THROWS_AS(ops::backend_for(kCPU).gemm(a, true, b, true, bad, 1.0, 0.0), ShapeError);
}

TEST_CASE("matmul gradients match finite differences", "[ops]") {
  Generator generator(22);
  const std::vector<std::array<int64_t, 3>> sizes = {{1, 1, 1}, {3, 4, 5}, {6, 2, 3}, {4, 7, 1}};
  for (const auto& [m, k, n] : sizes) {
    INFO(m << "x" << k << "x" << n);
    require_gradcheck([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
                      {random_leaf({m, k}, generator), random_leaf({k, n}, generator)});
  }
  Tensor x = random_leaf({3, 3}, generator);
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[0]); }, {x});
}

TEST_CASE("linear computes x W^T + b for 1-D, 2-D and 3-D inputs", "[ops]") {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2});
  Tensor w = Tensor::from_vector<double>({1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor b = Tensor::from_vector<double>({10, 20, 30}, {3});
  require_close(ops::linear(x, w, b).to_vector<double>(), {11, 22, 33, 13, 24, 37});
  require_close(ops::linear(x, w, Tensor()).to_vector<double>(), {1, 2, 3, 3, 4, 7});
  Tensor single = Tensor::from_vector<double>({1, 2}, {2});
  Tensor out = ops::linear(single, w, b);
  CHECK(out.shape() == Shape{3});
  require_close(out.to_vector<double>(), {11, 22, 33});
  Generator generator(23);
  Tensor batch = Tensor::uniform({2, 3, 2}, -1.0, 1.0, generator, DType::f64);
  Tensor batched = ops::linear(batch, w, b);
  CHECK(batched.shape() == Shape{2, 3, 3});
  require_close(batched.to_vector<double>(), ops::linear(batch.contiguous().view({6, 2}), w, b).to_vector<double>());
  // One input row: the bias must be copied, not written through (gemm accumulates onto it).
  ops::linear(Tensor::from_vector<double>({1, 1}, {1, 2}), w, b);
  require_close(b.to_vector<double>(), {10, 20, 30});
}

TEST_CASE("linear gradients match finite differences", "[ops]") {
  Generator generator(24);
  auto with_bias = [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); };
  auto without_bias = [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], Tensor()); };
  for (const Shape& input_shape : std::vector<Shape>{{4, 3}, {1, 3}, {2, 3, 3}, {3}}) {
    INFO("input " << shape_str(input_shape));
    require_gradcheck(
        with_bias, {random_leaf(input_shape, generator), random_leaf({5, 3}, generator), random_leaf({5}, generator)});
    require_gradcheck(without_bias, {random_leaf(input_shape, generator), random_leaf({2, 3}, generator)});
  }
  // A weight that does not need a gradient.
  Tensor frozen = Tensor::uniform({4, 3}, -1.0, 1.0, generator, DType::f64);
  require_gradcheck([&](const std::vector<Tensor>& in) { return ops::linear(in[0], frozen, in[1]); },
                    {random_leaf({6, 3}, generator), random_leaf({4}, generator)});
}

namespace {

// A leaf that is the transpose of a contiguous matrix (gemm takes it with a transpose flag), and a
// contiguous leaf with the same values (the path the finite-difference checks cover).
std::pair<Tensor, Tensor> transposed_and_contiguous_leaves(int64_t rows, int64_t cols, Generator& generator) {
  Tensor transposed = Tensor::uniform({cols, rows}, -1.0, 1.0, generator, DType::f64).transpose(0, 1);
  Tensor contiguous = transposed.contiguous();
  transposed.set_requires_grad(true);
  contiguous.set_requires_grad(true);
  return {transposed, contiguous};
}

}  // namespace

TEST_CASE("transposed leaves get the same values and gradients as contiguous ones", "[ops]") {
  Generator generator(25);
  auto [a_t, a] = transposed_and_contiguous_leaves(4, 5, generator);
  auto [b_t, b] = transposed_and_contiguous_leaves(5, 3, generator);
  REQUIRE_FALSE(a_t.is_contiguous());
  Tensor grad_out = Tensor::uniform({4, 3}, -1.0, 1.0, generator, DType::f64);
  Tensor out_t = ops::matmul(a_t, b_t);
  Tensor out = ops::matmul(a, b);
  require_close(out_t.to_vector<double>(), out.to_vector<double>());
  out_t.backward(grad_out);
  out.backward(grad_out);
  require_close(a_t.grad().to_vector<double>(), a.grad().to_vector<double>());
  require_close(b_t.grad().to_vector<double>(), b.grad().to_vector<double>());

  auto [x_t, x] = transposed_and_contiguous_leaves(6, 4, generator);
  auto [w_t, w] = transposed_and_contiguous_leaves(3, 4, generator);
  Tensor bias = random_leaf({3}, generator);
  Tensor linear_grad = Tensor::uniform({6, 3}, -1.0, 1.0, generator, DType::f64);
  Tensor y_t = ops::linear(x_t, w_t, bias);
  Tensor y = ops::linear(x, w, bias);
  require_close(y_t.to_vector<double>(), y.to_vector<double>());
  y_t.backward(linear_grad);
  y.backward(linear_grad);
  require_close(x_t.grad().to_vector<double>(), x.grad().to_vector<double>());
  require_close(w_t.grad().to_vector<double>(), w.grad().to_vector<double>());
}

TEST_CASE("matmul and linear reject mismatched shapes, dtypes and devices", "[ops]") {
  std::string message = require_throws<ShapeError>([] { ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); });
  CHECK_THAT(message, Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]"));
  message = require_throws<ShapeError>([] { ops::matmul(Tensor::zeros({2, 3, 1}), Tensor::zeros({3, 5})); });
  CHECK_THAT(message, Catch::Contains("[2, 3, 1]") && Catch::Contains("[3, 5]"));
  message = require_throws<TypeError>([] { ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 5}, DType::f64)); });
  CHECK_THAT(message, Catch::Contains("f32") && Catch::Contains("f64"));
  if (Tensor on_gpu = zeros_on_gpu({3, 5}); on_gpu.defined()) {
    message = require_throws<DeviceError>([&] { ops::matmul(Tensor::zeros({2, 3}), on_gpu); });
    CHECK_THAT(message, Catch::Contains("cpu") && Catch::Contains("cuda:0"));
  }
  message = require_throws<TypeError>([] {
    ops::matmul(Tensor::zeros({2, 3}, DType::i32), Tensor::zeros({3, 5}, DType::i32));
  });
  CHECK_THAT(message, Catch::Contains("i32"));

  Tensor w = Tensor::zeros({5, 7});
  message = require_throws<ShapeError>([&] { ops::linear(Tensor::zeros({4, 3}), w, Tensor()); });
  CHECK_THAT(message, Catch::Contains("[4, 3]") && Catch::Contains("[5, 7]"));
  message = require_throws<ShapeError>([&] { ops::linear(Tensor::zeros({4, 7}), w, Tensor::zeros({4})); });
  CHECK_THAT(message, Catch::Contains("[4]") && Catch::Contains("[5, 7]"));
  message = require_throws<TypeError>([&] { ops::linear(Tensor::zeros({4, 7}), w, Tensor::zeros({5}, DType::f64)); });
  CHECK_THAT(message, Catch::Contains("f32") && Catch::Contains("f64"));
  if (Tensor on_gpu = zeros_on_gpu({4, 7}); on_gpu.defined()) {
    message = require_throws<DeviceError>([&] { ops::linear(on_gpu, w, Tensor()); });
    CHECK_THAT(message, Catch::Contains("cpu") && Catch::Contains("cuda:0"));
    message = require_throws<DeviceError>([&] { ops::linear(Tensor::zeros({4, 7}), w, zeros_on_gpu({5})); });
    CHECK_THAT(message, Catch::Contains("cpu") && Catch::Contains("cuda:0"));
  }
}
