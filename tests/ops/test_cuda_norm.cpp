// Tests of the CUDA batch-norm kernels (src/ops/cuda/norm.cu) through the CUDA Backend: training forward
// and backward against a double-precision host reference, on shapes that split each channel over many
// blocks, rows that are odd, shorter than a warp or misaligned for vector loads, batch 1, inner 1, one
// channel; data far from zero (offset / spread up to 1000); f32, f16 and bf16 data; the running-stat
// update, eval forward, null grad_gamma / grad_beta, and bit-identical results run to run.
// Tagged [cuda]: skipped without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "opsnn/core/rng.h"
#include "opsnn/ops/backend.h"
#include "ops/op_test_helpers.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

const Device kGpu{DeviceType::cuda, 0};
constexpr double kMomentum = 0.1, kEps = 1e-5;

bool gpu_missing() {
  if (cuda_device_count() > 0) return false;
  WARN("no CUDA device: the CUDA batch-norm tests are skipped");
  return true;
}

// Statistics accumulate in double from values exact in f32, whatever the data dtype: f32-tight bounds.
constexpr double kStatisticTolerance = 2e-6;
// grad_gamma and grad_beta are sums: their error is bounded relative to the sum of the terms' magnitudes
// (a few f32 roundings per term), not to the possibly cancelled result.
constexpr double kSumTolerance = 1e-6;
// The data outputs are rounded once to their dtype (bf16 unit roundoff 2^-9, f16 2^-11); f32 ones see a
// few f32 roundings, in the coefficients too.
double output_tolerance(DType dtype) {
  if (dtype == DType::bf16) return 8e-3;
  if (dtype == DType::f16) return 1e-3;
  return 5e-6;
}

// A mean offset far from zero next to unit spread, as coarse as the dtype allows (bf16 and f16 keep 8
// and 11 significant bits).
double offset_for(DType dtype) {
  if (dtype == DType::bf16) return 10.0;
  if (dtype == DType::f16) return 100.0;
  return 1000.0;
}

struct Layout {
  int64_t batch, channels, inner;
  explicit Layout(const Shape& shape)
      : batch(shape[0]), channels(shape[1]), inner(shape_numel(shape) / (shape[0] * shape[1])) {}
  int64_t count() const { return batch * inner; }
  size_t at(int64_t n, int64_t c, int64_t i) const { return static_cast<size_t>((n * channels + c) * inner + i); }
};

// Two-pass per-channel mean and biased variance in double.
struct Statistics {
  std::vector<double> mean, variance;
};
Statistics reference_statistics(const std::vector<double>& x, const Layout& layout) {
  Statistics stats{std::vector<double>(static_cast<size_t>(layout.channels)),
                   std::vector<double>(static_cast<size_t>(layout.channels))};
  for (int64_t c = 0; c < layout.channels; ++c) {
    double sum = 0.0, squared = 0.0;
    for (int64_t n = 0; n < layout.batch; ++n)
      for (int64_t i = 0; i < layout.inner; ++i) sum += x[layout.at(n, c, i)];
    const double mean = sum / static_cast<double>(layout.count());
    for (int64_t n = 0; n < layout.batch; ++n)
      for (int64_t i = 0; i < layout.inner; ++i)
        squared += (x[layout.at(n, c, i)] - mean) * (x[layout.at(n, c, i)] - mean);
    stats.mean[static_cast<size_t>(c)] = mean;
    stats.variance[static_cast<size_t>(c)] = squared / static_cast<double>(layout.count());
  }
  return stats;
}

// |actual - expected| <= tolerance * scale[i] for every i, reporting the first failure.
void require_within(const std::vector<double>& actual, const std::vector<double>& expected,
                    const std::vector<double>& scale, double tolerance, const std::string& what) {
  REQUIRE(actual.size() == expected.size());
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::fabs(actual[i] - expected[i]) / scale[i];
    if (!(error <= worst)) worst = error;  // a NaN sticks
  }
  std::printf("cuda batch norm  %-64s max error %.2e (tolerance %.0e)\n", what.c_str(), worst, tolerance);
  INFO(what << ": max error " << worst << ", tolerance " << tolerance);
  REQUIRE(worst <= tolerance);
}

void require_scaled(const Tensor& actual, const std::vector<double>& expected, double tolerance,
                    const std::string& what) {
  const double error = scaled_error(actual, Tensor::from_vector<double>(expected, actual.shape()));
  std::printf("cuda batch norm  %-64s max scaled error %.2e (tolerance %.0e)\n", what.c_str(), error, tolerance);
  INFO(what << ": max scaled error " << error << ", tolerance " << tolerance);
  REQUIRE(error <= tolerance);
}

