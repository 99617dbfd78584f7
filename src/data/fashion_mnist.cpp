// Fashion-MNIST: locating the four IDX files, cross-checking images against labels, normalising batches.
#include "opsnn/data/fashion_mnist.h"

#include <cmath>
#include <filesystem>

#include "opsnn/core/error.h"
#include "opsnn/data/idx.h"

namespace opsnn::data {
namespace {

constexpr const char* kPackageHint =
    "the Fashion-MNIST files come with the package `dataset-fashion-mnist` (third_party/install_deps.sh "
    "installs it); or point data.root at a folder holding them";

}  // namespace

std::string locate_fashion_mnist_file(const std::string& root, const std::string& base_name) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(root, error)) {
    throw DataError(detail::concat("data root '", root, "' ",
                                   fs::exists(root, error) ? "is not a directory" : "does not exist", "; ",
                                   kPackageHint));
  }
  const fs::path folder(root);
  for (const std::string& candidate : {base_name + ".gz", base_name}) {
    if (fs::is_regular_file(folder / candidate, error)) return (folder / candidate).string();
  }
  throw DataError(detail::concat((folder / (base_name + ".gz")).string(), ": file not found (nor ", base_name,
                                 " uncompressed); ", kPackageHint));
}

FashionMnist::FashionMnist(const std::string& root, Split split, Normalization normalization) : split_(split) {
  // A NaN or infinite setting would turn every pixel into NaN (or 0) without a word: settings, not data.
  OPSNN_CHECK_AS(ConfigError, std::isfinite(normalization.mean),
                 "Fashion-MNIST normalisation mean must be finite, got ", normalization.mean);
  OPSNN_CHECK_AS(ConfigError, std::isfinite(normalization.std) && normalization.std > 0.0f,
                 "Fashion-MNIST normalisation std must be finite and positive, got ", normalization.std);
  const std::string prefix = split == Split::train ? "train" : "t10k";
  images_path_ = locate_fashion_mnist_file(root, prefix + "-images-idx3-ubyte");
  labels_path_ = locate_fashion_mnist_file(root, prefix + "-labels-idx1-ubyte");

  IdxImages images = read_idx_images(images_path_);
  labels_ = read_idx_labels(labels_path_, static_cast<int>(kNumClasses));
  if (static_cast<int64_t>(labels_.size()) != images.count) {
    throw DataError(detail::concat(images_path_, " holds ", images.count, " images (header at byte 4) but ",
                                   labels_path_, " holds ", labels_.size(), " labels"));
  }
  if (images.rows != 28 || images.cols != 28) {
    throw DataError(detail::concat(images_path_, ": images are ", images.rows, " x ", images.cols,
                                   " (header at byte 8), Fashion-MNIST images are 28 x 28"));
  }
  count_ = images.count;
  rows_ = images.rows;
  cols_ = images.cols;
  pixels_ = std::move(images.pixels);
  for (int value = 0; value < 256; ++value) {
    pixel_values_[value] = (static_cast<float>(value) / 255.0f - normalization.mean) / normalization.std;
  }
}

std::string FashionMnist::name() const { return split_ == Split::train ? "fashion_mnist/train" : "fashion_mnist/test"; }

void FashionMnist::get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const {
  check_batch_arguments(indices, inputs, labels);
  const int64_t pixels_per_image = rows_ * cols_;
  float* out = inputs.data<float>();
  int64_t* out_labels = labels.data<int64_t>();
  for (size_t row = 0; row < indices.size(); ++row) {
    const uint8_t* source = pixels_.data() + indices[row] * pixels_per_image;
    float* destination = out + static_cast<int64_t>(row) * pixels_per_image;
    for (int64_t i = 0; i < pixels_per_image; ++i) destination[i] = pixel_values_[source[i]];
    out_labels[row] = labels_[static_cast<size_t>(indices[row])];
  }
}

const char* FashionMnist::class_name(int64_t label) {
  static const char* const names[kNumClasses] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  OPSNN_CHECK(label >= 0 && label < kNumClasses, "Fashion-MNIST label ", label, " out of range [0, 10)");
  return names[label];
}

}  // namespace opsnn::data
