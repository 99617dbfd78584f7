// The CPU's oneDNN engine (src/ops/cpu/onednn.h) against its Eigen reference: fp32 convolutions in every
// direction (strides, padding, 1x1, the stem's 7x7, bias, channels-last through the backend) and matrix
// products (transposes, alpha, beta), within fp32 tolerances of a double-precision Eigen run; and the
// policy's errors.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/cpu/onednn.h"
#include "opsnn/core/tensor.h"
#include "opsnn/ops/backend.h"
#include "support/catch.h"

using namespace opsnn;
namespace onednn = opsnn::ops::onednn;

namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed, DType dtype = DType::f64) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (double& v : values) v = static_cast<float>(uniform(rng));  // exactly representable in fp32
  return Tensor::from_vector(values, shape).to(dtype);
}

// The policy for a block, restored after.
class WithPolicy {
 public:
  explicit WithPolicy(onednn::Policy policy) : previous_(onednn::policy()) { onednn::set_policy(policy); }
  ~WithPolicy() { onednn::set_policy(previous_); }
  WithPolicy(const WithPolicy&) = delete;
  WithPolicy& operator=(const WithPolicy&) = delete;

 private:
  onednn::Policy previous_;
};

// |a - b| <= tolerance * (1 + |b|) elementwise; b is the double reference.
void require_close(const Tensor& a, const Tensor& reference, double tolerance) {
  std::vector<double> x = a.to_vector<double>(), r = reference.to_vector<double>();
  REQUIRE(x.size() == r.size());
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - r[i]) / (1.0 + std::fabs(r[i])));
  INFO("worst relative error " << worst);
  REQUIRE(worst <= tolerance);
}

struct ConvCase {
  Shape input;  // N C H W
  int64_t out_channels, kernel, stride, pad;
  bool bias;
};

}  // namespace

TEST_CASE("oneDNN fp32 convolutions match the double-precision Eigen reference in every direction", "[ops]") {
  if (!onednn::built()) {
    WARN("built without oneDNN: nothing to compare");
    return;
  }
  const std::vector<ConvCase> cases = {
      {{8, 1, 28, 28}, 16, 3, 1, 1, true},    // the quickstart's first layer
      {{8, 16, 14, 14}, 32, 3, 1, 1, true},   // and its second
      {{4, 3, 33, 31}, 8, 7, 2, 3, false},    // a stem: 7x7 stride 2, odd sizes
      {{4, 24, 9, 9}, 40, 1, 1, 0, false},    // pointwise
      {{3, 12, 10, 10}, 12, 3, 2, 1, false},  // stride 2 with padding
      {{2, 5, 6, 7}, 3, 3, 1, 0, true},       // no padding, ragged channels
  };
  ops::Backend& cpu = ops::backend_for(kCPU);
  for (const ConvCase& c : cases) {
    for (bool channels_last : {false, true}) {
      INFO("input " << shape_str(c.input) << " out " << c.out_channels << " k " << c.kernel << " s " << c.stride
                    << " p " << c.pad << (channels_last ? " channels-last" : ""));
      ops::Conv2dGeometry g;
      g.stride_h = g.stride_w = c.stride;
      g.pad_h = g.pad_w = c.pad;
      const int64_t in_channels = c.input[1];
      const int64_t out_h = (c.input[2] + 2 * c.pad - c.kernel) / c.stride + 1;
      const int64_t out_w = (c.input[3] + 2 * c.pad - c.kernel) / c.stride + 1;
      const Shape out_shape{c.input[0], c.out_channels, out_h, out_w};
      Tensor x = random_tensor(c.input, 1), w = random_tensor({c.out_channels, in_channels, c.kernel, c.kernel}, 2);
      Tensor b = c.bias ? random_tensor({c.out_channels}, 3) : Tensor();
      Tensor dy = random_tensor(out_shape, 4);
      auto layout = [&](const Tensor& t) { return channels_last ? t.permute({0, 2, 3, 1}).contiguous() : t; };
      auto back = [&](const Tensor& t) { return channels_last ? t.permute({0, 3, 1, 2}).contiguous() : t; };
      ops::Conv2dGeometry geometry = g;
      geometry.channels_last = channels_last;
      // The reference: Eigen in double.
      auto run = [&](DType dtype) {
        Tensor xd = layout(x.to(dtype)), wd = w.to(dtype), bd = c.bias ? b.to(dtype) : Tensor(),
               dyd = layout(dy.to(dtype));
        Tensor y = Tensor::empty(channels_last ? Shape{out_shape[0], out_h, out_w, c.out_channels} : out_shape, dtype);
        Tensor dx = Tensor::empty(xd.shape(), dtype), dw = Tensor::empty(wd.shape(), dtype);
        cpu.conv2d_forward(xd, wd, bd, y, geometry);
        cpu.conv2d_backward_input(dyd, wd, dx, geometry, false);
        cpu.conv2d_backward_weight(dyd, xd, dw, geometry);
        return std::vector<Tensor>{back(y), back(dx), dw};
      };
      std::vector<Tensor> reference, eigen, mkl;
      {
        WithPolicy use(onednn::Policy::eigen);
        reference = run(DType::f64);
        eigen = run(DType::f32);
      }
      {
        WithPolicy use(onednn::Policy::onednn);
        mkl = run(DType::f32);
      }
      const int64_t terms = in_channels * c.kernel * c.kernel + c.input[0] * out_h * out_w;  // longest sum
      const double tolerance = 4e-7 * std::sqrt(static_cast<double>(terms)) * 8;
      for (size_t i = 0; i < 3; ++i) {
        INFO((i == 0 ? "forward" : i == 1 ? "input gradient" : "weight gradient"));
        require_close(eigen[i], reference[i], tolerance);
        require_close(mkl[i], reference[i], tolerance);
      }
    }
  }
}