// Every output of one training forward and backward on the GPU.
struct Run {
  Tensor out, save_mean, save_invstd, running_mean, running_var, grad_input, grad_gamma, grad_beta;
};

// Inputs of one case: data x and upstream gradient g in `dtype` (values exact in it), f32 parameters
// and running statistics, all on the host.
struct Inputs {
  Tensor x, g, gamma, beta, running_mean, running_var;
};

Inputs make_inputs(const Shape& shape, DType dtype, double offset, double spread, Generator& generator) {
  const int64_t channels = shape[1];
  return {Tensor::normal(shape, offset, spread, generator, DType::f32).to(dtype),
          Tensor::uniform(shape, -1.0, 1.0, generator, DType::f32).to(dtype),
          Tensor::uniform({channels}, 0.5, 1.5, generator), Tensor::uniform({channels}, -0.5, 0.5, generator),
          Tensor::uniform({channels}, -0.5, 0.5, generator), Tensor::uniform({channels}, 0.5, 2.0, generator)};
}

// A GPU copy of t whose data starts `shift` elements past an allocation's start (16-byte misaligned for
// shift 1), so the kernels must take their single-value path.
Tensor on_gpu(const Tensor& t, int64_t shift) {
  if (shift == 0) return t.to(kGpu);
  Tensor padded = Tensor::zeros({t.numel() + shift}, t.dtype(), kGpu);
  Tensor view = padded.slice(0, shift, t.numel() + shift).view(t.shape());
  view.copy_(t);
  return view;
}

Run run_on_gpu(const Inputs& in, int64_t shift = 0) {
  ops::Backend& backend = ops::backend_for(kGpu);
  const Shape& shape = in.x.shape();
  const int64_t channels = shape[1];
  const Tensor x = on_gpu(in.x, shift), g = on_gpu(in.g, shift);
  const Tensor gamma = in.gamma.to(kGpu), beta = in.beta.to(kGpu);
  Run run{on_gpu(Tensor::zeros(shape, in.x.dtype()), shift),
          Tensor::empty({channels}, DType::f32, kGpu),
          Tensor::empty({channels}, DType::f32, kGpu),
          in.running_mean.to(kGpu),
          in.running_var.to(kGpu),
          on_gpu(Tensor::zeros(shape, in.x.dtype()), shift),
          Tensor::empty({channels}, DType::f32, kGpu),
          Tensor::empty({channels}, DType::f32, kGpu)};
  backend.batch_norm_forward_train(x, gamma, beta, run.running_mean, run.running_var, kMomentum, kEps, run.out,
                                   run.save_mean, run.save_invstd);
  backend.batch_norm_backward(g, x, gamma, run.save_mean, run.save_invstd, run.grad_input, run.grad_gamma,
                              run.grad_beta);
  return run;
}

