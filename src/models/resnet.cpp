// ResNet-18/34 (basic blocks) and ResNet-50 (bottleneck blocks), He et al. 2016, laid out and initialised
// as torchvision's (stride on the 3x3 convolution of a bottleneck, "v1.5"; parameter names match, so a
// checkpoint maps onto torchvision's state dict). Stems: imagenet (7x7/2 conv + 3x3/2 max-pool) or cifar
// (3x3/1 conv, no pool) for small images. ResNet-50 with the imagenet stem and 1000 classes has exactly
// 25,557,032 parameters. Every relu is fused into what precedes it: batch norm (BatchNorm2d::forward_relu), or
// a block's last batch norm and its residual add together (BatchNorm2d::forward_add_relu), with a projection
// shortcut's batch norm in that same pass; the imagenet stem's batch norm, relu and max pool are one op
// (BatchNorm2d::forward_relu_max_pool). Modules and parameter names are those of the unfused network.
// With channels_last the residual stages run on NHWC activations (their convolutions and batch norms
// channels-last, the weights unchanged): the stem's output is permuted to NHWC before layer1, and the global
// average pool reads layer4's NHWC output where it lies (the same sums as over NCHW planes), so the outputs
// are those of the NCHW network.
#include "opsnn/core/error.h"
#include "opsnn/models/models.h"
#include "opsnn/nn/init.h"
#include "opsnn/nn/layers.h"
#include "opsnn/nn/sequential.h"
#include "opsnn/ops/ops.h"

namespace opsnn::models {
namespace {

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, bool channels_last,
                                 Generator& generator) {
  auto layer = std::make_shared<nn::Conv2d>(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false).channels_last(channels_last),
      generator);
  nn::init::kaiming_normal_(layer->weight(), generator, 0.0, nn::init::FanMode::fan_out, nn::init::Nonlinearity::relu);
  return layer;
}

std::shared_ptr<nn::BatchNorm2d> batch_norm(int64_t channels, bool channels_last) {
  return std::make_shared<nn::BatchNorm2d>(nn::BatchNorm2dOptions(channels).channels_last(channels_last));
}

// A block's shortcut: the identity, or the projection (a 1x1 conv with the block's stride and a batch norm,
// registered as the Sequential "downsample" for torchvision's names), whose batch norm the block's last
// batch norm takes into its own pass (BatchNorm2d::forward_add_relu with the shortcut's batch norm).
struct Shortcut {
  std::shared_ptr<nn::Sequential> modules;  // null: the identity
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> norm;
  // relu(last_norm(main) + shortcut(input)), the projection's conv run before `main`'s producer as the
  // unfused block ran it: main_producer() makes main.
  template <typename Producer>
  Tensor end(nn::BatchNorm2d& last_norm, const Tensor& input, Producer&& main_producer) const {
    if (!modules) return last_norm.forward_add_relu(main_producer(), input);
    const Tensor projected = conv->forward(input);
    return last_norm.forward_add_relu(main_producer(), *norm, projected);
  }
};

// The projection shortcut, "downsample.0" and "downsample.1" in the block.
Shortcut projection(int64_t in, int64_t out, int64_t stride, bool channels_last, Generator& generator) {
  Shortcut shortcut{std::make_shared<nn::Sequential>(), conv(in, out, 1, stride, channels_last, generator),
                    batch_norm(out, channels_last)};
  shortcut.modules->push_back(shortcut.conv);
  shortcut.modules->push_back(shortcut.norm);
  return shortcut;
}

class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in, int64_t planes, int64_t stride, bool zero_init_residual, bool channels_last,
             Generator& generator)
      : Module("BasicBlock") {
    conv1_ = register_module("conv1", conv(in, planes, 3, stride, channels_last, generator));
    bn1_ = register_module("bn1", batch_norm(planes, channels_last));
    conv2_ = register_module("conv2", conv(planes, planes, 3, 1, channels_last, generator));
    bn2_ = register_module("bn2", batch_norm(planes, channels_last));
    if (zero_init_residual) nn::init::zeros_(bn2_->weight());
    if (stride != 1 || in != planes) {
      downsample_ = projection(in, planes, stride, channels_last, generator);
      register_module("downsample", downsample_.modules);
    }
  }
  Tensor forward(const Tensor& input) override {
    const Tensor out = bn1_->forward_relu(conv1_->forward(input));
    return downsample_.end(*bn2_, input, [&] { return conv2_->forward(out); });
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  Shortcut downsample_;
};

