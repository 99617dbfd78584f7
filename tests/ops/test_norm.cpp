// Tests of ops::batch_norm, ops::batch_norm_relu and ops::batch_norm_add_relu (src/ops/norm.cpp,
// src/ops/cpu/norm.cpp): training and eval values, running-statistic updates, finite-difference gradients,
// f32 precision, argument errors, the fused relu equal bit for bit to batch_norm followed by relu, and the
// fused residual add + relu equal bit for bit to batch_norm followed by add_relu (both layouts);
// batch_norm_relu_max_pool2d's finite-difference gradients and argument errors (its fused CUDA kernels:
// tests/ops/test_cuda_norm.cpp); batch_norm_invstd's values, gradient and errors.
#include <cmath>
#include <tuple>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/autograd/node.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/ops.h"
#include "support/bit_patterns.h"
#include "support/catch.h"
#include "support/cuda_test_support.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

// Per-channel mean and biased variance of an [N, C, ...] tensor, in double.
struct ChannelStats {
  std::vector<double> mean, variance;
  int64_t count = 0;
};
ChannelStats channel_stats(const Tensor& input) {
  const std::vector<double> x = input.to_vector<double>();
  const int64_t N = input.size(0), C = input.size(1), inner = input.numel() / (N * C);
  ChannelStats stats{std::vector<double>(static_cast<size_t>(C)), std::vector<double>(static_cast<size_t>(C)),
                     N * inner};
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, squared = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < inner; ++i) sum += x[static_cast<size_t>((n * C + c) * inner + i)];
    const double mean = sum / static_cast<double>(stats.count);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < inner; ++i) {
        const double d = x[static_cast<size_t>((n * C + c) * inner + i)] - mean;
        squared += d * d;
      }
    stats.mean[static_cast<size_t>(c)] = mean;
    stats.variance[static_cast<size_t>(c)] = squared / static_cast<double>(stats.count);
  }
  return stats;
}

// (x - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c] element by element.
std::vector<double> reference_normalize(const Tensor& input, const std::vector<double>& mean,
                                        const std::vector<double>& variance, const std::vector<double>& gamma,
                                        const std::vector<double>& beta, double eps) {
  const std::vector<double> x = input.to_vector<double>();
  const int64_t C = input.size(1), inner = input.numel() / (input.size(0) * C);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = static_cast<size_t>((static_cast<int64_t>(i) / inner) % C);
    out[i] = (x[i] - mean[c]) / std::sqrt(variance[c] + eps) * gamma[c] + beta[c];
  }
  return out;
}

// Everything one relu(batch norm) forward and backward produces, from copies of the given tensors.
struct BatchNormReluRun {
  Tensor out, running_mean, running_var, grad_input, grad_gamma, grad_beta;
};

BatchNormReluRun run_batch_norm_relu(bool fused, bool training, const Tensor& input, const Tensor& gamma,
                                     const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                     const Tensor& upstream) {
  BatchNormReluRun run;
  Tensor x = input.clone().set_requires_grad(true);
  Tensor weight = gamma.defined() ? gamma.clone().set_requires_grad(true) : Tensor();
  Tensor bias = beta.clone().set_requires_grad(true);
  run.running_mean = running_mean.clone();
  run.running_var = running_var.clone();
  run.out = fused ? ops::batch_norm_relu(x, weight, bias, run.running_mean, run.running_var, training, 0.1, 1e-5)
                  : ops::relu(ops::batch_norm(x, weight, bias, run.running_mean, run.running_var, training, 0.1, 1e-5));
  run.out.backward(upstream);
  run.grad_input = x.grad();
  if (weight.defined()) run.grad_gamma = weight.grad();
  run.grad_beta = bias.grad();
  return run;
}

// Everything one relu(batch norm + residual) forward and backward produces, from copies of the given
// tensors: fused (batch_norm_add_relu) or batch_norm followed by add_relu.
struct BatchNormAddReluRun {
  BatchNormReluRun run;
  Tensor grad_residual;
};

BatchNormAddReluRun run_batch_norm_add_relu(bool fused, bool training, bool channels_last, const Tensor& input,
                                            const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                            const Tensor& running_mean, const Tensor& running_var,
                                            const Tensor& upstream) {
  BatchNormAddReluRun result;
  BatchNormReluRun& run = result.run;
  Tensor x = input.clone().set_requires_grad(true);
  Tensor shortcut = residual.clone().set_requires_grad(true);
  Tensor weight = gamma.clone().set_requires_grad(true);
  Tensor bias = beta.clone().set_requires_grad(true);
  run.running_mean = running_mean.clone();
  run.running_var = running_var.clone();
  // eps 0: with running statistics 0 and 1 eval's normalization is then exactly the identity.
  run.out = fused ? ops::batch_norm_add_relu(x, shortcut, weight, bias, run.running_mean, run.running_var, training,
                                             0.1, 0.0, channels_last)
                  : ops::add_relu(ops::batch_norm(x, weight, bias, run.running_mean, run.running_var, training, 0.1,
                                                  0.0, channels_last),
                                  shortcut);
  run.out.backward(upstream);
  run.grad_input = x.grad();
  run.grad_gamma = weight.grad();
  run.grad_beta = bias.grad();
  result.grad_residual = shortcut.grad();
  return result;
}

}  // namespace

TEST_CASE("batch_norm training normalizes with batch statistics and updates running stats", "[ops]") {
  for (const Shape& shape : {Shape{4, 3, 5, 2}, Shape{6, 4}}) {
    INFO("input " << shape_str(shape));
    Generator generator(3);
    Tensor input = Tensor::uniform(shape, -2, 3, generator, DType::f64);
    const int64_t C = shape[1];
    Tensor gamma = Tensor::uniform({C}, 0.5, 1.5, generator, DType::f64);
    Tensor beta = Tensor::uniform({C}, -1, 1, generator, DType::f64);
    Tensor running_mean = Tensor::uniform({C}, -1, 1, generator, DType::f64);
    Tensor running_var = Tensor::uniform({C}, 0.5, 2, generator, DType::f64);
    const std::vector<double> mean0 = running_mean.to_vector<double>(), var0 = running_var.to_vector<double>();

    Tensor out = ops::batch_norm(input, gamma, beta, running_mean, running_var, true, 0.25, 1e-3);
    const ChannelStats stats = channel_stats(input);
    require_close(out.to_vector<double>(),
                  reference_normalize(input, stats.mean, stats.variance, gamma.to_vector<double>(),
                                      beta.to_vector<double>(), 1e-3));
    // running = 0.75 * running + 0.25 * batch, with the unbiased variance (count / (count - 1)).
    std::vector<double> expected_mean, expected_var;
    const double unbias = static_cast<double>(stats.count) / static_cast<double>(stats.count - 1);
    for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
      expected_mean.push_back(0.75 * mean0[c] + 0.25 * stats.mean[c]);
      expected_var.push_back(0.75 * var0[c] + 0.25 * stats.variance[c] * unbias);
    }
    require_close(running_mean.to_vector<double>(), expected_mean);
    require_close(running_var.to_vector<double>(), expected_var);
  }
}

