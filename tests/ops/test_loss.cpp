// Tests for log_softmax, nll_loss and cross_entropy (src/ops/loss.cpp, src/ops/cpu/loss.cpp): values
// against double references and PyTorch's formula, stability, label smoothing, gradients, errors.
#include <cmath>

#include "ops/op_test_helpers.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

std::vector<double> reference_log_softmax(const std::vector<double>& logits, int64_t rows, int64_t classes) {
  std::vector<double> out(logits.size());
  for (int64_t i = 0; i < rows; ++i) {
    double row_max = -INFINITY, exp_sum = 0.0;
    for (int64_t k = 0; k < classes; ++k) row_max = std::max(row_max, logits[i * classes + k]);
    for (int64_t k = 0; k < classes; ++k) exp_sum += std::exp(logits[i * classes + k] - row_max);
    for (int64_t k = 0; k < classes; ++k) out[i * classes + k] = logits[i * classes + k] - row_max - std::log(exp_sum);
  }
  return out;
}

// PyTorch's smoothed cross-entropy: mean_i [ -(1 - s) logp[i, t_i] - s / K sum_k logp[i, k] ].
double reference_cross_entropy(const Tensor& logits, const std::vector<int64_t>& target, double smoothing) {
  const int64_t rows = logits.size(0), classes = logits.size(1);
  std::vector<double> log_probs = reference_log_softmax(logits.to_vector<double>(), rows, classes);
  double total = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    double row_sum = 0.0;
    for (int64_t k = 0; k < classes; ++k) row_sum += log_probs[i * classes + k];
    total += -(1.0 - smoothing) * log_probs[i * classes + target[i]] - smoothing / classes * row_sum;
  }
  return total / static_cast<double>(rows);
}

Tensor labels(const std::vector<int64_t>& values) {
  return Tensor::from_vector<int64_t>(values, {static_cast<int64_t>(values.size())});
}

std::vector<int64_t> random_labels(int64_t count, int64_t classes, Generator& generator) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t& v : values) v = static_cast<int64_t>(generator.next_below(static_cast<uint64_t>(classes)));
  return values;
}

}  // namespace

TEST_CASE("log_softmax matches a reference and is stable for large logits", "[ops]") {
  Generator generator(51);
  Tensor logits = Tensor::uniform({4, 7}, -3.0, 3.0, generator, DType::f64);
  require_close(ops::log_softmax(logits).to_vector<double>(), reference_log_softmax(logits.to_vector<double>(), 4, 7));
  // Without subtracting the maximum, exp(1000) would overflow to inf.
  Tensor huge = Tensor::from_vector<float>({1000.0f, 1001.0f, 999.0f, -1000.0f, 0.0f, 1000.0f}, {2, 3});
  std::vector<double> out = ops::log_softmax(huge).to_vector<double>();
  for (double v : out) CHECK(std::isfinite(v));
  // f32 resolves values near 1000 to about 6e-5.
  require_close(out, reference_log_softmax({1000, 1001, 999, -1000, 0, 1000}, 2, 3), 1e-4);
}

TEST_CASE("cross_entropy matches PyTorch's formula with and without label smoothing", "[ops]") {
  // F.cross_entropy(tensor([[1., 2., 3.]]), tensor([0])) = 2.4076059644; with label_smoothing=0.1:
  // 0.9 * 2.4076059644 + 0.1 / 3 * (2.4076059644 + 1.4076059644 + 0.4076059644) = 2.3076059644
  Tensor logits = Tensor::from_vector<double>({1, 2, 3}, {1, 3});
  CHECK(ops::cross_entropy(logits, labels({0})).item() == Approx(2.4076059644).epsilon(1e-10));
  CHECK(ops::cross_entropy(logits, labels({0}), 0.1).item() == Approx(2.3076059644).epsilon(1e-10));
  // Uniform logits: every class has log-probability -log K whatever the smoothing.
  Tensor flat = Tensor::zeros({2, 4}, DType::f64);
  CHECK(ops::cross_entropy(flat, labels({1, 3}), 0.3).item() == Approx(std::log(4.0)).epsilon(1e-12));

  Generator generator(52);
  for (double smoothing : {0.0, 0.1, 1.0}) {
    Tensor batch = Tensor::uniform({6, 5}, -2.0, 2.0, generator, DType::f64);
    std::vector<int64_t> target = random_labels(6, 5, generator);
    INFO("smoothing " << smoothing);
    CHECK(ops::cross_entropy(batch, labels(target), smoothing).item() ==
          Approx(reference_cross_entropy(batch, target, smoothing)).epsilon(1e-12));
    CHECK(ops::cross_entropy(batch.to(DType::f32), labels(target), smoothing).item() ==
          Approx(reference_cross_entropy(batch, target, smoothing)).epsilon(1e-6));
  }
}