// Checks one GPU run against the double reference computed from the same (dtype-exact) values.
void check_against_reference(const Inputs& in, const Run& run, const std::string& name) {
  const Layout layout(in.x.shape());
  const DType dtype = in.x.dtype();
  const std::vector<double> x = in.x.to_vector<double>(), g = in.g.to_vector<double>();
  const std::vector<double> gamma = in.gamma.to_vector<double>(), beta = in.beta.to_vector<double>();
  const std::vector<double> old_mean = in.running_mean.to_vector<double>();
  const std::vector<double> old_var = in.running_var.to_vector<double>();
  const Statistics stats = reference_statistics(x, layout);
  const size_t channels = static_cast<size_t>(layout.channels);
  const double count = static_cast<double>(layout.count());

  // Statistics: the mean to a fraction of the spread (and of its own size), invstd and the running
  // variance relatively.
  std::vector<double> invstd(channels), new_mean(channels), new_var(channels), mean_scale(channels),
      invstd_scale(channels), var_scale(channels);
  for (size_t c = 0; c < channels; ++c) {
    invstd[c] = 1.0 / std::sqrt(stats.variance[c] + kEps);
    new_mean[c] = (1.0 - kMomentum) * old_mean[c] + kMomentum * stats.mean[c];
    new_var[c] = (1.0 - kMomentum) * old_var[c] + kMomentum * stats.variance[c] * count / (count - 1.0);
    mean_scale[c] = std::fabs(stats.mean[c]) + std::sqrt(stats.variance[c]);
    invstd_scale[c] = invstd[c];
    var_scale[c] = new_var[c];
  }
  require_within(run.save_mean.to_vector<double>(), stats.mean, mean_scale, kStatisticTolerance, name + " save_mean");
  require_within(run.save_invstd.to_vector<double>(), invstd, invstd_scale, kStatisticTolerance, name + " save_invstd");
  require_within(run.running_mean.to_vector<double>(), new_mean, mean_scale, kStatisticTolerance,
                 name + " running_mean");
  require_within(run.running_var.to_vector<double>(), new_var, var_scale, kStatisticTolerance, name + " running_var");

  // Outputs and gradients from the saved (f32) statistics the kernels used, as the CPU twin does.
  const std::vector<double> mean = run.save_mean.to_vector<double>(),
                            saved_invstd = run.save_invstd.to_vector<double>();
  std::vector<double> out(x.size()), grad_input(x.size()), grad_input_scale(x.size()), grad_gamma(channels),
      grad_beta(channels);
  std::vector<double> grad_gamma_scale(channels), grad_beta_scale(channels);
  for (int64_t c = 0; c < layout.channels; ++c) {
    const size_t k = static_cast<size_t>(c);
    double sum_grad = 0.0, sum_grad_centered = 0.0, magnitude_grad = 0.0, magnitude_grad_centered = 0.0;
    for (int64_t n = 0; n < layout.batch; ++n)
      for (int64_t i = 0; i < layout.inner; ++i) {
        const size_t at = layout.at(n, c, i);
        out[at] = (x[at] - mean[k]) * gamma[k] * saved_invstd[k] + beta[k];
        sum_grad += g[at];
        sum_grad_centered += g[at] * (x[at] - mean[k]);
        magnitude_grad += std::fabs(g[at]);
        magnitude_grad_centered += std::fabs(g[at] * (x[at] - mean[k]));
      }
    grad_beta[k] = sum_grad;
    grad_gamma[k] = sum_grad_centered * saved_invstd[k];
    grad_beta_scale[k] = magnitude_grad + 1e-30;
    grad_gamma_scale[k] = magnitude_grad_centered * saved_invstd[k] + 1e-30;
    const double scale = gamma[k] * saved_invstd[k];
    const double slope = scale * sum_grad_centered * saved_invstd[k] * saved_invstd[k] / count;
    for (int64_t n = 0; n < layout.batch; ++n)
      for (int64_t i = 0; i < layout.inner; ++i) {
        const size_t at = layout.at(n, c, i);
        grad_input[at] = scale * (g[at] - sum_grad / count) - slope * (x[at] - mean[k]);
        // The terms cancel (exactly, up to eps, when a channel has two values): errors are relative to them.
        grad_input_scale[at] = std::fabs(scale * g[at]) + std::fabs(scale * sum_grad / count) +
                               std::fabs(slope * (x[at] - mean[k])) + 1e-30;
      }
  }
  require_scaled(run.out, out, output_tolerance(dtype), name + " out");
  require_within(run.grad_input.to_vector<double>(), grad_input, grad_input_scale, output_tolerance(dtype),
                 name + " grad_input");
  require_within(run.grad_gamma.to_vector<double>(), grad_gamma, grad_gamma_scale, kSumTolerance, name + " grad_gamma");
  require_within(run.grad_beta.to_vector<double>(), grad_beta, grad_beta_scale, kSumTolerance, name + " grad_beta");
}

std::string case_name(const Shape& shape, DType dtype, const std::string& note = "") {
  return shape_str(shape) + " " + std::string(dtype_name(dtype)) + note;
}