TEST_CASE("batch_norm running stats follow the PyTorch defaults from zeros and ones", "[ops]") {
  // One channel holding 1, 2, 3, 4: mean 2.5, unbiased variance 5/3; momentum 0.1.
  Tensor input = Tensor::from_vector<float>({1, 2, 3, 4}, {4, 1});
  Tensor running_mean = Tensor::zeros({1}), running_var = Tensor::ones({1});
  ops::batch_norm(input, Tensor(), Tensor(), running_mean, running_var, true);
  CHECK(running_mean.item() == Approx(0.25).epsilon(1e-6));
  CHECK(running_var.item() == Approx(0.9 + 0.1 * 5.0 / 3.0).epsilon(1e-6));
  ops::batch_norm(input, Tensor(), Tensor(), running_mean, running_var, true);
  CHECK(running_mean.item() == Approx(0.9 * 0.25 + 0.25).epsilon(1e-6));
}

TEST_CASE("batch_norm eval uses the running statistics and leaves them alone", "[ops]") {
  Generator generator(4);
  Tensor input = Tensor::uniform({3, 2, 4, 4}, -1, 1, generator, DType::f64);
  Tensor gamma = Tensor::from_vector<double>({2.0, 0.5}, {2}), beta = Tensor::from_vector<double>({0.1, -0.3}, {2});
  Tensor running_mean = Tensor::from_vector<double>({0.2, -0.4}, {2});
  Tensor running_var = Tensor::from_vector<double>({1.5, 0.25}, {2});
  Tensor out = ops::batch_norm(input, gamma, beta, running_mean, running_var, false, 0.1, 1e-5);
  require_close(out.to_vector<double>(),
                reference_normalize(input, {0.2, -0.4}, {1.5, 0.25}, {2.0, 0.5}, {0.1, -0.3}, 1e-5));
  REQUIRE(running_mean.to_vector<double>() == std::vector<double>{0.2, -0.4});
  REQUIRE(running_var.to_vector<double>() == std::vector<double>{1.5, 0.25});
}

TEST_CASE("batch_norm gradients match finite differences", "[ops]") {
  for (const Shape& shape : {Shape{3, 2, 3, 4}, Shape{5, 3}, Shape{2, 3, 5}}) {
    for (bool training : {true, false}) {
      INFO("input " << shape_str(shape) << (training ? " training" : " eval"));
      Generator generator(11);
      const int64_t C = shape[1];
      Tensor input = random_leaf(shape, generator, -2, 2);
      Tensor gamma = random_leaf({C}, generator, 0.5, 1.5);
      Tensor beta = random_leaf({C}, generator);
      Tensor running_mean = Tensor::uniform({C}, -0.5, 0.5, generator, DType::f64);
      Tensor running_var = Tensor::uniform({C}, 0.5, 1.5, generator, DType::f64);
      require_gradcheck(
          [&](const std::vector<Tensor>& in) {
            return ops::batch_norm(in[0], in[1], in[2], running_mean, running_var, training, 0.1, 1e-5);
          },
          {input, gamma, beta});
    }
  }
}

TEST_CASE("batch_norm gradient reaches the input alone when gamma and beta are absent or frozen", "[ops]") {
  Generator generator(12);
  Tensor input = random_leaf({4, 2, 3}, generator);
  Tensor running_mean = Tensor::zeros({2}, DType::f64), running_var = Tensor::ones({2}, DType::f64);
  require_gradcheck(
      [&](const std::vector<Tensor>& in) {
        return ops::batch_norm(in[0], Tensor(), Tensor(), running_mean, running_var, true);
      },
      {input});
  Tensor frozen_gamma = Tensor::full({2}, 1.5, DType::f64);
  Tensor out =
      ops::batch_norm(input.detach().set_requires_grad(true), frozen_gamma, Tensor(), running_mean, running_var, false);
  out.backward(Tensor::ones(out.shape(), DType::f64));
  REQUIRE_FALSE(frozen_gamma.grad().defined());
}

TEST_CASE("batch_norm in f32 keeps precision for inputs with a large mean", "[ops]") {
  // Values 1000 + N(0, 1): E[x^2] - E[x]^2 in f32 would lose most digits of the variance.
  Generator generator(21);
  Tensor input = Tensor::normal({16, 2, 8, 8}, 1000.0, 1.0, generator, DType::f32);
  Tensor input64 = input.to(DType::f64);
  Tensor gamma = Tensor::ones({2}), beta = Tensor::zeros({2});
  Tensor running_mean = Tensor::zeros({2}), running_var = Tensor::ones({2});
  Tensor out = ops::batch_norm(input, gamma, beta, running_mean, running_var, true);
  const ChannelStats stats = channel_stats(input64);
  require_close(out.to_vector<double>(), reference_normalize(input64, stats.mean, stats.variance, {1, 1}, {0, 0}, 1e-5),
                2e-4);
  const double unbias = static_cast<double>(stats.count) / static_cast<double>(stats.count - 1);
  require_close(running_var.to_vector<double>(),
                {0.9 + 0.1 * stats.variance[0] * unbias, 0.9 + 0.1 * stats.variance[1] * unbias}, 1e-6);

  // f32 gradients agree with f64 ones computed from the same values.
  auto input_grad = [](const Tensor& x, DType dtype) {
    Tensor leaf = x.to(dtype).set_requires_grad(true);
    Tensor mean = Tensor::zeros({2}, dtype), var = Tensor::ones({2}, dtype);
    Tensor y = ops::batch_norm(leaf, Tensor(), Tensor(), mean, var, true);
    Generator weights_generator(5);
    y.backward(Tensor::uniform(y.shape(), -1, 1, weights_generator, dtype));
    return leaf.grad().to_vector<double>();
  };
  require_close(input_grad(input, DType::f32), input_grad(input64, DType::f64), 1e-4);
}

