// Tests of src/nn/layers.cpp: forward values and shapes, backward reaching every parameter with its
// shape, BatchNorm train/eval behaviour through the module tree, channels-last Conv2d / BatchNorm2d,
// Embedding's sparse gradients.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "opsnn/autograd/node.h"
#include "opsnn/nn/nn.h"
#include "opsnn/ops/ops.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::nn;

namespace {

void set_values(const Tensor& tensor, const std::vector<float>& values) {
  Tensor handle = tensor;
  handle.copy_(Tensor::from_vector(values, tensor.shape()));
}

std::vector<float> ramp(int64_t count, float start = 0.0f, float step = 1.0f) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = start + step * static_cast<float>(i);
  return values;
}

}  // namespace

TEST_CASE("Linear computes x W^T + b and its gradients", "[nn]") {
  Generator generator(1);
  Linear linear(3, 2, generator);
  set_values(linear.weight(), {1, 2, 3, -1, 0, 1});
  set_values(linear.bias(), {0.5f, -0.5f});
  Tensor input = Tensor::from_vector<float>({1, 1, 1, 2, 0, -1}, {2, 3});
  Tensor output = linear(input);
  CHECK(output.shape() == Shape{2, 2});
  CHECK(output.to_vector<float>() == std::vector<float>{6.5f, -0.5f, -0.5f, -3.5f});
  ops::sum(output).backward();
  CHECK(linear.weight().grad().shape() == Shape{2, 3});
  CHECK(linear.weight().grad().to_vector<float>() == std::vector<float>{3, 1, 0, 3, 1, 0});
  CHECK(linear.bias().grad().to_vector<float>() == std::vector<float>{2, 2});
  // Leading dimensions pass through.
  CHECK(linear(Tensor::zeros({4, 5, 3})).shape() == Shape{4, 5, 2});
  CHECK_THROWS_AS(linear(Tensor::zeros({2, 4})), ShapeError);
  CHECK_THROWS_WITH(linear(Tensor::zeros({2, 4})), Catch::Contains("[2, 4]") && Catch::Contains("3 features"));
  Linear no_bias(LinearOptions(3, 2).bias(false), generator);
  CHECK(no_bias.parameters().size() == 1);
  CHECK(no_bias(input).shape() == Shape{2, 2});
}

TEST_CASE("Conv2d output shapes follow stride and padding, gradients reach weight and bias", "[nn]") {
  Generator generator(2);
  Conv2d conv(Conv2dOptions(3, 4, 3).stride(2).padding(1), generator);
  Tensor input = Tensor::normal({2, 3, 8, 8}, 0.0, 1.0, generator).set_requires_grad(true);
  Tensor output = conv(input);
  CHECK(output.shape() == Shape{2, 4, 4, 4});
  ops::sum(output).backward();
  CHECK(conv.weight().grad().shape() == Shape{4, 3, 3, 3});
  CHECK(conv.bias().grad().to_vector<float>() == std::vector<float>(4, 32.0f));  // N * H' * W'
  CHECK(input.grad().shape() == Shape{2, 3, 8, 8});
  CHECK(Conv2d(Conv2dOptions(3, 5, 3), generator)(Tensor::zeros({1, 3, 7, 6})).shape() == Shape{1, 5, 5, 4});
  CHECK(Conv2d(Conv2dOptions(3, 5, 1), generator)(Tensor::zeros({1, 3, 7, 6})).shape() == Shape{1, 5, 7, 6});

  // All-ones weights over an all-ones input: an interior output sums in_channels * k * k ones.
  Conv2d ones_conv(Conv2dOptions(2, 1, 3).padding(1).bias(false), generator);
  init::ones_(ones_conv.weight());
  std::vector<float> values = ones_conv(Tensor::ones({1, 2, 4, 4})).to_vector<float>();
  CHECK(values[5] == 18.0f);  // interior
  CHECK(values[0] == 8.0f);   // corner: 2 x 2 x 2 inside the padding
  CHECK_THROWS_WITH(conv(Tensor::zeros({1, 2, 8, 8})),
                    Catch::Contains("Conv2d") && Catch::Contains("[1, 2, 8, 8]") && Catch::Contains("[N, 3, H, W]"));
}

