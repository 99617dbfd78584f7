// Tests of the CUDA batch-norm kernels (src/ops/cuda/norm.cu) through the CUDA Backend: training forward
// and backward against a double-precision host reference, on shapes that split each channel over many
// blocks, rows that are odd, shorter than a warp or misaligned for vector loads, batch 1, inner 1, one
// channel; data far from zero (offset / spread up to 1000); f32, f16 and bf16 data; the running-stat
// update, eval forward, null grad_gamma / grad_beta, and bit-identical results run to run. The fused
// relu (batch_norm_relu) on the same cases against the reference with the relu applied, and against the
// CPU twin. Planes that are no multiple of the vector width (14x14, 7x7, odd ones; vectors straddling
// two channels, a tail of single values) at every alignment, plain and fused. Channel-innermost rows
// ([N * H * W, C]: channels-last activations as ops::batch_norm passes them, norm_rows.cu's kernels) with
// C = 64, 96, 13, 8, 1000, 3 at every alignment, plain and fused, eval, run-to-run identity; and the
// channels-last op on [N, H, W, C] GPU tensors against the CPU op, training and eval. The fused residual add
// (batch_norm_add_relu) bit for bit against batch norm followed by add_relu on the GPU, both layouts. The
// fused batch_norm_relu + stride-2 max pooling (windows 2, 3 and 5, odd planes, ties): its forward bit for
// bit against the unfused pair, its backward against a double reference, run-to-run identity, gradients
// added in place, and the op through autograd against the composition on the GPU and the CPU.
// Tagged [cuda]: skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/backend.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

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
  size_t worst_at = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::fabs(actual[i] - expected[i]) / scale[i];
    if (!(error <= worst)) worst = error, worst_at = i;  // a NaN sticks
  }
  std::printf("cuda batch norm  %-64s max error %.2e (tolerance %.0e)\n", what.c_str(), worst, tolerance);
  INFO(what << ": max error " << worst << ", tolerance " << tolerance << "; at element " << worst_at << ": "
            << actual[worst_at] << " vs " << expected[worst_at] << ", scale " << scale[worst_at]);
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
          Tensor::uniform({channels}, 0.5, 1.5, generator),
          Tensor::uniform({channels}, -0.5, 0.5, generator),
          Tensor::uniform({channels}, -0.5, 0.5, generator),
          Tensor::uniform({channels}, 0.5, 2.0, generator)};
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

// With `relu` the fused relu(batch norm), its backward masked by the output.
Run run_on_gpu(const Inputs& in, int64_t shift = 0, bool relu = false) {
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
  backend.batch_norm_forward_train(x, gamma, beta, run.running_mean, run.running_var, kMomentum, kEps, relu, Tensor(),
                                   {}, run.out, run.save_mean, run.save_invstd);
  Tensor no_masked_grad;
  backend.batch_norm_backward(g, relu ? run.out : Tensor(), x, gamma, Tensor(), run.save_mean, run.save_invstd,
                              run.grad_input, run.grad_gamma, run.grad_beta, no_masked_grad, false);
  return run;
}

// Checks one GPU run against the double reference computed from the same (dtype-exact) values. With
// `relu` the reference output is relu'd and its gradient is g where the run's output is positive, else 0
// (the mask the kernels read; at a pre-relu value within rounding of 0 either side is right).
void check_against_reference(const Inputs& in, const Run& run, const std::string& name, bool relu = false) {
  const Layout layout(in.x.shape());
  const DType dtype = in.x.dtype();
  const std::vector<double> x = in.x.to_vector<double>();
  std::vector<double> g = in.g.to_vector<double>();
  if (relu) {
    const std::vector<double> mask = run.out.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) g[i] = mask[i] > 0.0 ? g[i] : 0.0;
  }
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
        if (relu && out[at] < 0.0) out[at] = 0.0;
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
    const double slope_magnitude =
        std::fabs(scale) * magnitude_grad_centered * saved_invstd[k] * saved_invstd[k] / count;
    for (int64_t n = 0; n < layout.batch; ++n)
      for (int64_t i = 0; i < layout.inner; ++i) {
        const size_t at = layout.at(n, c, i);
        grad_input[at] = scale * (g[at] - sum_grad / count) - slope * (x[at] - mean[k]);
        // The terms cancel (exactly, up to eps, when a channel has two values): errors are relative to them,
        // and the two per-channel sums' errors relative to the magnitudes summed (a masked gradient's sum
        // can cancel to a small fraction of its terms).
        grad_input_scale[at] = std::fabs(scale * g[at]) + std::fabs(scale) * magnitude_grad / count +
                               std::fabs(slope_magnitude * (x[at] - mean[k])) + 1e-30;
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

// Every output, statistic and gradient of two runs equal bit for bit.
void require_identical_runs(const Run& first, const Run& second, const std::string& name) {
  require_identical(first.out, second.out, name + " out");
  require_identical(first.save_mean, second.save_mean, name + " save_mean");
  require_identical(first.save_invstd, second.save_invstd, name + " save_invstd");
  require_identical(first.running_mean, second.running_mean, name + " running_mean");
  require_identical(first.running_var, second.running_var, name + " running_var");
  require_identical(first.grad_input, second.grad_input, name + " grad_input");
  require_identical(first.grad_gamma, second.grad_gamma, name + " grad_gamma");
  require_identical(first.grad_beta, second.grad_beta, name + " grad_beta");
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// Every dtype, shape, alignment shift (0, 1 and 4 values) and relu setting against the double reference.
void check_alignments_against_reference(const std::vector<Shape>& shapes, Generator& generator) {
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes)
      for (int64_t shift : {0, 1, 4})
        for (bool relu : {false, true}) {
          const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
          const std::string note = std::string(relu ? " relu" : "") + " shift " + std::to_string(shift);
          check_against_reference(in, run_on_gpu(in, shift, relu), case_name(shape, dtype, note), relu);
        }
}

}  // namespace