TEST_CASE("batch_norm rejects bad arguments with messages naming both sides", "[ops]") {
  Tensor input = Tensor::zeros({4, 3, 2, 2});
  Tensor mean = Tensor::zeros({3}), var = Tensor::ones({3});
  CHECK_THAT(require_throws<ShapeError>([&] { ops::batch_norm(input, Tensor::ones({5}), Tensor(), mean, var, true); }),
             Catch::Contains("gamma [5]") && Catch::Contains("[4, 3, 2, 2]"));
  Tensor short_var = Tensor::ones({2});
  CHECK_THAT(require_throws<ShapeError>([&] { ops::batch_norm(input, Tensor(), Tensor(), mean, short_var, false); }),
             Catch::Contains("running_var [2]") && Catch::Contains("[4, 3, 2, 2]"));
  Tensor missing;
  CHECK_THAT(require_throws<Error>([&] { ops::batch_norm(input, Tensor(), Tensor(), missing, var, false); }),
             Catch::Contains("eval mode needs running_mean"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::batch_norm(Tensor::zeros({1, 3}), Tensor(), Tensor(), mean, var, true);
             }),
             Catch::Contains("more than one value per channel"));
  CHECK_THAT(require_throws<TypeError>(
                 [&] { ops::batch_norm(input, Tensor::ones({3}, DType::f64), Tensor(), mean, var, true); }),
             Catch::Contains("f32") && Catch::Contains("f64"));
  CHECK_THAT(
      require_throws<ShapeError>([&] { ops::batch_norm(Tensor::zeros({4}), Tensor(), Tensor(), mean, var, true); }),
      Catch::Contains("[N, C]"));
  CHECK_THAT(require_throws<ConfigError>([&] { ops::batch_norm(input, Tensor(), Tensor(), mean, var, true, 1.5); }),
             Catch::Contains("momentum") && Catch::Contains("1.5"));
  CHECK_THAT(
      require_throws<ConfigError>([&] { ops::batch_norm(input, Tensor(), Tensor(), mean, var, true, 0.1, -1e-5); }),
      Catch::Contains("eps"));
  // Training without running statistics (track_running_stats off) works.
  Tensor none_mean, none_var;
  REQUIRE(ops::batch_norm(input, Tensor(), Tensor(), none_mean, none_var, true).shape() == input.shape());
}

TEST_CASE("batch_norm_relu and batch_norm_add_relu gradients match finite differences, the residual's included",
          "[ops]") {
  for (bool add : {false, true}) {
    for (const Shape& shape : {Shape{3, 2, 3, 4}, Shape{5, 3}, Shape{2, 3, 5}}) {
      for (bool training : {true, false}) {
        INFO((add ? "batch_norm_add_relu" : "batch_norm_relu")
             << ", input " << shape_str(shape) << (training ? " training" : " eval"));
        Generator generator(13);
        const int64_t C = shape[1];
        Tensor input = random_leaf(shape, generator, -2, 2);
        Tensor gamma = random_leaf({C}, generator, 0.5, 1.5);
        Tensor beta = random_leaf({C}, generator, -0.5, 0.5);
        Tensor running_mean = Tensor::uniform({C}, -0.5, 0.5, generator, DType::f64);
        Tensor running_var = Tensor::uniform({C}, 0.5, 1.5, generator, DType::f64);
        std::vector<Tensor> inputs = {input, gamma, beta};
        if (add) inputs.push_back(random_leaf(shape, generator, -1, 1));
        require_gradcheck(
            [&](const std::vector<Tensor>& in) {
              if (add)
                return ops::batch_norm_add_relu(in[0], in[3], in[1], in[2], running_mean, running_var, training, 0.1,
                                                1e-5);
              return ops::batch_norm_relu(in[0], in[1], in[2], running_mean, running_var, training, 0.1, 1e-5);
            },
            inputs);
      }
    }
  }
}

TEST_CASE("batch_norm_relu_max_pool2d gradients match finite differences, training and eval", "[ops]") {
  for (const auto& [shape, kernel, pad] :
       {std::tuple{Shape{3, 2, 7, 6}, int64_t{3}, int64_t{1}}, std::tuple{Shape{2, 3, 6, 5}, int64_t{2}, int64_t{0}}})
    for (bool training : {true, false}) {
      INFO("input " << shape_str(shape) << ", pool " << kernel << "/2 pad " << pad
                    << (training ? " training" : " eval"));
      Generator generator(14);
      const int64_t C = shape[1];
      ops::Pool2dGeometry pool;
      pool.kernel_h = pool.kernel_w = kernel;
      pool.pad_h = pool.pad_w = pad;
      Tensor running_mean = Tensor::uniform({C}, -0.5, 0.5, generator, DType::f64);
      Tensor running_var = Tensor::uniform({C}, 0.5, 1.5, generator, DType::f64);
      require_gradcheck(
          [&](const std::vector<Tensor>& in) {
            return ops::batch_norm_relu_max_pool2d(in[0], in[1], in[2], running_mean, running_var, training, 0.1, 1e-5,
                                                   pool);
          },
          {random_leaf(shape, generator, -2, 2), random_leaf({C}, generator, 0.5, 1.5),
           random_leaf({C}, generator, -0.5, 0.5)});
    }
}

TEST_CASE("batch_norm_relu_max_pool2d rejects what batch_norm or max_pool2d would, naming the op", "[ops]") {
  Tensor mean = Tensor::zeros({3}), var = Tensor::ones({3});
  ops::Pool2dGeometry pool;
  pool.kernel_h = pool.kernel_w = 3;
  pool.pad_h = pool.pad_w = 1;
  CHECK_THAT(
      require_throws<ShapeError>([&] {
        ops::batch_norm_relu_max_pool2d(Tensor::zeros({4, 3, 6}), Tensor(), Tensor(), mean, var, true, 0.1, 1e-5, pool);
      }),
      Catch::Contains("batch_norm_relu_max_pool2d") && Catch::Contains("4-D"));
  ops::Pool2dGeometry wide = pool;
  wide.pad_h = 2;
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::batch_norm_relu_max_pool2d(Tensor::zeros({4, 3, 6, 6}), Tensor(), Tensor(), mean, var, true, 0.1,
                                               1e-5, wide);
             }),
             Catch::Contains("batch_norm_relu_max_pool2d") && Catch::Contains("padding 2x1"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::batch_norm_relu_max_pool2d(Tensor::zeros({4, 3, 6, 6}), Tensor::ones({5}), Tensor(), mean, var,
                                               true, 0.1, 1e-5, pool);
             }),
             Catch::Contains("gamma [5]"));
  // The CPU composes the ops; only a backend that says it fuses the pair is asked to run it.
  ops::Backend& cpu = ops::backend_for(kCPU);
  const Tensor input = Tensor::zeros({4, 3, 6, 6});
  CHECK_FALSE(cpu.fuses_batch_norm_relu_max_pool2d(input, pool));
  Tensor out, offsets, save_mean, save_invstd;
  CHECK_THAT(require_throws<UsageError>([&] {
               cpu.batch_norm_relu_max_pool2d_forward_train(input, var, mean, mean, var, 0.1, 1e-5, pool, out, offsets,
                                                            save_mean, save_invstd);
             }),
             Catch::Contains("does not fuse"));
}

