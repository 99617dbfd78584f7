// Tests of the channels-last (NHWC) forms of conv2d, batch_norm and batch_norm_relu on the CPU
// (src/ops/conv.cpp, src/ops/norm.cpp, src/ops/cpu/conv.cpp): each equals its NCHW form on permuted
// operands, values and every gradient (and the running statistics); finite-difference gradients in f64;
// shape errors name the channels-last layout.
#include <string>
#include <vector>

#include "ops/op_test_helpers.h"
#include "opsnn/core/rng.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::testing;

namespace {

const std::vector<int64_t> kToNhwc{0, 2, 3, 1}, kToNchw{0, 3, 1, 2};

Tensor leaf_copy(const Tensor& t) {
  Tensor copy = t.clone();
  copy.set_requires_grad(true);
  return copy;
}

void require_same_values(const Tensor& actual, const Tensor& expected, const std::string& what) {
  INFO(what);
  REQUIRE(actual.shape() == expected.shape());
  require_close(actual.to_vector<double>(), expected.to_vector<double>(), 1e-5);
}

ops::Conv2dGeometry geometry_of(int64_t stride, int64_t pad, bool channels_last) {
  ops::Conv2dGeometry g;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  g.channels_last = channels_last;
  return g;
}

struct ConvCase {
  const char* name;
  Shape input, weight;  // input NCHW
  int64_t stride, pad;
};

}  // namespace

TEST_CASE("channels-last conv2d equals the NCHW conv2d on permuted operands, values and gradients", "[ops][conv]") {
  const ConvCase cases[] = {{"1x1", {2, 5, 6, 7}, {4, 5, 1, 1}, 1, 0},
                            {"3x3 pad 1", {2, 3, 7, 6}, {6, 3, 3, 3}, 1, 1},
                            {"3x3 stride 2", {3, 4, 9, 8}, {5, 4, 3, 3}, 2, 1},
                            {"1x1 stride 2", {2, 6, 7, 9}, {3, 6, 1, 1}, 2, 0}};
  Generator generator(61);
  for (const ConvCase& c : cases)
    for (bool with_bias : {false, true}) {
      const std::string name = std::string(c.name) + (with_bias ? " bias" : "");
      const Tensor input = Tensor::uniform(c.input, -1.0, 1.0, generator);
      const Tensor weight = Tensor::uniform(c.weight, -0.5, 0.5, generator);
      const Tensor bias = with_bias ? Tensor::uniform({c.weight[0]}, -0.5, 0.5, generator) : Tensor();

      Tensor x = leaf_copy(input), w = leaf_copy(weight), b = with_bias ? leaf_copy(bias) : Tensor();
      const Tensor out = ops::conv2d(x, w, b, geometry_of(c.stride, c.pad, false));
      const Tensor upstream = Tensor::uniform(out.shape(), -1.0, 1.0, generator);
      out.backward(upstream);

      Tensor x_nhwc = leaf_copy(input.permute(kToNhwc).contiguous()), w_cl = leaf_copy(weight);
      Tensor b_cl = with_bias ? leaf_copy(bias) : Tensor();
      const Tensor out_nhwc = ops::conv2d(x_nhwc, w_cl, b_cl, geometry_of(c.stride, c.pad, true));
      REQUIRE(out_nhwc.shape() == Shape{out.size(0), out.size(2), out.size(3), out.size(1)});
      out_nhwc.backward(upstream.permute(kToNhwc).contiguous());

      require_same_values(out_nhwc.permute(kToNchw), out, name + " output");
      require_same_values(x_nhwc.grad().permute(kToNchw), x.grad(), name + " grad input");
      require_same_values(w_cl.grad(), w.grad(), name + " grad weight");
      if (with_bias) require_same_values(b_cl.grad(), b.grad(), name + " grad bias");
    }
}

TEST_CASE("channels-last conv2d gradients match finite differences", "[ops][conv]") {
  Generator generator(62);
  for (int64_t stride : {1, 2}) {
    const ops::Conv2dGeometry g = geometry_of(stride, 1, true);
    require_gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], in[2], g); },
        {random_leaf({2, 5, 4, 3}, generator), random_leaf({2, 3, 3, 3}, generator), random_leaf({2}, generator)});
  }
}

TEST_CASE("channels-last conv2d errors speak of the NHWC layout", "[ops][conv]") {
  const Tensor weight = Tensor::zeros({4, 3, 3, 3});
  // An NCHW-shaped input ([N, C, H, W] with C = 3) read as NHWC has 5 channels.
  std::string message = require_throws<ShapeError>([&] {
    ops::conv2d(Tensor::zeros({2, 3, 5, 5}), weight, Tensor(), geometry_of(1, 1, true));
  });
  CHECK_THAT(message, Catch::Contains("[N, H, W, C]") && Catch::Contains("5 channels"));
  message = require_throws<ShapeError>([&] {
    ops::conv2d(Tensor::zeros({2, 5, 3}), weight, Tensor(), geometry_of(1, 1, true));
  });
  CHECK_THAT(message, Catch::Contains("[N, H, W, C]"));
  // The same tensor is a valid NCHW input.
  CHECK(ops::conv2d(Tensor::zeros({2, 3, 5, 5}), weight, Tensor(), geometry_of(1, 1, false)).shape() ==
        Shape{2, 4, 5, 5});
}