void require_identical(const Tensor& a, const Tensor& b, const std::string& what) {
  INFO(what);
  REQUIRE(a.shape() == b.shape());
  const std::vector<float> left = a.to(DType::f32).to_vector<float>(), right = b.to(DType::f32).to_vector<float>();
  REQUIRE(std::memcmp(left.data(), right.data(), left.size() * sizeof(float)) == 0);
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("CUDA batch norm training matches a double reference on split, odd and tiny shapes",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(41);
  // Many splits per channel with odd rows; rows shorter than a warp; rows one vector long; batch 1
  // with one long row; inner 1 ([N, C]); one channel; 4-D; vector-friendly rows with many splits.
  const std::vector<Shape> shapes = {{64, 3, 3137}, {2, 5, 1},  {1, 1, 7},      {512, 4, 49},  {7, 5, 4},
                                     {100, 3, 8},   {1, 2, 100003}, {300, 7}, {256, 1, 64}, {8, 4, 2, 3},
                                     {32, 2, 4104}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes) {
      const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
      check_against_reference(in, run_on_gpu(in), case_name(shape, dtype));
    }
}

TEST_CASE("CUDA batch norm keeps precision for a large mean and for a large spread", "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(42);
  // Offset 1000 (variance 1e-6 of the mean squared) and spread 1000 around a small mean, vector and
  // single-value paths.
  for (const Shape& shape : std::vector<Shape>{{16, 3, 4096}, {16, 3, 4095}}) {
    const Inputs far = make_inputs(shape, DType::f32, 1000.0, 1.0, generator);
    check_against_reference(far, run_on_gpu(far), case_name(shape, DType::f32, " mean 1000"));
    const Inputs wide = make_inputs(shape, DType::f32, 0.5, 1000.0, generator);
    check_against_reference(wide, run_on_gpu(wide), case_name(shape, DType::f32, " spread 1000"));
  }
}

TEST_CASE("CUDA batch norm takes the single-value path for misaligned rows with the same results",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(43);
  for (DType dtype : kDtypes) {
    const Shape shape{16, 3, 1024};
    const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
    const Run aligned = run_on_gpu(in), misaligned = run_on_gpu(in, 1);
    check_against_reference(in, misaligned, case_name(shape, dtype, " misaligned"));
    // Both paths sum in double: their statistics agree to f32 rounding.
    require_scaled(misaligned.save_invstd, aligned.save_invstd.to_vector<double>(), kStatisticTolerance,
                   case_name(shape, dtype, " misaligned vs aligned save_invstd"));
  }
}

TEST_CASE("CUDA batch norm is bit-identical run to run", "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(44);
  for (DType dtype : kDtypes)
    for (const Shape& shape : std::vector<Shape>{{32, 3, 4104}, {64, 3, 3137}, {1, 1, 200003}}) {
      const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
      const Run first = run_on_gpu(in), second = run_on_gpu(in);
      const std::string name = case_name(shape, dtype);
      require_identical(first.out, second.out, name + " out");
      require_identical(first.save_mean, second.save_mean, name + " save_mean");
      require_identical(first.save_invstd, second.save_invstd, name + " save_invstd");
      require_identical(first.running_mean, second.running_mean, name + " running_mean");
      require_identical(first.running_var, second.running_var, name + " running_var");
      require_identical(first.grad_input, second.grad_input, name + " grad_input");
      require_identical(first.grad_gamma, second.grad_gamma, name + " grad_gamma");
      require_identical(first.grad_beta, second.grad_beta, name + " grad_beta");
    }
}

TEST_CASE("CUDA batch norm backward without grad_gamma and grad_beta gives the same grad_input",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(45);
  for (DType dtype : kDtypes) {
    const Shape shape{8, 3, 520};
    const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
    const Run full = run_on_gpu(in);
    Tensor grad_input = Tensor::zeros(shape, dtype, kGpu), no_gamma, no_beta;
    ops::backend_for(kGpu).batch_norm_backward(in.g.to(kGpu), in.x.to(kGpu), in.gamma.to(kGpu), full.save_mean,
                                               full.save_invstd, grad_input, no_gamma, no_beta);
    require_identical(grad_input, full.grad_input, case_name(shape, dtype, " grad_input without parameter grads"));
  }
}

TEST_CASE("CUDA batch norm eval normalizes with the running statistics", "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(46);
  for (DType dtype : kDtypes)
    for (const Shape& shape : std::vector<Shape>{{64, 3, 3137}, {2, 5, 1}, {32, 2, 4104}, {1, 4}}) {
      const Inputs in = make_inputs(shape, dtype, 0.0, 2.0, generator);
      const Layout layout(shape);
      Tensor out = Tensor::zeros(shape, dtype, kGpu);
      ops::backend_for(kGpu).batch_norm_forward_eval(in.x.to(kGpu), in.gamma.to(kGpu), in.beta.to(kGpu),
                                                     in.running_mean.to(kGpu), in.running_var.to(kGpu), kEps, out);
      const std::vector<double> x = in.x.to_vector<double>(), gamma = in.gamma.to_vector<double>(),
                                beta = in.beta.to_vector<double>(), mean = in.running_mean.to_vector<double>(),
                                var = in.running_var.to_vector<double>();
      std::vector<double> expected(x.size());
      for (int64_t n = 0; n < layout.batch; ++n)
        for (int64_t c = 0; c < layout.channels; ++c)
          for (int64_t i = 0; i < layout.inner; ++i) {
            const size_t at = layout.at(n, c, i), k = static_cast<size_t>(c);
            expected[at] = (x[at] - mean[k]) * gamma[k] / std::sqrt(var[k] + kEps) + beta[k];
          }
      require_scaled(out, expected, output_tolerance(dtype), case_name(shape, dtype, " eval out"));
    }
}