TEST_CASE("BatchNorm2d uses batch statistics in training and running ones in eval", "[nn]") {
  Generator generator(3);
  auto model = std::make_shared<Sequential>();
  auto batch_norm = model->push_back(std::make_shared<BatchNorm2d>(BatchNorm2dOptions(2).momentum(0.5)));
  Tensor input = Tensor::normal({4, 2, 3, 3}, 2.0, 3.0, generator);

  // Training: per-channel output mean 0 and variance 1; running stats move halfway to the batch's.
  Tensor trained = (*model)(input);
  std::vector<float> out = trained.to_vector<float>();
  std::vector<float> in = input.to_vector<float>();
  for (int channel = 0; channel < 2; ++channel) {
    double mean = 0, variance = 0, input_mean = 0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 9; ++i) {
        mean += out[static_cast<size_t>((n * 2 + channel) * 9 + i)];
        input_mean += in[static_cast<size_t>((n * 2 + channel) * 9 + i)];
      }
    mean /= 36;
    input_mean /= 36;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 9; ++i) variance += std::pow(out[static_cast<size_t>((n * 2 + channel) * 9 + i)] - mean, 2);
    variance /= 36;
    CHECK(std::fabs(mean) < 1e-5);
    CHECK(variance == Approx(1.0).epsilon(1e-3));
    CHECK(batch_norm->running_mean().to_vector<float>()[static_cast<size_t>(channel)] ==
          Approx(0.5 * input_mean).epsilon(1e-4));
  }

  // Eval: a fixed affine map with the running statistics, which stay as they are.
  model->eval();
  CHECK_FALSE(batch_norm->is_training());
  std::vector<float> running_mean = batch_norm->running_mean().to_vector<float>();
  std::vector<float> running_var = batch_norm->running_var().to_vector<float>();
  std::vector<float> evaluated = (*model)(input).to_vector<float>();
  CHECK(batch_norm->running_mean().to_vector<float>() == running_mean);
  CHECK(batch_norm->running_var().to_vector<float>() == running_var);
  for (size_t i = 0; i < in.size(); ++i) {
    size_t channel = (i / 9) % 2;
    double expected = (in[i] - running_mean[channel]) / std::sqrt(running_var[channel] + 1e-5);
    REQUIRE(evaluated[i] == Approx(expected).margin(1e-4));
  }
  CHECK(evaluated != out);
  // Back to training: the running statistics move again.
  model->train();
  (*model)(input);
  CHECK(batch_norm->running_mean().to_vector<float>() != running_mean);
}

TEST_CASE("Conv2d and BatchNorm2d with channels_last take and give [N, H, W, C]", "[nn]") {
  Generator generator(9);
  Conv2d conv(Conv2dOptions(3, 5, 3).stride(2).padding(1).channels_last(true), generator);
  BatchNorm2d norm(BatchNorm2dOptions(5).channels_last(true));
  CHECK(conv.weight().shape() == Shape{5, 3, 3, 3});  // the weight keeps its layout
  CHECK_THAT(conv.extra_repr(), Catch::Contains("channels_last=true"));
  CHECK_THAT(norm.extra_repr(), Catch::Contains("channels_last=true"));
  Tensor input = Tensor::normal({2, 7, 6, 3}, 0.0, 1.0, generator);
  Tensor output = norm.forward_relu(conv(input));
  CHECK(output.shape() == Shape{2, 4, 3, 5});
  ops::sum(output).backward();
  CHECK(conv.weight().grad().shape() == Shape{5, 3, 3, 3});
  CHECK(norm.weight().grad().shape() == Shape{5});
  // An NCHW-shaped input names the layout the layer expects.
  CHECK_THROWS_WITH(conv(Tensor::zeros({2, 3, 7, 6})), Catch::Contains("expected input [N, H, W, 3]"));
  CHECK_THROWS_WITH(norm(Tensor::zeros({2, 5, 4, 4})), Catch::Contains("expected input [N, ..., 5]"));
}

TEST_CASE("BatchNorm2d folds a shortcut's batch norm into its add-relu pass where both layers agree", "[nn]") {
  Generator generator(13);
  BatchNorm2d last(BatchNorm2dOptions(4)), shortcut_norm(BatchNorm2dOptions(4).momentum(0.3));
  const Tensor input = Tensor::normal({3, 4, 5, 5}, 0.0, 1.0, generator);
  const Tensor shortcut = Tensor::normal({3, 4, 5, 5}, 1.0, 2.0, generator);
  // Training, both layers alike: one fused node, and both layers' running statistics move.
  Tensor fused = last.forward_add_relu(input, shortcut_norm, shortcut);
  CHECK(fused.grad_fn()->name() == "DualBatchNormAddReluBackward");
  CHECK(shortcut_norm.running_mean().to_vector<float>() != std::vector<float>(4, 0.0f));
  CHECK(last.running_mean().to_vector<float>() != std::vector<float>(4, 0.0f));
  ops::sum(fused).backward();
  CHECK(shortcut_norm.weight().grad().defined());
  CHECK(last.bias().grad().defined());
  // Layers in different modes (or layouts, or with synchronised statistics) run apart: the shortcut's batch
  // norm in eval here, then the add-relu.
  shortcut_norm.eval();
  Tensor apart = last.forward_add_relu(input, shortcut_norm, shortcut);
  CHECK(apart.grad_fn()->name() == "BatchNormAddReluBackward");
  // Both in eval: the unfused pair too (dual_batch_norm_add_relu's eval mode).
  last.eval();
  CHECK(last.forward_add_relu(input, shortcut_norm, shortcut).grad_fn()->name() == "BatchNormAddReluEvalBackward");
}