class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t planes, int64_t stride, bool zero_init_residual, bool channels_last,
             Generator& generator)
      : Module("Bottleneck") {
    conv1_ = register_module("conv1", conv(in, planes, 1, 1, channels_last, generator));
    bn1_ = register_module("bn1", batch_norm(planes, channels_last));
    conv2_ = register_module("conv2", conv(planes, planes, 3, stride, channels_last, generator));
    bn2_ = register_module("bn2", batch_norm(planes, channels_last));
    conv3_ = register_module("conv3", conv(planes, planes * kExpansion, 1, 1, channels_last, generator));
    bn3_ = register_module("bn3", batch_norm(planes * kExpansion, channels_last));
    if (zero_init_residual) nn::init::zeros_(bn3_->weight());
    if (stride != 1 || in != planes * kExpansion) {
      downsample_ = projection(in, planes * kExpansion, stride, channels_last, generator);
      register_module("downsample", downsample_.modules);
    }
  }
  Tensor forward(const Tensor& input) override {
    Tensor out = bn1_->forward_relu(conv1_->forward(input));
    out = bn2_->forward_relu(conv2_->forward(out));
    return downsample_.end(*bn3_, input, [&] { return conv3_->forward(out); });
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_, bn3_;
  Shortcut downsample_;
};

class ResNet : public nn::Module {
 public:
  template <typename Block>
  static std::shared_ptr<ResNet> build(const std::vector<int64_t>& blocks_per_stage, const ModelOptions& options,
                                       Generator& generator) {
    auto net = std::make_shared<ResNet>();
    bool imagenet_stem = options.stem == "imagenet";
    OPSNN_CHECK_AS(ConfigError, imagenet_stem || options.stem == "cifar", "model.stem: unknown stem '", options.stem,
                   "' (accepted: imagenet, cifar)");
    OPSNN_CHECK_AS(ConfigError, options.width >= 0, "model.width must not be negative, got ", options.width);
    int64_t base = options.width > 0 ? options.width : 64;
    net->stem_ = net->register_module(
        "conv1", conv(options.in_channels, base, imagenet_stem ? 7 : 3, imagenet_stem ? 2 : 1, false, generator));
    net->bn1_ = net->register_module("bn1", std::make_shared<nn::BatchNorm2d>(base));
    if (imagenet_stem)
      net->pool_ = net->register_module("maxpool",
                                        std::make_shared<nn::MaxPool2d>(nn::MaxPool2dOptions(3).stride(2).padding(1)));
    int64_t in = base;
    const int64_t planes[4] = {base, 2 * base, 4 * base, 8 * base};
    for (size_t stage = 0; stage < 4; ++stage) {
      auto layer = std::make_shared<nn::Sequential>();
      for (int64_t b = 0; b < blocks_per_stage[stage]; ++b) {
        int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        layer->push_back(std::make_shared<Block>(in, planes[stage], stride, options.zero_init_residual,
                                                 options.channels_last, generator));
        in = planes[stage] * Block::kExpansion;
      }
      net->stages_.push_back(net->register_module("layer" + std::to_string(stage + 1), layer));
    }
    net->fc_ = net->register_module("fc", std::make_shared<nn::Linear>(in, options.num_classes, generator));
    net->channels_last_ = options.channels_last;
    return net;
  }

  ResNet() : Module("ResNet") {}
  Tensor forward(const Tensor& input) override {
    const Tensor stem = stem_->forward(input);
    Tensor x = pool_ ? bn1_->forward_relu_max_pool(stem, *pool_) : bn1_->forward_relu(stem);
    if (channels_last_) x = ops::permute(x, {0, 2, 3, 1});
    for (const auto& stage : stages_) x = stage->forward(x);
    return fc_->forward(channels_last_ ? ops::global_avg_pool2d_nhwc(x) : ops::global_avg_pool2d(x));
  }

 private:
  std::shared_ptr<nn::Conv2d> stem_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::MaxPool2d> pool_;
  std::vector<std::shared_ptr<nn::Sequential>> stages_;
  std::shared_ptr<nn::Linear> fc_;
  bool channels_last_ = false;  // the residual stages' activations are NHWC
};

}  // namespace

bool channels_last_by_default(Device device, DType compute_dtype, bool tf32) {
  return device.is_cuda() && (compute_dtype == DType::bf16 || compute_dtype == DType::f16 || tf32);
}

std::shared_ptr<nn::Module> make_resnet(int depth, const ModelOptions& options, Generator& generator) {
  switch (depth) {
    case 18:
      return ResNet::build<BasicBlock>({2, 2, 2, 2}, options, generator);
    case 34:
      return ResNet::build<BasicBlock>({3, 4, 6, 3}, options, generator);
    case 50:
      return ResNet::build<Bottleneck>({3, 4, 6, 3}, options, generator);
    default:
      throw ConfigError(detail::concat("resnet depth ", depth, " is not built in (18, 34, 50)"));
  }
}

}  // namespace opsnn::models
