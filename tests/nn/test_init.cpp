// Tests of src/nn/init.cpp and the layers' default initialisation: sample statistics against theory,
// fan computation, gains, in-place writes that keep storage, and seed reproducibility.
#include <algorithm>
#include <cmath>
#include <vector>

#include "opsnn/nn/nn.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::nn;

namespace {

struct Stats {
  double mean = 0, stddev = 0, min = 0, max = 0;
  size_t count = 0;
};

Stats stats(const Tensor& tensor) {
  std::vector<double> values = tensor.to_vector<double>();
  Stats s;
  s.count = values.size();
  for (double v : values) s.mean += v;
  s.mean /= static_cast<double>(values.size());
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.stddev = std::sqrt(squares / static_cast<double>(values.size()));
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

// Mean within five standard errors of zero; standard deviation within 3% of the target.
void check_zero_mean_and_std(const Stats& s, double expected_std) {
  CHECK(std::fabs(s.mean) < 5 * expected_std / std::sqrt(static_cast<double>(s.count)));
  CHECK(s.stddev == Approx(expected_std).epsilon(0.03));
}

}  // namespace

TEST_CASE("gains and fans follow PyTorch", "[nn]") {
  CHECK(init::calculate_gain(init::Nonlinearity::linear) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::sigmoid) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::tanh) == Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(init::Nonlinearity::relu) == Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::leaky_relu, 0.0) == Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::leaky_relu, std::sqrt(5.0)) == Approx(std::sqrt(1.0 / 3.0)));
  init::Fans conv = init::compute_fans({64, 32, 3, 5});
  CHECK(conv.fan_in == 32 * 15);
  CHECK(conv.fan_out == 64 * 15);
  init::Fans linear = init::compute_fans({10, 20});
  CHECK(linear.fan_in == 20);
  CHECK(linear.fan_out == 10);
  CHECK_THROWS_AS(init::compute_fans({5}), ShapeError);
  CHECK_THROWS_WITH(init::compute_fans({5}), Catch::Contains("[5]"));
}

TEST_CASE("kaiming_normal_ has std gain / sqrt(fan) in either mode", "[nn]") {
  Generator generator(1);
  Tensor weight = Tensor::empty({128, 64, 3, 3});
  init::kaiming_normal_(weight, generator, 0.0, init::FanMode::fan_in, init::Nonlinearity::relu);
  check_zero_mean_and_std(stats(weight), std::sqrt(2.0 / (64 * 9)));
  init::kaiming_normal_(weight, generator, 0.0, init::FanMode::fan_out, init::Nonlinearity::relu);
  check_zero_mean_and_std(stats(weight), std::sqrt(2.0 / (128 * 9)));
  init::kaiming_normal_(weight, generator, 0.0, init::FanMode::fan_in, init::Nonlinearity::linear);
  check_zero_mean_and_std(stats(weight), std::sqrt(1.0 / (64 * 9)));
}

TEST_CASE("kaiming_uniform_ stays inside sqrt(3) * std and fills the interval", "[nn]") {
  Generator generator(2);
  Tensor weight = Tensor::empty({256, 300});
  init::kaiming_uniform_(weight, generator);  // PyTorch's defaults: a = 0, fan_in, relu gain
  double bound = std::sqrt(6.0 / 300);
  Stats s = stats(weight);
  CHECK(s.min >= -bound);
  CHECK(s.max <= bound);
  CHECK(s.min < -0.99 * bound);
  CHECK(s.max > 0.99 * bound);
  check_zero_mean_and_std(s, bound / std::sqrt(3.0));
  init::kaiming_uniform_(weight, generator, 0.0, init::FanMode::fan_out);
  CHECK(stats(weight).max <= std::sqrt(6.0 / 256));
  CHECK(stats(weight).max > 0.99 * std::sqrt(6.0 / 256));
}