TEST_CASE("batch_norm_relu equals batch_norm followed by relu bit for bit, forward and backward", "[ops]") {
  // Shapes past the OpenMP threshold ([8, 16, 17, 17]), 2-D, inner 1 and odd; f32 and f64; with and
  // without gamma; training and eval (where pre-relu values of exactly 0 hit the kink).
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Shape& shape : {Shape{8, 16, 17, 17}, Shape{6, 4}, Shape{5, 3, 1}, Shape{4, 3, 5, 2}}) {
      for (bool training : {true, false}) {
        for (bool with_gamma : {true, false}) {
          const std::string what = shape_str(shape) + " " + std::string(dtype_name(dtype)) +
                                   (training ? " training" : " eval") + (with_gamma ? "" : " without gamma");
          Generator generator(23);
          const int64_t C = shape[1];
          std::vector<double> values = Tensor::normal(shape, 0.3, 1.0, generator, DType::f64).to_vector<double>();
          for (size_t i = 0; i < values.size(); i += 7) values[i] = 0.0;  // channel 0's running mean below
          const Tensor input = Tensor::from_vector<double>(values, shape).to(dtype);
          const Tensor gamma = with_gamma ? Tensor::uniform({C}, 0.5, 1.5, generator, dtype) : Tensor();
          std::vector<double> shift = Tensor::uniform({C}, -0.5, 0.5, generator, DType::f64).to_vector<double>();
          shift[0] = 0.0;
          const Tensor beta = Tensor::from_vector<double>(shift, {C}).to(dtype);
          std::vector<double> center = Tensor::uniform({C}, -0.5, 0.5, generator, DType::f64).to_vector<double>();
          center[0] = 0.0;
          const Tensor running_mean = Tensor::from_vector<double>(center, {C}).to(dtype);
          const Tensor running_var = Tensor::uniform({C}, 0.5, 2.0, generator, dtype);
          const Tensor upstream = Tensor::uniform(shape, -1.0, 1.0, generator, dtype);
          const BatchNormReluRun unfused =
              run_batch_norm_relu(false, training, input, gamma, beta, running_mean, running_var, upstream);
          const BatchNormReluRun fused =
              run_batch_norm_relu(true, training, input, gamma, beta, running_mean, running_var, upstream);
          require_same_bits(fused.out, unfused.out, what + " out");
          require_same_bits(fused.running_mean, unfused.running_mean, what + " running_mean");
          require_same_bits(fused.running_var, unfused.running_var, what + " running_var");
          require_same_bits(fused.grad_input, unfused.grad_input, what + " grad_input");
          if (with_gamma) require_same_bits(fused.grad_gamma, unfused.grad_gamma, what + " grad_gamma");
          require_same_bits(fused.grad_beta, unfused.grad_beta, what + " grad_beta");
        }
      }
    }
  }
}

TEST_CASE("batch_norm_add_relu equals batch_norm followed by add_relu bit for bit, forward and all gradients",
          "[ops]") {
  // Shapes past the OpenMP threshold, 2-D and odd; f32 and f64; training and eval; NCHW and channels-last
  // (the same shapes read as [N, ..., C]). Every 5th residual is minus the input there, and eval normalizes
  // by the identity (running mean 0, var 1, eps 0, gamma 1, beta 0), so sums of exactly 0 hit the kink.
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Shape& shape : {Shape{8, 16, 17, 17}, Shape{6, 4}, Shape{4, 3, 5, 2}}) {
      for (bool channels_last : {false, true}) {
        for (bool training : {true, false}) {
          const std::string what = shape_str(shape) + " " + std::string(dtype_name(dtype)) +
                                   (training ? " training" : " eval") + (channels_last ? " channels_last" : "");
          Generator generator(29);
          const int64_t C = channels_last ? shape.back() : shape[1];
          const Tensor input = Tensor::normal(shape, 0.3, 1.0, generator, DType::f64).to(dtype);
          std::vector<double> added = Tensor::uniform(shape, -1.0, 1.0, generator, DType::f64).to_vector<double>();
          const std::vector<double> x = input.to_vector<double>();
          for (size_t i = 0; i < added.size(); i += 5) added[i] = -x[i];
          const Tensor residual = Tensor::from_vector<double>(added, shape).to(dtype);
          const Tensor gamma = Tensor::ones({C}, dtype), beta = Tensor::zeros({C}, dtype);
          const Tensor running_mean = Tensor::zeros({C}, dtype);
          const Tensor running_var = Tensor::ones({C}, dtype);
          const Tensor upstream = Tensor::uniform(shape, -1.0, 1.0, generator, dtype);
          const BatchNormAddReluRun unfused = run_batch_norm_add_relu(false, training, channels_last, input, residual,
                                                                      gamma, beta, running_mean, running_var, upstream);
          const BatchNormAddReluRun fused = run_batch_norm_add_relu(true, training, channels_last, input, residual,
                                                                    gamma, beta, running_mean, running_var, upstream);
          if (!training) {  // the kink was reached
            int64_t zeros = 0;
            for (double v : fused.run.out.to_vector<double>()) zeros += v == 0.0;
            CHECK(zeros > 0);
          }
          require_same_bits(fused.run.out, unfused.run.out, what + " out");
          require_same_bits(fused.run.running_mean, unfused.run.running_mean, what + " running_mean");
          require_same_bits(fused.run.running_var, unfused.run.running_var, what + " running_var");
          require_same_bits(fused.run.grad_input, unfused.run.grad_input, what + " grad_input");
          require_same_bits(fused.run.grad_gamma, unfused.run.grad_gamma, what + " grad_gamma");
          require_same_bits(fused.run.grad_beta, unfused.run.grad_beta, what + " grad_beta");
          require_same_bits(fused.grad_residual, unfused.grad_residual, what + " grad_residual");
        }
      }
    }
  }
}