TEST_CASE("oneDNN sgemm matches the double-precision reference with transposes alpha and beta", "[ops]") {
  if (!onednn::built()) {
    WARN("built without oneDNN: nothing to compare");
    return;
  }
  ops::Backend& cpu = ops::backend_for(kCPU);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 0.5}) {
        INFO("transpose a " << ta << " transpose b " << tb << " beta " << beta);
        const int64_t m = 37, n = 10, k = 1568;
        Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 5),
               b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 6);
        Tensor c0 = random_tensor({m, n}, 7);
        Tensor reference = c0.clone();
        {
          WithPolicy use(onednn::Policy::eigen);
          cpu.gemm(a, ta, b, tb, reference, 1.5, beta);
        }
        Tensor out = c0.to(DType::f32);
        {
          WithPolicy use(onednn::Policy::onednn);
          cpu.gemm(a.to(DType::f32), ta, b.to(DType::f32), tb, out, 1.5, beta);
        }
        require_close(out, reference, 4e-7 * std::sqrt(static_cast<double>(k)) * 8);
      }
}

TEST_CASE("the CPU engine: which shapes oneDNN takes - and no oneDNN policy in a build without it", "[ops]") {
  if (onednn::built()) {
    onednn::ConvDims quickstart;  // the quickstart's second convolution runs on oneDNN's own kernels
    quickstart.batch = 64;
    quickstart.in_channels = 16;
    quickstart.in_h = quickstart.in_w = quickstart.out_h = quickstart.out_w = 14;
    quickstart.out_channels = 32;
    quickstart.kernel_h = quickstart.kernel_w = 3;
    quickstart.geometry.pad_h = quickstart.geometry.pad_w = 1;
    REQUIRE(onednn::conv_supported(quickstart));
    quickstart.geometry.pad_h = 5;  // padding beyond the kernel: the output size no longer matches
    REQUIRE(!onednn::conv_supported(quickstart));
    return;
  }
  REQUIRE_THROWS_AS(onednn::set_policy(onednn::Policy::onednn), UsageError);
  REQUIRE(onednn::policy() == onednn::Policy::eigen);
}