TEST_CASE("CUDA batch norm training matches a double reference on split, odd and tiny shapes",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(41);
  // Many splits per channel with odd rows; rows shorter than a warp; rows one vector long; batch 1
  // with one long row; inner 1 ([N, C]); one channel; 4-D; vector-friendly rows with many splits.
  const std::vector<Shape> shapes = {{64, 3, 3137},  {2, 5, 1}, {1, 1, 7},    {512, 4, 49}, {7, 5, 4},    {100, 3, 8},
                                     {1, 2, 100003}, {300, 7},  {256, 1, 64}, {8, 4, 2, 3}, {32, 2, 4104}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes) {
      const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
      check_against_reference(in, run_on_gpu(in), case_name(shape, dtype));
    }
}

TEST_CASE("CUDA batch norm vectorizes planes that are no multiple of the vector width",
          "[cuda][ops][batch_norm][vector]") {
  if (gpu_missing()) return;
  Generator generator(49);
  // ResNet-50's 14x14 and 7x7 planes (a 16-bit partials pass loads 4 or 1 values, the map passes 8 with
  // vectors straddling two channels' rows), with many splits; odd planes of 13 and 9 values with a tail
  // the whole vectors leave (195 and 135 values); 7 values (shorter than a 16-bit vector, longer than an
  // f32 one); planes of 10 and 12 values (2 and 4 values per partials load). Aligned, misaligned by one
  // value (single values everywhere) and by four (16-bit data: 8-byte partials loads where inner allows,
  // single-value map passes; f32 data: aligned again).
  const std::vector<Shape> shapes = {{16, 8, 196}, {256, 4, 196}, {8, 32, 14, 14}, {16, 8, 49}, {1024, 3, 49},
                                     {5, 3, 13},   {3, 5, 9},     {3, 7, 7},       {9, 5, 10},  {4, 3, 12}};
  check_alignments_against_reference(shapes, generator);
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
    for (const Shape& shape :
         std::vector<Shape>{{32, 3, 4104}, {64, 3, 3137}, {1, 1, 200003}, {64, 6, 196}, {256, 6, 49}, {5, 3, 13}}) {
      const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
      require_identical_runs(run_on_gpu(in), run_on_gpu(in), case_name(shape, dtype));
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
    Tensor grad_input = Tensor::zeros(shape, dtype, kGpu), no_gamma, no_beta, no_masked_grad;
    ops::backend_for(kGpu).batch_norm_backward(in.g.to(kGpu), Tensor(), in.x.to(kGpu), in.gamma.to(kGpu), Tensor(),
                                               full.save_mean, full.save_invstd, grad_input, no_gamma, no_beta,
                                               no_masked_grad, false);
    require_identical(grad_input, full.grad_input, case_name(shape, dtype, " grad_input without parameter grads"));
  }
}