TEST_CASE("uniform_, normal_, zeros_, ones_ and constant_ write in place", "[nn]") {
  Generator generator(3);
  Tensor t = Tensor::empty({100, 100});
  Tensor handle = t;
  auto storage = t.storage();
  init::uniform_(t, 2.0, 4.0, generator);
  Stats u = stats(handle);
  CHECK(u.min >= 2.0);
  CHECK(u.max < 4.0);
  CHECK(u.mean == Approx(3.0).epsilon(0.01));
  init::normal_(t, -1.0, 0.5, generator);
  Stats n = stats(handle);
  CHECK(n.mean == Approx(-1.0).epsilon(0.02));
  CHECK(n.stddev == Approx(0.5).epsilon(0.03));
  CHECK(t.storage() == storage);
  CHECK(init::zeros_(t).same(t));
  CHECK(stats(t).max == 0.0);
  init::ones_(t);
  CHECK(stats(t).min == 1.0);
  // A non-contiguous view: only its elements change.
  Tensor base = Tensor::zeros({3, 4});
  init::constant_(base.transpose(0, 1).slice(0, 1, 2), 5.0);  // column 1
  CHECK(base.to_vector<float>() == std::vector<float>{0, 5, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0});
  init::uniform_(base.slice(1, 2, 4), 10.0, 11.0, generator);
  CHECK(base.to_vector<float>()[0] == 0.0f);
  CHECK(base.to_vector<float>()[2] >= 10.0f);
  // Low-precision tensors are rounded from the same draws.
  Tensor low = Tensor::empty({1000}, DType::bf16);
  init::normal_(low, 0.0, 1.0, generator);
  CHECK(stats(low).stddev == Approx(1.0).epsilon(0.1));
  CHECK_THROWS_AS(init::normal_(Tensor::empty({3}, DType::i32), 0.0, 1.0, generator), TypeError);
  CHECK_THROWS_WITH(init::kaiming_uniform_(Tensor::empty({3}), generator), Catch::Contains("[3]"));
}

TEST_CASE("layers initialise as PyTorch does", "[nn]") {
  Generator generator(4);
  // Linear: weight and bias uniform in +-1/sqrt(in_features).
  Linear linear(400, 300, generator);
  double linear_bound = 1.0 / std::sqrt(400.0);
  Stats weight = stats(linear.weight());
  CHECK(weight.min >= -linear_bound);
  CHECK(weight.max <= linear_bound);
  CHECK(weight.max > 0.99 * linear_bound);
  check_zero_mean_and_std(weight, linear_bound / std::sqrt(3.0));
  Stats bias = stats(linear.bias());
  CHECK(bias.min >= -linear_bound);
  CHECK(bias.max <= linear_bound);
  CHECK(bias.max > 0.9 * linear_bound);

  // Conv2d: the same with fan_in = in_channels * k * k.
  Conv2d conv(Conv2dOptions(16, 64, 3), generator);
  double conv_bound = 1.0 / std::sqrt(16.0 * 9.0);
  Stats conv_weight = stats(conv.weight());
  CHECK(conv_weight.max <= conv_bound);
  CHECK(conv_weight.min >= -conv_bound);
  check_zero_mean_and_std(conv_weight, conv_bound / std::sqrt(3.0));
  CHECK(stats(conv.bias()).max <= conv_bound);

  // BatchNorm2d: weight 1, bias 0, running statistics 0 and 1.
  BatchNorm2d batch_norm(8);
  CHECK(batch_norm.weight().to_vector<float>() == std::vector<float>(8, 1.0f));
  CHECK(batch_norm.bias().to_vector<float>() == std::vector<float>(8, 0.0f));
  CHECK(batch_norm.running_mean().to_vector<float>() == std::vector<float>(8, 0.0f));
  CHECK(batch_norm.running_var().to_vector<float>() == std::vector<float>(8, 1.0f));

  // Embedding: N(0, 1).
  Embedding embedding(EmbeddingOptions(1000, 32), generator);
  check_zero_mean_and_std(stats(embedding.weight()), 1.0);
}

TEST_CASE("the same seed builds the same model, another seed a different one", "[nn]") {
  auto build = [](uint64_t seed) {
    Generator generator(seed);
    Sequential model;
    model.push_back(std::make_shared<Conv2d>(Conv2dOptions(3, 8, 3), generator));
    model.push_back(std::make_shared<Linear>(8, 4, generator));
    std::vector<std::vector<float>> values;
    for (const Tensor& p : model.parameters()) values.push_back(p.to_vector<float>());
    return values;
  };
  CHECK(build(42) == build(42));
  CHECK(build(42) != build(43));
}