TEST_CASE("batch_norm_add_relu rejects a residual of another shape, dtype or an undefined one", "[ops]") {
  Tensor input = Tensor::zeros({4, 3, 2, 2});
  Tensor mean = Tensor::zeros({3}), var = Tensor::ones({3});
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::batch_norm_add_relu(input, Tensor::zeros({4, 3, 2, 1}), Tensor(), Tensor(), mean, var, true);
             }),
             Catch::Contains("residual f32[4, 3, 2, 1]") && Catch::Contains("[4, 3, 2, 2]"));
  CHECK_THAT(
      require_throws<TypeError>([&] {
        ops::batch_norm_add_relu(input, Tensor::zeros({4, 3, 2, 2}, DType::f64), Tensor(), Tensor(), mean, var, true);
      }),
      Catch::Contains("residual") && Catch::Contains("f32"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::batch_norm_add_relu(Tensor::zeros({4, 2, 2, 3}), Tensor::zeros({4, 2, 3, 2}), Tensor(), Tensor(),
                                        mean, var, true, 0.1, 1e-5, true);
             }),
             Catch::Contains("residual f32[4, 2, 3, 2]") && Catch::Contains("input f32[4, 2, 2, 3]"));
  CHECK_THAT(
      require_throws<Error>([&] { ops::batch_norm_add_relu(input, Tensor(), Tensor(), Tensor(), mean, var, true); }),
      Catch::Contains("residual is undefined"));
  // The backend refuses a residual without the relu it is added before.
  Tensor out = Tensor::empty(input.shape()), save_mean = Tensor::empty({3}), save_invstd = Tensor::empty({3});
  Tensor ones = Tensor::ones({3}), zeros = Tensor::zeros({3});
  CHECK_THAT(require_throws<Error>([&] {
               ops::backend_for(kCPU).batch_norm_forward_train(input, ones, zeros, mean, var, 0.1, 1e-5, false,
                                                               Tensor::zeros(input.shape()), {}, out, save_mean,
                                                               save_invstd);
             }),
             Catch::Contains("only before a relu"));
  // And a masked gradient without a relu output to mask by, or of another shape.
  Tensor grad_input = Tensor::empty(input.shape()), grad_gamma = Tensor::empty({3}), grad_beta = Tensor::empty({3});
  Tensor masked = Tensor::empty(input.shape()), masked_short = Tensor::empty({4, 3, 2, 1});
  const Tensor g = Tensor::ones(input.shape());
  ops::Backend& cpu = ops::backend_for(kCPU);
  Tensor none;
  CHECK_THAT(require_throws<Error>([&] {
               cpu.batch_norm_backward(g, Tensor(), input, ones, Tensor(), zeros, ones, grad_input, grad_gamma,
                                       grad_beta, masked, false);
             }),
             Catch::Contains("only after a fused relu"));
  CHECK_THAT(require_throws<Error>([&] {
               cpu.batch_norm_backward(g, Tensor(), input, ones, zeros, zeros, ones, grad_input, grad_gamma, grad_beta,
                                       masked, false);
             }),
             Catch::Contains("only after a fused relu"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               cpu.batch_norm_backward(g, g, input, ones, Tensor(), zeros, ones, grad_input, grad_gamma, grad_beta,
                                       masked_short, false);
             }),
             Catch::Contains("[4, 3, 2, 1]"));
  // The relu mask comes from the relu output or from beta, not both; a relu output of another shape or a
  // beta that is not one value per channel is refused.
  CHECK_THAT(require_throws<Error>([&] {
               cpu.batch_norm_backward(g, g, input, ones, zeros, zeros, ones, grad_input, grad_gamma, grad_beta, none,
                                       false);
             }),
             Catch::Contains("not both"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               cpu.batch_norm_backward(g, masked_short, input, ones, Tensor(), zeros, ones, grad_input, grad_gamma,
                                       grad_beta, none, false);
             }),
             Catch::Contains("[4, 3, 2, 1]"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               cpu.batch_norm_backward(g, Tensor(), input, ones, Tensor::zeros({4}), zeros, ones, grad_input,
                                       grad_gamma, grad_beta, none, false);
             }),
             Catch::Contains("beta f32[4]") && Catch::Contains("one value per channel"));
}

namespace {

// gamma and beta with gradients already (parameters' arena views): batch norm adds into them in place, the
// same bits as the engine adding the fresh gradients a run without them gives; with relu and the residual
// add too.
void check_parameter_grads_added_in_place(Device device) {
  Generator generator(61);
  const Tensor x = Tensor::normal({4, 3, 5, 5}, 0.5, 2.0, generator).to(device);
  const Tensor shortcut = Tensor::normal({4, 3, 5, 5}, 0.0, 1.0, generator).to(device);
  const Tensor g = Tensor::uniform({4, 3, 5, 5}, -1.0, 1.0, generator).to(device);
  const Tensor prior_gamma = Tensor::uniform({3}, -1.0, 1.0, generator).to(device);
  const Tensor prior_beta = Tensor::uniform({3}, -1.0, 1.0, generator).to(device);
  ops::Pool2dGeometry pool;  // ResNet's stem pooling: 3x3, stride 2, padding 1 (5x5 planes -> 3x3)
  pool.kernel_h = pool.kernel_w = 3;
  pool.pad_h = pool.pad_w = 1;
  const Tensor pooled_g = Tensor::uniform({4, 3, 3, 3}, -1.0, 1.0, generator).to(device);
  const char* names[] = {" batch_norm", " batch_norm_relu", " batch_norm_add_relu", " batch_norm_relu_max_pool2d"};
  for (int kind = 0; kind < 4; ++kind) {  // plain, relu, residual add and relu, relu and max pooling
    INFO(device.str() << names[kind]);
    auto run = [&](bool with_prior) {
      Tensor gamma = Tensor::full({3}, 1.5, DType::f32, device), beta = Tensor::full({3}, 0.25, DType::f32, device);
      gamma.set_requires_grad(true);
      beta.set_requires_grad(true);
      if (with_prior) {
        gamma.set_grad(prior_gamma.clone());
        beta.set_grad(prior_beta.clone());
      }
      Tensor mean = Tensor::zeros({3}, DType::f32, device), var = Tensor::ones({3}, DType::f32, device);
      const Tensor out = kind == 0   ? ops::batch_norm(x, gamma, beta, mean, var, true)
                         : kind == 1 ? ops::batch_norm_relu(x, gamma, beta, mean, var, true)
                         : kind == 2
                             ? ops::batch_norm_add_relu(x, shortcut, gamma, beta, mean, var, true)
                             : ops::batch_norm_relu_max_pool2d(x, gamma, beta, mean, var, true, 0.1, 1e-5, pool);
      const TensorImpl* gamma_buffer = with_prior ? gamma.grad().impl() : nullptr;
      out.backward(kind == 3 ? pooled_g : g);
      if (with_prior) CHECK(gamma.grad().impl() == gamma_buffer);
      return std::make_pair(gamma.grad(), beta.grad());
    };
    const auto fresh = run(false), added = run(true);
    Tensor expected_gamma = prior_gamma.clone(), expected_beta = prior_beta.clone();
    expected_gamma.add_(fresh.first);
    expected_beta.add_(fresh.second);
    CHECK(added.first.to(kCPU).to_vector<float>() == expected_gamma.to(kCPU).to_vector<float>());
    CHECK(added.second.to(kCPU).to_vector<float>() == expected_beta.to(kCPU).to_vector<float>());
  }
}

}  // namespace

