// The small models: an MLP on flattened images and the small CNN (conv16-pool-conv32-pool-fc) that the
// quickstart trains on Fashion-MNIST.
#include "opsnn/core/error.h"
#include "opsnn/models/models.h"
#include "opsnn/nn/layers.h"
#include "opsnn/nn/sequential.h"

namespace opsnn::models {

std::shared_ptr<nn::Module> make_mlp(const ModelOptions& options, Generator& generator) {
  OPSNN_CHECK_AS(ConfigError, !options.hidden.empty(), "model.hidden: the mlp needs at least one hidden width");
  OPSNN_CHECK_AS(ConfigError, options.image_size >= 1, "model.image_size must be at least 1, got ", options.image_size);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back("flatten", std::make_shared<nn::Flatten>());
  int64_t width = 0;  // in_channels * image_size^2 inputs, checked: a wrapped product built a wrong layer
  OPSNN_CHECK_AS(ConfigError,
                 !__builtin_mul_overflow(options.in_channels, options.image_size, &width) &&
                     !__builtin_mul_overflow(width, options.image_size, &width),
                 "model.in_channels x model.image_size^2 (", options.in_channels, " x ", options.image_size,
                 "^2) overflows a 64-bit count");
  for (size_t i = 0; i < options.hidden.size(); ++i) {
    OPSNN_CHECK_AS(ConfigError, options.hidden[i] >= 1, "model.hidden[", i, "] must be at least 1, got ",
                   options.hidden[i]);
    model->push_back("fc" + std::to_string(i + 1), std::make_shared<nn::Linear>(width, options.hidden[i], generator));
    model->push_back("relu" + std::to_string(i + 1), std::make_shared<nn::ReLU>());
    width = options.hidden[i];
  }
  model->push_back("head", std::make_shared<nn::Linear>(width, options.num_classes, generator));
  return model;
}

std::shared_ptr<nn::Module> make_small_cnn(const ModelOptions& options, Generator& generator) {
  OPSNN_CHECK_AS(ConfigError, options.image_size >= 4 && options.image_size % 4 == 0,
                 "model.image_size must be a positive multiple of 4 for small_cnn, got ", options.image_size);
  OPSNN_CHECK_AS(ConfigError, options.width >= 0, "model.width must not be negative, got ", options.width);
  int64_t width = options.width > 0 ? options.width : 16;
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(
      "conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(options.in_channels, width, 3).padding(1), generator));
  model->push_back("relu1", std::make_shared<nn::ReLU>());
  model->push_back("pool1", std::make_shared<nn::MaxPool2d>(nn::MaxPool2dOptions(2)));
  model->push_back("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(width, 2 * width, 3).padding(1), generator));
  model->push_back("relu2", std::make_shared<nn::ReLU>());
  model->push_back("pool2", std::make_shared<nn::MaxPool2d>(nn::MaxPool2dOptions(2)));
  model->push_back("flatten", std::make_shared<nn::Flatten>());
  int64_t side = options.image_size / 4;
  model->push_back("fc", std::make_shared<nn::Linear>(2 * width * side * side, options.num_classes, generator));
  return model;
}

}  // namespace opsnn::models
