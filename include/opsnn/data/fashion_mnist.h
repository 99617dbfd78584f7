// Fashion-MNIST (Xiao et al. 2017) from its four IDX files: 60000 training and 10000 test images of
// 28x28 grey pixels in 10 classes, normalised on the fly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opsnn/data/dataset.h"

namespace opsnn::data {

class FashionMnist final : public Dataset {
 public:
  // Where the distribution's `dataset-fashion-mnist` package installs the files.
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr int64_t kNumClasses = 10;

  // Reads <root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (the .gz file is preferred).
  // Throws DataError naming the path when the root or a file is missing, and naming file and byte
  // offset when a file is malformed.
  FashionMnist(const std::string& root, Split split, Normalization normalization = Normalization::fashion_mnist());

  std::string name() const override;
  int64_t size() const override { return count_; }
  Shape sample_shape() const override { return {1, rows_, cols_}; }
  int64_t num_classes() const override { return kNumClasses; }
  float background_value(int64_t) const override { return pixel_values_[0]; }
  void get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const override;

  const std::vector<uint8_t>& labels() const { return labels_; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }
  // The path of the images and labels file actually read.
  const std::string& images_path() const { return images_path_; }
  const std::string& labels_path() const { return labels_path_; }

  static const char* class_name(int64_t label);  // "T-shirt/top", ..., "Ankle boot"

 private:
  Split split_;
  int64_t count_ = 0, rows_ = 0, cols_ = 0;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
  float pixel_values_[256];  // normalised value of each byte value
  std::string images_path_, labels_path_;
};

// The file a Fashion-MNIST component is read from: <root>/<base>.gz, else <root>/<base>. Throws
// DataError (naming the path and the package that provides it) when the root or both files are missing.
std::string locate_fashion_mnist_file(const std::string& root, const std::string& base_name);

}  // namespace opsnn::data