TEST_CASE("batch norm adds gamma's and beta's gradients into existing ones in place", "[ops]") {
  check_parameter_grads_added_in_place(kCPU);
}

TEST_CASE("CUDA batch norm adds gamma's and beta's gradients into existing ones in place", "[cuda][ops][batch_norm]") {
  if (gpu_missing("the CUDA in-place batch-norm parameter gradient test")) return;
  check_parameter_grads_added_in_place(kGpu);
}

TEST_CASE("batch_norm_relu keeps no output for its backward, batch_norm_add_relu keeps its own until then", "[ops]") {
  Generator generator(24);
  Tensor input = random_leaf({4, 3, 5}, generator), shortcut = random_leaf({4, 3, 5}, generator);
  Tensor running_mean = Tensor::zeros({3}, DType::f64), running_var = Tensor::ones({3}, DType::f64);
  Tensor out = ops::batch_norm_relu(input, Tensor(), Tensor(), running_mean, running_var, true);
  REQUIRE(out.grad_fn()->name() == "BatchNormReluBackward");
  for (double v : out.to_vector<double>()) REQUIRE(v >= 0.0);
  // The backward recomputes the mask from the input: the node holds no reference to the output.
  REQUIRE(out.storage().use_count() == 1);
  Tensor added = ops::batch_norm_add_relu(input, shortcut, Tensor(), Tensor(), running_mean, running_var, true);
  REQUIRE(added.grad_fn()->name() == "BatchNormAddReluBackward");
  // The residual variant reads its output as the mask (the sum's sign needs the residual too): the node's
  // saved output shares the returned tensor's storage, released after the backward.
  REQUIRE(added.storage().use_count() == 2);
  added.backward(Tensor::ones(added.shape(), DType::f64));
  REQUIRE(added.storage().use_count() == 1);
}

namespace {

// A copy of t on `device` whose data starts `shift` elements past its allocation's start (misaligned for
// the CUDA kernels' vector loads with shift 1).
Tensor shifted_copy(const Tensor& t, Device device, int64_t shift) {
  Tensor padded = Tensor::zeros({t.numel() + shift}, t.dtype(), device);
  Tensor view = padded.slice(0, shift, t.numel() + shift).view(t.shape());
  view.copy_(t);
  return view;
}

// -((x0 - mean) * scale) in the per-channel type S, scale = gamma * invstd rounded once from double: the
// beta that makes x0's pre-relu value (x0 - mean) * scale + beta exactly 0 in the forward's arithmetic.
template <typename S>
double zeroing_beta(double x0, double mean, double invstd, double gamma) {
  const S scale = static_cast<S>(gamma * static_cast<double>(static_cast<S>(invstd)));
  const S centered = static_cast<S>(x0) - static_cast<S>(mean);
  const S product = centered * scale;
  return -static_cast<double>(product);
}

// batch_norm_relu's backward given beta (the mask recomputed from the input) against the same backward given
// the relu output, bit for bit, on a case built to be sharp: the data lie on a grid of eighths, every 5th
// value is its channel's first value x0, and beta is chosen after a first forward (the statistics do not depend on
// it) so that x0's pre-relu value is exactly 0 in the forward's arithmetic. Its relu output is 0 there;
// a recomputation with other coefficients (invstd not rounded to f32 first, say) leaves about an ulp,
// positive for about half the channels, and masks in what the relu output masks out.
void check_recomputed_relu_mask(Device device, DType dtype, const Shape& shape, int64_t shift) {
  const std::string what =
      device.str() + " " + shape_str(shape) + " " + std::string(dtype_name(dtype)) + (shift != 0 ? " misaligned" : "");
  INFO(what);
  Generator generator(67);
  const int64_t channels = shape[1], inner = shape_numel(shape) / (shape[0] * channels);
  std::vector<double> values = Tensor::normal(shape, 0.3, 1.0, generator, DType::f64).to_vector<double>();
  for (double& v : values) v = std::round(v * 8.0) / 8.0;
  const auto channel_of = [&](size_t i) { return (i / static_cast<size_t>(inner)) % static_cast<size_t>(channels); };
  for (size_t i = 0; i < values.size(); i += 5) values[i] = values[channel_of(i) * static_cast<size_t>(inner)];
  const DType channel_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tensor x = shifted_copy(Tensor::from_vector<double>(values, shape).to(dtype), device, shift);
  const Tensor upstream =
      shifted_copy(Tensor::uniform(shape, -1.0, 1.0, generator, DType::f64).to(dtype), device, shift);
  const Tensor gamma = Tensor::uniform({channels}, 0.5, 1.5, generator, channel_dtype).to(device);
  ops::Backend& backend = ops::backend_for(device);
  struct Forward {
    Tensor out, save_mean, save_invstd;
  };
  const auto forward = [&](const Tensor& beta) {
    Forward f{shifted_copy(Tensor::zeros(shape, dtype), device, shift),
              Tensor::empty({channels}, channel_dtype, device), Tensor::empty({channels}, channel_dtype, device)};
    Tensor running_mean = Tensor::zeros({channels}, channel_dtype, device);
    Tensor running_var = Tensor::ones({channels}, channel_dtype, device);
    backend.batch_norm_forward_train(x, gamma, beta, running_mean, running_var, 0.1, 1e-5, true, Tensor(), {}, f.out,
                                     f.save_mean, f.save_invstd);
    return f;
  };
  const Forward first = forward(Tensor::zeros({channels}, channel_dtype, device));
  const std::vector<double> mean = first.save_mean.to(kCPU).to_vector<double>();
  const std::vector<double> invstd = first.save_invstd.to(kCPU).to_vector<double>();
  const std::vector<double> gammas = gamma.to(kCPU).to_vector<double>();
  const std::vector<double> data = x.to(kCPU).to_vector<double>();  // rounded to dtype
  std::vector<double> zeroing(static_cast<size_t>(channels)), x0(static_cast<size_t>(channels));
  for (size_t c = 0; c < x0.size(); ++c) {
    x0[c] = data[c * static_cast<size_t>(inner)];  // batch item 0's first value of channel c
    zeroing[c] = dtype == DType::f64 ? zeroing_beta<double>(x0[c], mean[c], invstd[c], gammas[c])
                                     : zeroing_beta<float>(x0[c], mean[c], invstd[c], gammas[c]);
  }
  const Tensor beta = Tensor::from_vector<double>(zeroing, {channels}).to(channel_dtype).to(device);
  const Forward run = forward(beta);
  require_same_bits(run.save_invstd, first.save_invstd, what + " save_invstd");
  // The forward's arithmetic is the one assumed: the relu output is exactly 0 wherever x is its channel's x0.
  const std::vector<double> out = run.out.to(kCPU).to_vector<double>();
  int64_t at_x0 = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const size_t c = channel_of(i);
    if (data[i] != x0[c]) continue;
    ++at_x0;
    INFO("element " << i << " (channel " << c << ", x0 " << x0[c] << ")");
    REQUIRE(out[i] == 0.0);
  }
  REQUIRE(at_x0 >= static_cast<int64_t>(data.size() / 5));
  const auto backward = [&](const Tensor& relu_output, const Tensor& mask_beta) {
    std::vector<Tensor> grads{shifted_copy(Tensor::zeros(shape, dtype), device, shift),
                              Tensor::empty({channels}, channel_dtype, device),
                              Tensor::empty({channels}, channel_dtype, device)};
    Tensor no_masked_grad;
    backend.batch_norm_backward(upstream, relu_output, x, gamma, mask_beta, run.save_mean, run.save_invstd, grads[0],
                                grads[1], grads[2], no_masked_grad, false);
    return grads;
  };
  const std::vector<Tensor> read = backward(run.out, Tensor()), recomputed = backward(Tensor(), beta);
  require_same_bits(recomputed[0], read[0], what + " grad_input");
  require_same_bits(recomputed[1], read[1], what + " grad_gamma");
  require_same_bits(recomputed[2], read[2], what + " grad_beta");
}

}  // namespace