TEST_CASE("CUDA batch norm eval normalizes with the running statistics", "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(46);
  for (DType dtype : kDtypes)
    for (const Shape& shape :
         std::vector<Shape>{{64, 3, 3137}, {2, 5, 1}, {32, 2, 4104}, {1, 4}, {784, 96}, {1000, 13}}) {
      const Inputs in = make_inputs(shape, dtype, 0.0, 2.0, generator);
      const Layout layout(shape);
      Tensor out = Tensor::zeros(shape, dtype, kGpu);
      ops::backend_for(kGpu).batch_norm_forward_eval(in.x.to(kGpu), in.gamma.to(kGpu), in.beta.to(kGpu),
                                                     in.running_mean.to(kGpu), in.running_var.to(kGpu), kEps, false,
                                                     Tensor(), out);
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

// ---- batch_norm_relu: the relu fused into the normalizing pass, its mask into the backward ----

TEST_CASE("CUDA batch_norm_relu training matches the double reference, aligned and misaligned",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(47);
  // Odd rows, rows shorter than a warp, inner 1, one long row, rows one vector long, 4-D, many splits.
  const std::vector<Shape> shapes = {{64, 3, 3137},  {2, 5, 1}, {7, 5, 4},    {100, 3, 8},
                                     {1, 2, 100003}, {300, 7},  {8, 4, 2, 3}, {32, 2, 4104}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes)
      for (int64_t shift : {0, 1}) {
        const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
        check_against_reference(in, run_on_gpu(in, shift, true),
                                case_name(shape, dtype, shift == 0 ? " relu" : " relu misaligned"), true);
      }
}

TEST_CASE("CUDA batch_norm_relu equals batch norm followed by relu on the GPU, forward and backward",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(48);
  ops::Backend& backend = ops::backend_for(kGpu);
  for (DType dtype : kDtypes)
    for (const Shape& shape :
         std::vector<Shape>{{32, 3, 4104}, {16, 5, 1023}, {300, 7}, {8, 4, 2, 3}, {16, 6, 196}, {8, 5, 13}})
      for (int64_t shift : {0, 1}) {
        const std::string name = case_name(shape, dtype, shift == 0 ? "" : " misaligned");
        const Inputs in = make_inputs(shape, dtype, 0.0, 1.0, generator);
        const Run fused = run_on_gpu(in, shift, true), plain = run_on_gpu(in, shift, false);
        // The same statistics; the output is relu of batch norm's (relu in f32 before the rounding
        // changes at most the sign of a zero, which compares equal).
        require_identical(fused.save_mean, plain.save_mean, name + " save_mean");
        require_identical(fused.save_invstd, plain.save_invstd, name + " save_invstd");
        require_identical(fused.running_var, plain.running_var, name + " running_var");
        const std::vector<double> fused_out = fused.out.to_vector<double>(), plain_out = plain.out.to_vector<double>();
        for (size_t i = 0; i < plain_out.size(); ++i) {
          if (fused_out[i] == std::max(plain_out[i], 0.0)) continue;
          INFO(name << " element " << i << ": " << fused_out[i] << " vs relu of " << plain_out[i]);
          REQUIRE(fused_out[i] == std::max(plain_out[i], 0.0));
        }
        // The unfused backward of the masked gradient (relu's backward, materialised) is bit-identical.
        Tensor masked = Tensor::empty(shape, dtype, kGpu);
        backend.relu_backward(in.g.to(kGpu), fused.out.contiguous(), masked);
        Inputs masked_in = in;
        masked_in.g = masked.to(kCPU);
        const Run reference = run_on_gpu(masked_in, shift, false);
        require_identical(fused.grad_input, reference.grad_input, name + " grad_input");
        require_identical(fused.grad_gamma, reference.grad_gamma, name + " grad_gamma");
        require_identical(fused.grad_beta, reference.grad_beta, name + " grad_beta");

        // Eval: relu of the eval forward.
        Tensor eval_fused = Tensor::zeros(shape, dtype, kGpu), eval_plain = Tensor::zeros(shape, dtype, kGpu);
        const Tensor x = on_gpu(in.x, shift), gamma = in.gamma.to(kGpu), beta = in.beta.to(kGpu),
                     running_mean = in.running_mean.to(kGpu), running_var = in.running_var.to(kGpu);
        backend.batch_norm_forward_eval(x, gamma, beta, running_mean, running_var, kEps, true, Tensor(), eval_fused);
        backend.batch_norm_forward_eval(x, gamma, beta, running_mean, running_var, kEps, false, Tensor(), eval_plain);
        const std::vector<double> eval_fused_values = eval_fused.to_vector<double>(),
                                  eval_plain_values = eval_plain.to_vector<double>();
        for (size_t i = 0; i < eval_plain_values.size(); ++i) {
          if (eval_fused_values[i] == std::max(eval_plain_values[i], 0.0)) continue;
          INFO(name << " eval element " << i << ": " << eval_fused_values[i] << " vs relu of " << eval_plain_values[i]);
          REQUIRE(eval_fused_values[i] == std::max(eval_plain_values[i], 0.0));
        }
      }
}

TEST_CASE("CUDA batch_norm_relu matches its CPU twin", "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(49);
  ops::Backend& cpu = ops::backend_for(kCPU);
  for (DType dtype : kDtypes)
    for (const Shape& shape : std::vector<Shape>{{7, 5, 4},
                                                 {100, 3, 8},
                                                 {300, 7},
                                                 {8, 4, 2, 3},
                                                 {16, 3, 1023},
                                                 {4, 6, 49},
                                                 {3, 5, 13},
                                                 {392, 64},
                                                 {1000, 13},
                                                 {784, 96}})
      for (int64_t shift : {0, 1}) {
        const std::string name = case_name(shape, dtype, shift == 0 ? " relu vs CPU" : " relu misaligned vs CPU");
        const Inputs in = make_inputs(shape, dtype, 0.0, 1.0, generator);
        const Run gpu = run_on_gpu(in, shift, true);
        // The CPU twin computes in f32 on the same values; its backward reads the GPU's mask and saved
        // statistics, so both sides differentiate the same function.
        const int64_t channels = shape[1];
        const Tensor x = in.x.to(DType::f32), g = in.g.to(DType::f32);
        Tensor out = Tensor::empty(shape), save_mean = Tensor::empty({channels}),
               save_invstd = Tensor::empty({channels});
        Tensor running_mean = in.running_mean.clone(), running_var = in.running_var.clone();
        cpu.batch_norm_forward_train(x, in.gamma, in.beta, running_mean, running_var, kMomentum, kEps, true, Tensor(),
                                     {}, out, save_mean, save_invstd);
        const double tolerance = dtype == DType::f32 ? 1e-5 : output_tolerance(dtype);
        require_scaled(gpu.out, out.to_vector<double>(), tolerance, name + " out");
        require_scaled(gpu.save_mean, save_mean.to_vector<double>(), kStatisticTolerance, name + " save_mean");
        require_scaled(gpu.save_invstd, save_invstd.to_vector<double>(), kStatisticTolerance, name + " save_invstd");
        require_scaled(gpu.running_var, running_var.to_vector<double>(), kStatisticTolerance, name + " running_var");

        Tensor grad_input = Tensor::empty(shape), grad_gamma = Tensor::empty({channels}),
               grad_beta = Tensor::empty({channels}), no_masked_grad;
        cpu.batch_norm_backward(g, gpu.out.to(DType::f32).to(kCPU).contiguous(), x, in.gamma, Tensor(),
                                gpu.save_mean.to(kCPU), gpu.save_invstd.to(kCPU), grad_input, grad_gamma, grad_beta,
                                no_masked_grad, false);
        require_scaled(gpu.grad_input, grad_input.to_vector<double>(), tolerance, name + " grad_input");
        require_scaled(gpu.grad_gamma, grad_gamma.to_vector<double>(), 1e-5, name + " grad_gamma");
        require_scaled(gpu.grad_beta, grad_beta.to_vector<double>(), 1e-5, name + " grad_beta");

        Tensor eval_gpu = Tensor::zeros(shape, dtype, kGpu), eval_cpu = Tensor::empty(shape);
        ops::backend_for(kGpu).batch_norm_forward_eval(on_gpu(in.x, shift), in.gamma.to(kGpu), in.beta.to(kGpu),
                                                       in.running_mean.to(kGpu), in.running_var.to(kGpu), kEps, true,
                                                       Tensor(), eval_gpu);
        cpu.batch_norm_forward_eval(x, in.gamma, in.beta, in.running_mean, in.running_var, kEps, true, Tensor(),
                                    eval_cpu);
        require_scaled(eval_gpu, eval_cpu.to_vector<double>(), tolerance, name + " eval out");
      }
}

// ---- channel-innermost rows: channels-last activations ([N, H, W, C] as [N * H * W, C]) ----

TEST_CASE("CUDA batch norm on channel-innermost rows matches the double reference", "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(50);
  // ResNet-like NHWC batches (8x7x7 and 2x56x56 positions of 64 channels, 4x14x14 of 96), odd channel
  // counts (13: single values; 3), many rows of few channels (many splits), 1000 channels (a partial
  // block of units), two rows. Aligned, misaligned by one value (single values) and by four (16-bit data:
  // 8-byte units).
  const std::vector<Shape> shapes = {{392, 64}, {6272, 64}, {784, 96},  {1000, 13},
                                     {49, 13},  {20000, 8}, {64, 1000}, {2, 3}};
  check_alignments_against_reference(shapes, generator);
}

TEST_CASE("CUDA batch norm merges hundreds of partials per channel in order", "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(52);
  // Enough values per channel for more partials than a finalize block has threads (264 splits of
  // channel-innermost rows on a 132-SM GPU, two per SM; about 490 of NCHW planes), with a last split
  // shorter than the others.
  const std::vector<Shape> shapes = {{400003, 16}, {8, 2, 1000003}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes)
      for (bool relu : {false, true}) {
        const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
        const Run first = run_on_gpu(in, 0, relu);
        check_against_reference(in, first, case_name(shape, dtype, relu ? " relu" : ""), relu);
        require_identical_runs(first, run_on_gpu(in, 0, relu), case_name(shape, dtype, relu ? " relu" : ""));
      }
}

TEST_CASE("CUDA batch norm on channel-innermost rows is bit-identical run to run", "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(51);
  for (DType dtype : kDtypes)
    for (const Shape& shape : std::vector<Shape>{{6272, 64}, {784, 96}, {1000, 13}, {20000, 8}}) {
      const Inputs in = make_inputs(shape, dtype, offset_for(dtype), 1.0, generator);
      require_identical_runs(run_on_gpu(in, 0, true), run_on_gpu(in, 0, true), case_name(shape, dtype, " relu"));
    }
}

TEST_CASE("CUDA channels-last batch_norm and batch_norm_relu match the CPU ops, training and eval",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(52);
  for (DType dtype : kDtypes)
    for (const Shape& shape : std::vector<Shape>{{4, 7, 7, 64}, {2, 14, 14, 96}, {3, 5, 6, 13}, {8, 1, 1, 64}})
      for (bool training : {true, false})
        for (bool relu : {false, true}) {
          const std::string name =
              case_name(shape, dtype, std::string(training ? " train" : " eval") + (relu ? " relu" : "") + " NHWC op");
          const int64_t channels = shape[3];
          const Tensor x = Tensor::normal(shape, 0.5, 2.0, generator, DType::f32).to(dtype).to(DType::f32);
          const Tensor g = Tensor::uniform(shape, -1.0, 1.0, generator, DType::f32).to(dtype).to(DType::f32);
          const Tensor gamma = Tensor::uniform({channels}, 0.5, 1.5, generator);
          const Tensor beta = Tensor::uniform({channels}, -0.5, 0.5, generator);
          const Tensor running_mean = Tensor::uniform({channels}, -0.5, 0.5, generator);
          const Tensor running_var = Tensor::uniform({channels}, 0.5, 2.0, generator);
          const auto op = relu ? ops::batch_norm_relu : ops::batch_norm;
          // One run on `device` in `run_dtype`: output, input / gamma / beta gradients, running statistics.
          auto run = [&](Device device, DType run_dtype) {
            Tensor input = x.to(run_dtype).to(device).detach(), weight = gamma.to(device).detach(),
                   bias = beta.to(device).detach();
            for (Tensor* t : {&input, &weight, &bias}) t->set_requires_grad(true);
            Tensor mean = running_mean.to(device).clone(), var = running_var.to(device).clone();
            const Tensor out = op(input, weight, bias, mean, var, training, kMomentum, kEps, true);
            out.backward(g.to(run_dtype).to(device));
            return std::vector<Tensor>{out, input.grad(), weight.grad(), bias.grad(), mean, var};
          };
          const std::vector<Tensor> gpu = run(kGpu, dtype), cpu = run(kCPU, DType::f32);
          const char* what[] = {"out", "grad_input", "grad_gamma", "grad_beta", "running_mean", "running_var"};
          const double data_tolerance = dtype == DType::f32 ? 1e-5 : output_tolerance(dtype);
          // A fused relu in f16/bf16 may mask a value the f32 CPU keeps (an output within rounding of 0), which
          // moves the gradient sums by more than f32 rounding: those runs compare the forward only (the
          // backend tests above check the masked backward against the CPU given the GPU's mask).
          const bool compare_gradients = !(relu && dtype != DType::f32);
          for (size_t i = 0; i < gpu.size(); ++i) {
            if (!compare_gradients && i >= 1 && i <= 3) continue;
            // The data outputs are rounded to dtype; gamma / beta gradients and statistics are f32 sums.
            const double tolerance = i < 2 ? data_tolerance : 1e-5;
            const Tensor actual = gpu[i].to(kCPU).to(DType::f32);
            REQUIRE(actual.shape() == cpu[i].shape());
            require_scaled(actual, cpu[i].to_vector<double>(), tolerance, name + " " + what[i]);
          }
        }
}

TEST_CASE("CUDA batch_norm_add_relu equals batch norm followed by add_relu bit for bit, both layouts",
          "[cuda][ops][batch_norm]") {
  if (gpu_missing()) return;
  Generator generator(53);
  // NCHW planes that fill vectors, odd ones (vectors straddling channels, a tail of single values) and
  // inner 1; NHWC rows of 64 and of 13 channels. The residual also one element off alignment (its loads then
  // set the vector width). Every 5th residual value cancels the input, which in eval (running statistics 0
  // and 1, eps 0, gamma 1, beta 0: the identity) puts sums of exactly 0 on the relu's kink.
  const std::vector<std::pair<Shape, bool>> cases = {{{4, 8, 14, 14}, false},
                                                     {{3, 5, 7, 9}, false},
                                                     {{6, 16, 1, 1}, false},
                                                     {{4, 7, 7, 64}, true},
                                                     {{3, 5, 6, 13}, true}};
  for (DType dtype : kDtypes)
    for (const auto& entry : cases)
      for (int64_t shift : {0, 1})
        for (bool training : {true, false}) {
          // Named copies, not structured bindings: the lambda below captures channels_last (clang 14 cannot
          // capture a binding).
          const Shape& shape = entry.first;
          const bool channels_last = entry.second;
          const std::string name =
              case_name(shape, dtype,
                        std::string(training ? " train" : " eval") + (channels_last ? " NHWC" : "") +
                            " residual shift " + std::to_string(shift));
          const int64_t channels = channels_last ? shape[3] : shape[1];
          const Tensor x = Tensor::normal(shape, 0.3, 1.0, generator, DType::f32).to(dtype);
          std::vector<double> added = Tensor::uniform(shape, -1.0, 1.0, generator, DType::f64).to_vector<double>();
          const std::vector<double> x_values = x.to_vector<double>();
          for (size_t i = 0; i < added.size(); i += 5) added[i] = -x_values[i];
          const Tensor residual = Tensor::from_vector<double>(added, shape).to(dtype);
          const Tensor g = Tensor::uniform(shape, -1.0, 1.0, generator, DType::f32).to(dtype).to(kGpu);
          const Tensor gamma = training ? Tensor::uniform({channels}, 0.5, 1.5, generator) : Tensor::ones({channels});
          const Tensor beta = training ? Tensor::uniform({channels}, -0.5, 0.5, generator) : Tensor::zeros({channels});
          const Tensor running_mean = Tensor::zeros({channels});
          const Tensor running_var = Tensor::ones({channels});  // with eps 0, eval is the identity
          auto run = [&](bool fused) {
            Tensor input = x.to(kGpu).detach(), shortcut = on_gpu(residual, shift).detach();
            Tensor weight = gamma.to(kGpu).detach(), bias = beta.to(kGpu).detach();
            for (Tensor* t : {&input, &shortcut, &weight, &bias}) t->set_requires_grad(true);
            Tensor mean = running_mean.to(kGpu), var = running_var.to(kGpu);
            const Tensor out = fused ? ops::batch_norm_add_relu(input, shortcut, weight, bias, mean, var, training,
                                                                kMomentum, 0.0, channels_last)
                                     : ops::add_relu(ops::batch_norm(input, weight, bias, mean, var, training,
                                                                     kMomentum, 0.0, channels_last),
                                                     shortcut);
            out.backward(g);
            return std::vector<Tensor>{out, input.grad(), weight.grad(), bias.grad(), shortcut.grad(), mean, var};
          };
          const std::vector<Tensor> fused = run(true), unfused = run(false);
          const char* what[] = {"out",           "grad_input",   "grad_gamma", "grad_beta",
                                "grad_residual", "running_mean", "running_var"};
          for (size_t i = 0; i < fused.size(); ++i) {
            const Tensor a = fused[i].to(kCPU), b = unfused[i].to(kCPU);
            INFO(name << " " << what[i]);
            REQUIRE(a.shape() == b.shape());
            REQUIRE(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
          }
          if (!training) {  // the kink was reached
            int64_t zeros = 0;
            for (double v : fused[0].to(kCPU).to_vector<double>()) zeros += v == 0.0;
            CHECK(zeros > 0);
          }
        }
}

// ---- training batch_norm_relu followed by max pooling, fused (a ResNet stem's tail) ----

namespace {

// One case of the fused pair: NCHW shape and pooling window (square), stride 2.
struct PoolCase {
  Shape shape;
  int64_t kernel, pad;
};

ops::Pool2dGeometry stride2_pool(const PoolCase& c) {
  ops::Pool2dGeometry geometry;
  geometry.kernel_h = geometry.kernel_w = c.kernel;
  geometry.stride_h = geometry.stride_w = 2;
  geometry.pad_h = geometry.pad_w = c.pad;
  return geometry;
}

// Even and odd planes (blocks of cells cut at the right and bottom edges), windows of 2, 3 and 5 (the
// general forward; three covering windows per block axis), with and without padding, a 3x3 plane, and
// stem-like planes many warps long.
const std::vector<PoolCase> kPoolCases = {{{4, 3, 16, 16}, 3, 1}, {{2, 5, 13, 11}, 3, 1}, {{3, 4, 9, 7}, 2, 0},
                                          {{2, 3, 12, 10}, 5, 2}, {{2, 3, 11, 11}, 3, 0}, {{1, 2, 3, 3}, 3, 1},
                                          {{8, 16, 56, 56}, 3, 1}};

// Inputs whose relu output has ties: channel 0's beta makes most values 0 (windows of zeros only, where
// the first cell must win), channel 1's gamma is negative.
Inputs make_pool_inputs(const PoolCase& c, DType dtype, Generator& generator) {
  const int64_t channels = c.shape[1];
  const Shape out_shape = {c.shape[0], channels, (c.shape[2] + 2 * c.pad - c.kernel) / 2 + 1,
                           (c.shape[3] + 2 * c.pad - c.kernel) / 2 + 1};
  Inputs in = make_inputs(c.shape, dtype, 0.0, 1.0, generator);
  in.g = Tensor::uniform(out_shape, -1.0, 1.0, generator, DType::f32).to(dtype);
  std::vector<float> gamma = in.gamma.to_vector<float>(), beta = in.beta.to_vector<float>();
  beta[0] = -3.0f;
  if (channels > 1) gamma[1] = -gamma[1];
  in.gamma = Tensor::from_vector<float>(gamma, {channels});
  in.beta = Tensor::from_vector<float>(beta, {channels});
  return in;
}

// Every output of one fused forward and backward through the CUDA backend.
struct PoolRun {
  Tensor out, offsets, save_mean, save_invstd, running_mean, running_var, grad_input, grad_gamma, grad_beta;
};

// max_pool2d's flat indices (h * W + w) of a run's window offsets (dh * kernel + dw).
std::vector<int32_t> flat_indices(const PoolRun& run, const PoolCase& c) {
  const std::vector<int32_t> offsets = run.offsets.to_vector<int32_t>();
  const int64_t out_h = run.out.size(2), out_w = run.out.size(3), in_w = c.shape[3];
  std::vector<int32_t> flat(offsets.size());
  for (size_t o = 0; o < offsets.size(); ++o) {
    const int64_t oh = static_cast<int64_t>(o) / out_w % out_h, ow = static_cast<int64_t>(o) % out_w;
    const int64_t h = oh * 2 - c.pad + offsets[o] / c.kernel, w = ow * 2 - c.pad + offsets[o] % c.kernel;
    flat[o] = static_cast<int32_t>(h * in_w + w);
  }
  return flat;
}

PoolRun run_fused_on_gpu(const Inputs& in, const PoolCase& c, int64_t shift,
                         const Tensor& preset_parameter_grads = {}) {
  ops::Backend& backend = ops::backend_for(kGpu);
  const int64_t channels = c.shape[1];
  const ops::Pool2dGeometry pool = stride2_pool(c);
  const Tensor x = on_gpu(in.x, shift), g = on_gpu(in.g, shift);
  const Tensor gamma = in.gamma.to(kGpu), beta = in.beta.to(kGpu);
  REQUIRE(backend.fuses_batch_norm_relu_max_pool2d(x, pool));
  const auto per_channel = [&] { return Tensor::empty({channels}, DType::f32, kGpu); };
  PoolRun run{Tensor::empty(in.g.shape(), in.x.dtype(), kGpu),
              Tensor::empty(in.g.shape(), DType::u8, kGpu),
              per_channel(),
              per_channel(),
              in.running_mean.to(kGpu),
              in.running_var.to(kGpu),
              Tensor::empty(c.shape, in.x.dtype(), kGpu),
              per_channel(),
              per_channel()};
  backend.batch_norm_relu_max_pool2d_forward_train(x, gamma, beta, run.running_mean, run.running_var, kMomentum, kEps,
                                                   pool, run.out, run.offsets, run.save_mean, run.save_invstd);
  const bool accumulate = preset_parameter_grads.defined();
  if (accumulate) {
    run.grad_gamma.copy_(preset_parameter_grads.to(kGpu));
    run.grad_beta.copy_(preset_parameter_grads.to(kGpu));
  }
  backend.batch_norm_relu_max_pool2d_backward(g, run.offsets, x, gamma, beta, run.save_mean, run.save_invstd, pool,
                                              run.grad_input, run.grad_gamma, run.grad_beta, accumulate);
  return run;
}

std::string pool_case_name(const PoolCase& c, DType dtype, int64_t shift) {
  return case_name(
      c.shape, dtype,
      " pool " + std::to_string(c.kernel) + "/2 pad " + std::to_string(c.pad) + (shift == 0 ? "" : " misaligned"));
}

}  // namespace

TEST_CASE("CUDA fused batch_norm_relu + max pooling forward equals the unfused pair bit for bit",
          "[cuda][ops][batch_norm][pool]") {
  if (gpu_missing()) return;
  Generator generator(54);
  ops::Backend& backend = ops::backend_for(kGpu);
  for (DType dtype : kDtypes)
    for (const PoolCase& c : kPoolCases)
      for (int64_t shift : {0, 1}) {
        const std::string name = pool_case_name(c, dtype, shift);
        const Inputs in = make_pool_inputs(c, dtype, generator);
        const PoolRun fused = run_fused_on_gpu(in, c, shift);
        Inputs unpooled = in;  // batch_norm_relu's own run; its backward is not compared here
        unpooled.g = Tensor::zeros(c.shape, dtype);
        const Run plain = run_on_gpu(unpooled, shift, true);
        require_identical(fused.save_mean, plain.save_mean, name + " save_mean");
        require_identical(fused.save_invstd, plain.save_invstd, name + " save_invstd");
        require_identical(fused.running_mean, plain.running_mean, name + " running_mean");
        require_identical(fused.running_var, plain.running_var, name + " running_var");
        Tensor pooled = Tensor::empty(in.g.shape(), dtype, kGpu),
               indices = Tensor::empty(in.g.shape(), DType::i32, kGpu);
        backend.max_pool2d_forward(plain.out.contiguous(), pooled, indices, stride2_pool(c));
        require_identical(fused.out, pooled, name + " out");
        INFO(name << " indices");
        REQUIRE(flat_indices(fused, c) == indices.to(kCPU).to_vector<int32_t>());
      }
}

TEST_CASE("CUDA fused batch_norm_relu + max pooling backward matches a double reference",
          "[cuda][ops][batch_norm][pool]") {
  if (gpu_missing()) return;
  Generator generator(55);
  for (DType dtype : kDtypes)
    for (const PoolCase& c : kPoolCases)
      for (int64_t shift : {0, 1}) {
        const std::string name = pool_case_name(c, dtype, shift);
        const Inputs in = make_pool_inputs(c, dtype, generator);
        const PoolRun run = run_fused_on_gpu(in, c, shift);
        // The upstream gradient of batch norm's output: each window's gradient at the cell it chose, where
        // the chosen (pooled) value is positive (relu's mask), from the run's own choices.
        const Layout layout(c.shape);
        const std::vector<double> x = in.x.to_vector<double>(), pooled_grad = in.g.to_vector<double>();
        const std::vector<double> out = run.out.to_vector<double>();
        const std::vector<int32_t> indices = flat_indices(run, c);
        const size_t out_plane = pooled_grad.size() / static_cast<size_t>(c.shape[0] * c.shape[1]);
        std::vector<double> g(x.size(), 0.0), magnitude(x.size(), 0.0);
        for (size_t o = 0; o < pooled_grad.size(); ++o) {
          if (!(out[o] > 0.0)) continue;
          const size_t at = (o / out_plane) * static_cast<size_t>(layout.inner) + static_cast<size_t>(indices[o]);
          g[at] += pooled_grad[o];
          magnitude[at] += std::fabs(pooled_grad[o]);
        }
        const std::vector<double> gamma = in.gamma.to_vector<double>();
        const std::vector<double> mean = run.save_mean.to_vector<double>(),
                                  invstd = run.save_invstd.to_vector<double>();
        const double count = static_cast<double>(layout.count());
        const size_t channels = static_cast<size_t>(layout.channels);
        std::vector<double> grad_input(x.size()), grad_input_scale(x.size()), grad_gamma(channels), grad_beta(channels),
            grad_gamma_scale(channels), grad_beta_scale(channels);
        for (int64_t ch = 0; ch < layout.channels; ++ch) {
          const size_t k = static_cast<size_t>(ch);
          double sum_grad = 0.0, sum_centered = 0.0, magnitude_grad = 0.0, magnitude_centered = 0.0;
          for (int64_t n = 0; n < layout.batch; ++n)
            for (int64_t i = 0; i < layout.inner; ++i) {
              const size_t at = layout.at(n, ch, i);
              sum_grad += g[at];
              sum_centered += g[at] * (x[at] - mean[k]);
              magnitude_grad += magnitude[at];
              magnitude_centered += magnitude[at] * std::fabs(x[at] - mean[k]);
            }
          grad_beta[k] = sum_grad;
          grad_gamma[k] = sum_centered * invstd[k];
          grad_beta_scale[k] = magnitude_grad + 1e-30;
          grad_gamma_scale[k] = magnitude_centered * invstd[k] + 1e-30;
          const double scale = gamma[k] * invstd[k];
          const double slope = scale * sum_centered * invstd[k] * invstd[k] / count;
          const double slope_magnitude = std::fabs(scale) * magnitude_centered * invstd[k] * invstd[k] / count;
          for (int64_t n = 0; n < layout.batch; ++n)
            for (int64_t i = 0; i < layout.inner; ++i) {
              const size_t at = layout.at(n, ch, i);
              grad_input[at] = scale * (g[at] - sum_grad / count) - slope * (x[at] - mean[k]);
              grad_input_scale[at] = std::fabs(scale) * magnitude[at] + std::fabs(scale) * magnitude_grad / count +
                                     std::fabs(slope_magnitude * (x[at] - mean[k])) + 1e-30;
            }
        }
        require_within(run.grad_input.to_vector<double>(), grad_input, grad_input_scale, output_tolerance(dtype),
                       name + " grad_input");
        require_within(run.grad_gamma.to_vector<double>(), grad_gamma, grad_gamma_scale, kSumTolerance,
                       name + " grad_gamma");
        require_within(run.grad_beta.to_vector<double>(), grad_beta, grad_beta_scale, kSumTolerance,
                       name + " grad_beta");
      }
}

TEST_CASE("CUDA fused batch_norm_relu + max pooling repeats bit for bit and adds parameter gradients in place",
          "[cuda][ops][batch_norm][pool]") {
  if (gpu_missing()) return;
  Generator generator(56);
  for (DType dtype : kDtypes)
    for (const PoolCase& c : {kPoolCases[1], kPoolCases.back()}) {
      const std::string name = pool_case_name(c, dtype, 0);
      const Inputs in = make_pool_inputs(c, dtype, generator);
      const PoolRun first = run_fused_on_gpu(in, c, 0), second = run_fused_on_gpu(in, c, 0);
      require_identical(first.out, second.out, name + " out");
      require_identical(first.grad_input, second.grad_input, name + " grad_input");
      require_identical(first.grad_gamma, second.grad_gamma, name + " grad_gamma");
      require_identical(first.grad_beta, second.grad_beta, name + " grad_beta");
      const Tensor preset = Tensor::uniform({c.shape[1]}, -1.0, 1.0, generator);
      const PoolRun added = run_fused_on_gpu(in, c, 0, preset);
      require_identical(added.grad_input, first.grad_input, name + " grad_input with accumulation");
      const std::vector<float> base = preset.to_vector<float>();
      for (const auto& [sum, alone, what] : {std::tuple{added.grad_gamma, first.grad_gamma, "grad_gamma"},
                                             std::tuple{added.grad_beta, first.grad_beta, "grad_beta"}}) {
        const std::vector<float> got = sum.to(kCPU).to_vector<float>(), fresh = alone.to(kCPU).to_vector<float>();
        for (size_t k = 0; k < got.size(); ++k) {
          INFO(name << " " << what << " channel " << k);
          REQUIRE(got[k] == base[k] + fresh[k]);
        }
      }
    }
}

TEST_CASE("CUDA batch_norm_relu_max_pool2d matches the composed ops on the GPU and on the CPU through autograd",
          "[cuda][ops][batch_norm][pool]") {
  if (gpu_missing()) return;
  Generator generator(57);
  // A stem-like case, an odd one, and a stride-1 pooling the backend does not fuse (the composition).
  const std::vector<PoolCase> cases = {{{4, 8, 32, 32}, 3, 1}, {{3, 5, 15, 13}, 3, 1}};
  for (DType dtype : {DType::f32, DType::bf16})
    for (const PoolCase& c : cases)
      for (bool stride1 : {false, true}) {
        ops::Pool2dGeometry pool = stride2_pool(c);
        if (stride1) pool.stride_h = pool.stride_w = 1;
        const std::string name = pool_case_name(c, dtype, 0) + (stride1 ? " stride 1" : "");
        REQUIRE(ops::backend_for(kGpu).fuses_batch_norm_relu_max_pool2d(Tensor::empty(c.shape, dtype, kGpu), pool) ==
                !stride1);
        const Tensor x = Tensor::normal(c.shape, 0.2, 1.0, generator, DType::f32).to(dtype);
        const Tensor gamma = Tensor::uniform({c.shape[1]}, 0.5, 1.5, generator);
        const Tensor beta = Tensor::uniform({c.shape[1]}, -0.5, 0.5, generator);
        Tensor grad;  // drawn once the output's shape is known
        // fused: the op; otherwise max_pool2d(batch_norm_relu(...)). Returns out, the three gradients and
        // the running statistics.
        auto run = [&](Device device, DType data_dtype, bool fused) {
          Tensor input = x.to(data_dtype).to(device).detach(), weight = gamma.to(device).detach(),
                 bias = beta.to(device).detach();
          for (Tensor* t : {&input, &weight, &bias}) t->set_requires_grad(true);
          Tensor mean = Tensor::zeros({c.shape[1]}, DType::f32, device),
                 var = Tensor::ones({c.shape[1]}, DType::f32, device);
          const Tensor out =
              fused
                  ? ops::batch_norm_relu_max_pool2d(input, weight, bias, mean, var, true, kMomentum, kEps, pool)
                  : ops::max_pool2d(ops::batch_norm_relu(input, weight, bias, mean, var, true, kMomentum, kEps), pool);
          if (!grad.defined()) grad = Tensor::uniform(out.shape(), -1.0, 1.0, generator, DType::f32).to(dtype);
          out.backward(grad.to(data_dtype).to(device));
          return std::vector<Tensor>{out, input.grad(), weight.grad(), bias.grad(), mean, var};
        };
        const std::vector<Tensor> fused = run(kGpu, dtype, true), composed = run(kGpu, dtype, false),
                                  cpu = run(kCPU, DType::f32, false);
        const char* what[] = {"out", "grad_input", "grad_gamma", "grad_beta", "running_mean", "running_var"};
        for (size_t i : {size_t{0}, size_t{4}, size_t{5}})
          require_identical(fused[i], composed[i], name + " " + what[i]);
        // The gradients: the composition rounds a cell's gradient to the dtype before batch norm reads it;
        // the fused backward sums in f32. Against the CPU, f32 closely and bf16 as its rounding allows.
        const double data_tolerance = dtype == DType::f32 ? 1e-5 : output_tolerance(dtype);
        require_scaled(fused[0].to(kCPU).to(DType::f32), cpu[0].to_vector<double>(), data_tolerance,
                       name + " out vs CPU");
        for (size_t i : {size_t{4}, size_t{5}})
          require_scaled(fused[i].to(kCPU), cpu[i].to_vector<double>(), kStatisticTolerance,
                         name + " " + what[i] + " vs CPU");
        for (size_t i = 1; i < 4; ++i) {
          const double tolerance = i == 1 ? data_tolerance : (dtype == DType::f32 ? 1e-5 : 1e-2);
          require_scaled(fused[i].to(kCPU).to(DType::f32), composed[i].to(kCPU).to_vector<double>(), tolerance,
                         name + " " + what[i] + " vs composed");
          // In bf16 a window's cells may tie (or order differently) after the rounding that the CPU's f32
          // values do not see, moving a gradient to a neighbouring cell: only the sums compare there.
          if (dtype == DType::f32 || i > 1)
            require_scaled(fused[i].to(kCPU).to(DType::f32), cpu[i].to_vector<double>(),
                           dtype == DType::f32 ? 1e-5 : 2e-2, name + " " + what[i] + " vs CPU");
        }
      }
}