namespace {

// One training or eval batch norm (relu'd with `relu`) forward and backward on copies of the operands,
// channels-last on an NHWC copy of the NCHW input; outputs and the input gradient returned in NCHW.
struct NormRun {
  Tensor out, grad_input, grad_gamma, grad_beta, running_mean, running_var;
};

NormRun run_norm(const Tensor& input, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                 const Tensor& running_var, const Tensor& upstream, bool training, bool relu, bool channels_last) {
  Tensor x = leaf_copy(channels_last ? input.permute(kToNhwc).contiguous() : input);
  Tensor weight = leaf_copy(gamma), bias = leaf_copy(beta);
  NormRun run;
  run.running_mean = running_mean.clone();
  run.running_var = running_var.clone();
  const auto op = relu ? ops::batch_norm_relu : ops::batch_norm;
  Tensor out = op(x, weight, bias, run.running_mean, run.running_var, training, 0.1, 1e-5, channels_last);
  out.backward(channels_last ? upstream.permute(kToNhwc).contiguous() : upstream);
  run.out = channels_last ? out.permute(kToNchw).contiguous() : out;
  run.grad_input = channels_last ? x.grad().permute(kToNchw).contiguous() : x.grad();
  run.grad_gamma = weight.grad();
  run.grad_beta = bias.grad();
  return run;
}

}  // namespace

TEST_CASE("channels-last batch_norm and batch_norm_relu equal the NCHW ones on permuted inputs", "[ops][batch_norm]") {
  Generator generator(63);
  for (const Shape& shape : std::vector<Shape>{{2, 5, 3, 4}, {3, 13, 2, 2}, {1, 8, 5, 3}, {4, 3, 1, 1}})
    for (bool training : {true, false})
      for (bool relu : {false, true}) {
        const std::string name = shape_str(shape) + (training ? " train" : " eval") + (relu ? " relu" : "");
        const int64_t channels = shape[1];
        const Tensor input = Tensor::normal(shape, 0.5, 2.0, generator);
        const Tensor gamma = Tensor::uniform({channels}, 0.5, 1.5, generator);
        const Tensor beta = Tensor::uniform({channels}, -0.5, 0.5, generator);
        const Tensor running_mean = Tensor::uniform({channels}, -0.5, 0.5, generator);
        const Tensor running_var = Tensor::uniform({channels}, 0.5, 2.0, generator);
        const Tensor upstream = Tensor::uniform(shape, -1.0, 1.0, generator);
        const NormRun nchw = run_norm(input, gamma, beta, running_mean, running_var, upstream, training, relu, false);
        const NormRun nhwc = run_norm(input, gamma, beta, running_mean, running_var, upstream, training, relu, true);
        require_same_values(nhwc.out, nchw.out, name + " output");
        require_same_values(nhwc.grad_input, nchw.grad_input, name + " grad input");
        require_same_values(nhwc.grad_gamma, nchw.grad_gamma, name + " grad gamma");
        require_same_values(nhwc.grad_beta, nchw.grad_beta, name + " grad beta");
        require_same_values(nhwc.running_mean, nchw.running_mean, name + " running mean");
        require_same_values(nhwc.running_var, nchw.running_var, name + " running var");
      }
}

TEST_CASE("channels-last batch_norm gradients match finite differences", "[ops][batch_norm]") {
  Generator generator(64);
  for (bool relu : {false, true}) {
    Tensor running_mean = Tensor::zeros({3}, DType::f64), running_var = Tensor::ones({3}, DType::f64);
    const auto op = relu ? ops::batch_norm_relu : ops::batch_norm;
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
          return op(in[0], in[1], in[2], running_mean, running_var, true, 0.1, 1e-5, true);
        },
        {random_leaf({2, 3, 2, 3}, generator), random_leaf({3}, generator, 0.5, 1.5), random_leaf({3}, generator)});
  }
}

TEST_CASE("channels-last batch_norm checks its channel axis", "[ops][batch_norm]") {
  Tensor running_mean = Tensor::zeros({3}), running_var = Tensor::ones({3});
  // [2, 3, 4, 5] has 5 channels channels-last: the 3-channel statistics do not match.
  const std::string message = require_throws<ShapeError>([&] {
    ops::batch_norm(Tensor::zeros({2, 3, 4, 5}), Tensor::ones({3}), Tensor::zeros({3}), running_mean, running_var, true,
                    0.1, 1e-5, true);
  });
  CHECK_THAT(message, Catch::Contains("[3]") && Catch::Contains("5"));
  CHECK_THAT(
      require_throws<ShapeError>([&] {
        ops::batch_norm(Tensor::zeros({0, 3}), Tensor(), Tensor(), running_mean, running_var, true, 0.1, 1e-5, true);
      }),
      Catch::Contains("channels_last"));
}