TEST_CASE("batch_norm_relu's backward recomputes the relu mask from the input bit for bit, pre-relu zeros included",
          "[ops]") {
  for (DType dtype : {DType::f32, DType::f64})
    for (const Shape& shape : {Shape{8, 16, 17, 17}, Shape{392, 64}, Shape{300, 7}, Shape{4, 3, 5, 2}})
      check_recomputed_relu_mask(kCPU, dtype, shape, 0);
}

TEST_CASE("CUDA batch_norm_relu's backward recomputes the relu mask from the input bit for bit, both layouts",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing("the CUDA recomputed relu-mask test")) return;
  // NCHW planes that straddle vectors (17x17), of whole vectors (14x14), a 7x7 batch; channel-innermost rows
  // (channels-last activations) of 64 and 1000 channels, odd (13, 7: single values); aligned and not.
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& shape : {Shape{8, 16, 17, 17}, Shape{16, 6, 14, 14}, Shape{32, 64, 7, 7}, Shape{6272, 64},
                               Shape{64, 1000}, Shape{1000, 13}, Shape{300, 7}})
      for (int64_t shift : {0, 1}) check_recomputed_relu_mask(kGpu, dtype, shape, shift);
}

TEST_CASE("batch_norm_invstd is 1 / sqrt(var + eps) with the gradient -0.5 invstd^3", "[ops]") {
  const std::vector<double> var{0.0, 0.25, 1.0, 3.5, 1e4};
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    Tensor out = ops::batch_norm_invstd(Tensor::from_vector(var, {5}, dtype), 1e-3);
    REQUIRE(out.shape() == Shape{5});
    REQUIRE(out.dtype() == dtype);
    std::vector<double> expected;
    for (double v : var) expected.push_back(1.0 / std::sqrt(v + 1e-3));
    require_close(out.to_vector<double>(), expected, dtype == DType::f32 ? 1e-6 : 1e-14);
  }
  // The invstd batch_norm normalises with: batch_norm of [x, -x] (mean 0, variance x^2) scales x by it.
  Tensor x = Tensor::from_vector<double>({2.0, -2.0}, {2, 1});
  Tensor mean = Tensor::zeros({1}, DType::f64), unit = Tensor::ones({1}, DType::f64);
  const double normalised = ops::batch_norm(x, Tensor(), Tensor(), mean, unit, true, 0.1, 1e-5).to_vector<double>()[0];
  require_close({normalised}, {2.0 * ops::batch_norm_invstd(Tensor::full({1}, 4.0, DType::f64), 1e-5).item()}, 1e-15);

  Generator generator(31);
  require_gradcheck([](const std::vector<Tensor>& in) { return ops::batch_norm_invstd(in[0], 1e-5); },
                    {random_leaf({6}, generator, 0.1, 3.0)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::mul(ops::batch_norm_invstd(ops::mul(in[0], in[0]), 0.5), in[0]);
      },
      {random_leaf({4}, generator)});
}

TEST_CASE("batch_norm_invstd rejects what is not a 1-d f32 or f64 tensor and a negative eps", "[ops]") {
  CHECK_THAT(require_throws<ShapeError>([] {
               ops::batch_norm_invstd(Tensor::ones({2, 3}), 1e-5);
             }),
             Catch::Contains("1-d") && Catch::Contains("[2, 3]"));
  CHECK_THAT(require_throws<ShapeError>([] { ops::batch_norm_invstd(Tensor::ones({0}), 1e-5); }),
             Catch::Contains("non-empty"));
  CHECK_THAT(require_throws<TypeError>([] { ops::batch_norm_invstd(Tensor::ones({3}, DType::bf16), 1e-5); }),
             Catch::Contains("f32 or f64") && Catch::Contains("bf16"));
  CHECK_THAT(require_throws<ConfigError>([] { ops::batch_norm_invstd(Tensor::ones({3}), -1.0); }),
             Catch::Contains("eps"));
}