TEST_CASE("ReLU, pooling, GlobalAvgPool and Flatten", "[nn]") {
  Tensor input = Tensor::from_vector(ramp(16, -4.0f), {1, 1, 4, 4});  // -4 .. 11
  CHECK(ReLU()(input).to_vector<float>()[0] == 0.0f);
  CHECK(ReLU()(input).to_vector<float>()[15] == 11.0f);
  CHECK(MaxPool2d(MaxPool2dOptions(2))(input).to_vector<float>() == std::vector<float>{1, 3, 9, 11});
  CHECK(AvgPool2d(AvgPool2dOptions(2))(input).to_vector<float>() == std::vector<float>{-1.5f, 0.5f, 6.5f, 8.5f});
  CHECK(MaxPool2d(MaxPool2dOptions(3).stride(1))(input).shape() == Shape{1, 1, 2, 2});
  CHECK(MaxPool2d(MaxPool2dOptions(3).stride(2).padding(1))(input).shape() == Shape{1, 1, 2, 2});
  Tensor images = Tensor::from_vector(ramp(2 * 3 * 4 * 4), {2, 3, 4, 4});
  Tensor pooled = GlobalAvgPool()(images);
  CHECK(pooled.shape() == Shape{2, 3});
  CHECK(pooled.to_vector<float>()[0] == 7.5f);
  CHECK(pooled.to_vector<float>()[5] == 87.5f);
  CHECK(Flatten()(images).shape() == Shape{2, 48});
  CHECK(Flatten(1, 2)(images).shape() == Shape{2, 12, 4});
  CHECK(Flatten()(images).to_vector<float>() == images.to_vector<float>());
}

TEST_CASE("Embedding looks rows up, sparse mode hands back row gradients", "[nn]") {
  Generator generator(5);
  Embedding dense(EmbeddingOptions(10, 3), generator);
  CHECK_FALSE(dense.weight().sparse_grad());
  Tensor indices = Tensor::from_vector<int64_t>({1, 7, 1, 0}, {2, 2});
  Tensor rows = dense(indices);
  CHECK(rows.shape() == Shape{2, 2, 3});
  std::vector<float> table = dense.weight().to_vector<float>();
  std::vector<float> looked_up = rows.to_vector<float>();
  CHECK(looked_up[3] == table[21]);  // second index is 7: row 7 starts at 7 * 3
  CHECK(looked_up[6] == table[3]);
  ops::sum(rows).backward();
  std::vector<float> dense_grad = dense.weight().grad().to_vector<float>();
  CHECK(dense_grad[3] == 2.0f);  // row 1 used twice
  CHECK(dense_grad[21] == 1.0f);
  CHECK(dense_grad[6] == 0.0f);
  CHECK_THROWS_AS(dense(Tensor::zeros({2}, DType::i32)), TypeError);

  Embedding sparse(EmbeddingOptions(10, 3).sparse(true), generator);
  CHECK(sparse.weight().sparse_grad());
  ops::sum(sparse(indices)).backward();
  CHECK_FALSE(sparse.weight().grad().defined());
  CHECK_FALSE(sparse.weight().row_sparse_grad().empty());
  int64_t gradient_rows = 0;
  for (const Tensor& part : sparse.weight().row_sparse_grad().rows) gradient_rows += part.size(0);
  CHECK(gradient_rows >= 3);  // rows 0, 1 and 7 (duplicates may appear once per occurrence)
  sparse.zero_grad();
  CHECK(sparse.weight().row_sparse_grad().empty());
}

TEST_CASE("a small CNN runs forward and backward to every parameter", "[nn]") {
  Generator generator(6);
  Sequential model;
  model.push_back(std::make_shared<Conv2d>(Conv2dOptions(3, 8, 3).padding(1).bias(false), generator));
  model.push_back(std::make_shared<BatchNorm2d>(8));
  model.push_back(std::make_shared<ReLU>());
  model.push_back(std::make_shared<MaxPool2d>(MaxPool2dOptions(2)));
  model.push_back(std::make_shared<AvgPool2d>(AvgPool2dOptions(2)));
  model.push_back(std::make_shared<Flatten>());
  model.push_back(std::make_shared<Linear>(8 * 2 * 2, 5, generator));
  Tensor images = Tensor::normal({4, 3, 8, 8}, 0.0, 1.0, generator);
  Tensor logits = model(images);
  CHECK(logits.shape() == Shape{4, 5});
  Tensor labels = Tensor::from_vector<int64_t>({0, 1, 2, 3}, {4});
  Tensor loss = ops::cross_entropy(logits, labels);
  CHECK(std::isfinite(loss.item()));
  loss.backward();
  for (const auto& [name, parameter] : model.named_parameters()) {
    INFO(name);
    REQUIRE(parameter.grad().defined());
    CHECK(parameter.grad().shape() == parameter.shape());
    std::vector<float> grad = parameter.grad().to_vector<float>();
    CHECK(std::any_of(grad.begin(), grad.end(), [](float g) { return g != 0.0f; }));
  }
  for (const Tensor& buffer : model.buffers()) CHECK_FALSE(buffer.grad().defined());
  // Under NoGradGuard nothing is recorded.
  autograd::NoGradGuard no_grad;
  CHECK_FALSE(model(images).requires_grad());
}