TEST_CASE("cross_entropy gradient is (softmax - smoothed one-hot) / N", "[ops]") {
  Generator generator(53);
  const int64_t rows = 3, classes = 4;
  const double smoothing = 0.2;
  Tensor logits = random_leaf({rows, classes}, generator);
  std::vector<int64_t> target = {2, 0, 3};
  ops::cross_entropy(logits, labels(target), smoothing).backward();
  std::vector<double> log_probs = reference_log_softmax(logits.to_vector<double>(), rows, classes);
  std::vector<double> expected(log_probs.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < classes; ++k) {
      double smoothed_target = smoothing / classes + (k == target[i] ? 1.0 - smoothing : 0.0);
      expected[i * classes + k] = (std::exp(log_probs[i * classes + k]) - smoothed_target) / rows;
    }
  require_close(logits.grad().to_vector<double>(), expected);
}

TEST_CASE("log_softmax, nll_loss and cross_entropy gradients match finite differences", "[ops]") {
  Generator generator(54);
  for (const Shape& shape : std::vector<Shape>{{1, 1}, {3, 4}, {5, 2}, {2, 9}}) {
    INFO("shape " << shape_str(shape));
    require_gradcheck([](const std::vector<Tensor>& in) { return ops::log_softmax(in[0]); },
                      {random_leaf(shape, generator, -3.0, 3.0)});
    Tensor target = labels(random_labels(shape[0], shape[1], generator));
    for (double smoothing : {0.0, 0.15}) {
      require_gradcheck([&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], target, smoothing); },
                        {random_leaf(shape, generator, -3.0, 3.0)});
      require_gradcheck([&](const std::vector<Tensor>& in) { return ops::nll_loss(in[0], target, smoothing); },
                        {random_leaf(shape, generator, -3.0, 0.0)});
    }
  }
}

TEST_CASE("a large f32 batch agrees with the f64 result", "[ops]") {
  Generator generator(55);
  Tensor logits = Tensor::uniform({512, 100}, -4.0, 4.0, generator, DType::f64);
  std::vector<int64_t> target = random_labels(512, 100, generator);
  Tensor logits_f32 = logits.to(DType::f32);
  logits_f32.set_requires_grad(true);
  Tensor loss = ops::cross_entropy(logits_f32, labels(target), 0.1);
  CHECK(loss.item() == Approx(reference_cross_entropy(logits, target, 0.1)).epsilon(1e-6));
  loss.backward();
  Tensor logits_f64 = logits.clone();
  logits_f64.set_requires_grad(true);
  ops::cross_entropy(logits_f64, labels(target), 0.1).backward();
  require_close(logits_f32.grad().to_vector<double>(), logits_f64.grad().to_vector<double>(), 1e-6);
}

TEST_CASE("losses reject bad targets, shapes, dtypes and devices", "[ops]") {
  Tensor logits = Tensor::zeros({2, 3});
  std::string message = require_throws<ShapeError>([&] { ops::cross_entropy(logits, labels({0, 7})); });
  CHECK_THAT(message, Catch::Contains("target 7") && Catch::Contains("3 classes"));
  message = require_throws<ShapeError>([&] { ops::cross_entropy(logits, labels({-1, 0})); });
  CHECK_THAT(message, Catch::Contains("target -1") && Catch::Contains("3 classes"));
  message = require_throws<ShapeError>([&] { ops::cross_entropy(logits, labels({0, 1, 2})); });
  CHECK_THAT(message, Catch::Contains("[3]") && Catch::Contains("[2, 3]"));
  message = require_throws<TypeError>([&] { ops::cross_entropy(logits, Tensor::from_vector<int32_t>({0, 1}, {2})); });
  CHECK_THAT(message, Catch::Contains("i64") && Catch::Contains("i32"));
  if (Tensor on_gpu = zeros_on_gpu({2}, DType::i64); on_gpu.defined()) {
    message = require_throws<DeviceError>([&] { ops::nll_loss(logits, on_gpu); });
    CHECK_THAT(message, Catch::Contains("cpu") && Catch::Contains("cuda:0"));
  }
  message = require_throws<ShapeError>([&] { ops::log_softmax(Tensor::zeros({3})); });
  CHECK_THAT(message, Catch::Contains("[3]"));
  message = require_throws<ConfigError>([&] { ops::cross_entropy(logits, labels({0, 1}), 1.5); });
  CHECK_THAT(message, Catch::Contains("label_smoothing 1.5"));
  message = require_throws<TypeError>([&] { ops::cross_entropy(Tensor::zeros({2, 3}, DType::i64), labels({0, 1})); });
  CHECK_THAT(message, Catch::Contains("i64"));
}