namespace {

// A leaf copy of t on `device` that requires its gradient.
Tensor leaf_on(const Tensor& t, Device device) {
  Tensor leaf = t.to(device).clone();
  leaf.set_requires_grad(true);
  return leaf;
}

// dual_batch_norm_add_relu against batch_norm on the shortcut followed by batch_norm_add_relu: the output,
// both layers' running statistics and all six gradients bit for bit (the two layers with different
// momentum and eps).
void check_dual_batch_norm(Device device, DType dtype, const Shape& shape, bool channels_last, bool training) {
  const std::string what = device.str() + " " + shape_str(shape) + " " + std::string(dtype_name(dtype)) +
                           (channels_last ? " channels_last" : "") + (training ? " training" : " eval");
  INFO(what);
  Generator generator(71);
  const int64_t channels = channels_last ? shape.back() : shape[1];
  const DType channel_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tensor x = Tensor::normal(shape, 0.3, 1.0, generator, DType::f64).to(dtype);
  const Tensor shortcut = Tensor::normal(shape, -0.2, 2.0, generator, DType::f64).to(dtype);
  const Tensor upstream = Tensor::uniform(shape, -1.0, 1.0, generator, DType::f64).to(dtype).to(device);
  std::vector<Tensor> per_channel;
  for (int i = 0; i < 4; ++i) per_channel.push_back(Tensor::uniform({channels}, 0.5, 1.5, generator, channel_dtype));
  for (int i = 0; i < 4; ++i) per_channel.push_back(Tensor::uniform({channels}, -0.5, 0.5, generator, channel_dtype));
  const auto run = [&](bool fused) {
    Tensor input = leaf_on(x, device), side = leaf_on(shortcut, device);
    Tensor gamma = leaf_on(per_channel[0], device), side_gamma = leaf_on(per_channel[1], device);
    Tensor beta = leaf_on(per_channel[4], device), side_beta = leaf_on(per_channel[5], device);
    Tensor mean = per_channel[6].to(device).clone(), side_mean = per_channel[7].to(device).clone();
    Tensor var = per_channel[2].to(device).clone(), side_var = per_channel[3].to(device).clone();
    Tensor out;
    if (fused) {
      out = ops::dual_batch_norm_add_relu(input, {gamma, beta, mean, var, 0.1, 1e-5}, side,
                                          {side_gamma, side_beta, side_mean, side_var, 0.2, 1e-3}, training,
                                          channels_last);
    } else {
      const Tensor residual =
          ops::batch_norm(side, side_gamma, side_beta, side_mean, side_var, training, 0.2, 1e-3, channels_last);
      out = ops::batch_norm_add_relu(input, residual, gamma, beta, mean, var, training, 0.1, 1e-5, channels_last);
    }
    out.backward(upstream);
    return std::vector<Tensor>{out,          mean,        var,         side_mean,         side_var,        input.grad(),
                               gamma.grad(), beta.grad(), side.grad(), side_gamma.grad(), side_beta.grad()};
  };
  const std::vector<Tensor> fused = run(true), unfused = run(false);
  const char* names[] = {
      "out",        "running_mean", "running_var",   "shortcut running_mean", "shortcut running_var", "grad input",
      "grad gamma", "grad beta",    "grad shortcut", "grad shortcut gamma",   "grad shortcut beta"};
  for (size_t i = 0; i < fused.size(); ++i)
    require_same_bits(fused[i].to(kCPU), unfused[i].to(kCPU), what + " " + names[i]);
}

}  // namespace

TEST_CASE("dual_batch_norm_add_relu equals batch_norm then batch_norm_add_relu bit for bit, forward and gradients",
          "[ops]") {
  for (DType dtype : {DType::f32, DType::f64})
    for (const Shape& shape : {Shape{8, 16, 17, 17}, Shape{6, 4}, Shape{4, 3, 5, 2}})
      for (bool channels_last : {false, true})
        for (bool training : {true, false}) check_dual_batch_norm(kCPU, dtype, shape, channels_last, training);
}

TEST_CASE("CUDA dual_batch_norm_add_relu equals batch_norm then batch_norm_add_relu bit for bit, both layouts",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing("the CUDA dual batch-norm test")) return;
  // NCHW planes that straddle vectors (17x17) and of whole vectors (14x14); channels-last batches of 64 and
  // 13 channels (vectors and single values); training and eval.
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& shape : {Shape{8, 16, 17, 17}, Shape{16, 6, 14, 14}, Shape{8, 7, 7, 64}, Shape{6, 5, 5, 13}})
      for (bool training : {true, false}) {
        check_dual_batch_norm(kGpu, dtype, shape, false, training);
        check_dual_batch_norm(kGpu, dtype, shape, true, training);
      }
}

TEST_CASE("dual_batch_norm_add_relu refuses a shortcut of another shape or dtype, and the backend its misuse",
          "[ops]") {
  Tensor input = Tensor::zeros({4, 3, 2, 2}), mean = Tensor::zeros({3}), var = Tensor::ones({3});
  const ops::BatchNormArgs norm{Tensor(), Tensor(), mean, var, 0.1, 1e-5};
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::dual_batch_norm_add_relu(input, norm, Tensor::zeros({4, 3, 2, 3}), norm, true);
             }),
             Catch::Contains("shortcut f32[4, 3, 2, 3]") && Catch::Contains("input f32[4, 3, 2, 2]"));
  CHECK_THAT(require_throws<TypeError>([&] {
               ops::dual_batch_norm_add_relu(input, norm, Tensor::zeros({4, 3, 2, 2}, DType::f64), norm, true);
             }),
             Catch::Contains("input's dtype"));
  CHECK_THAT(require_throws<Error>([&] { ops::dual_batch_norm_add_relu(input, norm, Tensor(), norm, true); }),
             Catch::Contains("shortcut is undefined"));
  // The shortcut's own per-channel tensors are checked as batch_norm's.
  const ops::BatchNormArgs short_gamma{Tensor::ones({2}), Tensor(), mean, var, 0.1, 1e-5};
  CHECK_THAT(require_throws<ShapeError>([&] {
               ops::dual_batch_norm_add_relu(input, norm, Tensor::zeros({4, 3, 2, 2}), short_gamma, true);
             }),
             Catch::Contains("gamma [2] does not match input [4, 3, 2, 2]"));
  // The backend: no output with a relu or residual; a residual normalization without its residual or with
  // per-channel tensors of another size.
  ops::Backend& cpu = ops::backend_for(kCPU);
  Tensor ones = Tensor::ones({3}), zeros = Tensor::zeros({3}), save_mean = Tensor::empty({3}),
         save_invstd = Tensor::empty({3}), no_out, out = Tensor::empty(input.shape());
  CHECK_THAT(require_throws<Error>([&] {
               cpu.batch_norm_forward_train(input, ones, zeros, mean, var, 0.1, 1e-5, true, Tensor(), {}, no_out,
                                            save_mean, save_invstd);
             }),
             Catch::Contains("without an output"));
  CHECK_THAT(require_throws<Error>([&] {
               cpu.batch_norm_forward_train(input, ones, zeros, mean, var, 0.1, 1e-5, true, Tensor(),
                                            {ones, zeros, zeros, ones}, out, save_mean, save_invstd);
             }),
             Catch::Contains("needs the residual"));
  CHECK_THAT(require_throws<ShapeError>([&] {
               cpu.batch_norm_forward_train(input, ones, zeros, mean, var, 0.1, 1e-5, true, input,
                                            {ones, zeros, Tensor::zeros({2}), ones}, out, save_mean, save_invstd);
             }),
             Catch::Contains("must be [3]") && Catch::Contains("f32[2]"));
  // Statistics only: the running statistics move, no output is written.
  Tensor stats_mean = Tensor::zeros({3}), stats_var = Tensor::ones({3});
  Generator generator(5);
  cpu.batch_norm_forward_train(Tensor::normal({4, 3, 2, 2}, 1.0, 1.0, generator), ones, zeros, stats_mean, stats_var,
                               0.5, 1e-5, false, Tensor(), {}, no_out, save_mean, save_invstd);
  CHECK(!no_out.defined());
  for (double v : stats_mean.to_vector<double>()) CHECK(v != 0.0);
}
