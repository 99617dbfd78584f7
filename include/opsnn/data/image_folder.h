// image_folder: real photos in torchvision's ImageFolder layout, <root>/<split>/<class>/<file>, decoded
// (JPEG, PNG) and transformed on the fly into f32 [3, S, S] samples: RandomResizedCrop for training, resize
// of the shorter side to round(S / 0.875) and a centre crop for evaluation, both with bilinear resampling
// (without the antialiasing Pillow adds when it shrinks), then per-channel mean/std normalisation.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "opsnn/data/dataset.h"

namespace opsnn::data {

enum class BadImagePolicy {
  skip,   // warn naming the file, count it, and use the next sample that decodes instead
  error,  // DataError naming the file
};

// torchvision's ColorJitter, applied to training crops after resampling and before normalisation, in this
// fixed order (torchvision draws a random order): brightness x *= b; contrast x = c*x + (1-c)*mean gray of
// the crop; saturation x = s*x + (1-s)*gray of the pixel; hue: the chroma rotated by h turns in YIQ space
// (torchvision shifts H in HSV; the YIQ rotation is the usual cheaper approximation). b, c, s are uniform in
// [max(0, 1 - x), 1 + x] and h in [-hue, hue], drawn from the sample's seed; values are clamped to [0, 1]
// after each step, as torchvision's are. All zero: off.
struct ColorJitter {
  double brightness = 0.0, contrast = 0.0, saturation = 0.0, hue = 0.0;  // in [0, 1]; hue in [0, 0.5]
  bool enabled() const { return brightness > 0.0 || contrast > 0.0 || saturation > 0.0 || hue > 0.0; }
};

// The jitter factors of one sample, from its seed (a Philox stream apart from the crop's).
struct JitterFactors {
  double brightness = 1.0, contrast = 1.0, saturation = 1.0, hue = 0.0;
};
JitterFactors draw_jitter(const ColorJitter& jitter, uint64_t seed);
// Applies the factors to a [3, plane] float image with values in [0, 1], in place.
void apply_jitter(const JitterFactors& factors, float* rgb, int64_t plane);

struct ImageFolderOptions {
  std::string root;             // holds one folder per split
  std::string split = "train";  // the folder under root: <root>/<split>/<class>/...
  // The class list (label order). Empty: the split's subfolder names sorted by their bytes (what the
  // training split does); otherwise the training split's list, which every subfolder must be in.
  std::vector<std::string> classes;
  int64_t image_size = 224;                                   // samples are [3, image_size, image_size]
  bool random_resized_crop = true;                            // training; false: resize + centre crop (evaluation)
  std::array<double, 2> crop_scale = {0.08, 1.0};             // of the image area, in (0, 1]
  std::array<double, 2> crop_ratio = {3.0 / 4.0, 4.0 / 3.0};  // width / height of the crop box
  bool normalize = true;                                      // ImageNet's mean and std per channel; false: pixel / 255
  bool jpeg_dct_scaling = true;  // decode JPEGs at the smallest DCT scale still large enough for the crop
  // Normalisation statistics with normalize (per channel, of pixels in [0, 1]); default ImageNet's.
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  ColorJitter color_jitter;  // applied to random_resized_crop (training) samples only
  BadImagePolicy on_bad_image = BadImagePolicy::skip;
};

// ImageNet's per-channel statistics (torchvision's), of RGB pixels in [0, 1].
inline constexpr std::array<float, 3> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd = {0.229f, 0.224f, 0.225f};

// The files with these extensions (compared case-insensitively, so ImageNet's .JPEG counts) are images;
// any other file is ignored and counted.
bool has_image_extension(const std::string& file_name);

// A crop box in pixels of the source image: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool operator==(const CropBox&) const = default;
};

// torchvision's RandomResizedCrop.get_params: up to 10 tries of an area fraction uniform in `scale` and a
// log-uniform aspect ratio in `ratio` (sides rounded half to even, as Python's round), then the centre
// crop of the ratio-clamped whole image. The draws come from Philox keyed by `seed`, not torch's stream.
CropBox random_resized_crop_box(int64_t width, int64_t height, std::array<double, 2> scale, std::array<double, 2> ratio,
                                uint64_t seed);

// torchvision's Resize(round(size / 0.875)) of the shorter side (the longer side truncated, as
// torchvision computes it) followed by CenterCrop(size): the resized size and the crop's top-left corner.
struct ResizeCenterCrop {
  int64_t resized_width = 0, resized_height = 0;
  int64_t top = 0, left = 0;
};
ResizeCenterCrop resize_center_crop(int64_t width, int64_t height, int64_t size);

// How one encoded image becomes a sample.
struct ImageTransform {
  int64_t image_size = 224;
  bool random_resized_crop = true;
  std::array<double, 2> crop_scale = {0.08, 1.0};
  std::array<double, 2> crop_ratio = {3.0 / 4.0, 4.0 / 3.0};
  bool jpeg_dct_scaling = true;
  std::array<float, 3> mean = {0.0f, 0.0f, 0.0f};
  std::array<float, 3> std = {1.0f, 1.0f, 1.0f};
  ColorJitter color_jitter;
  int64_t max_pixels = 178956970;  // refuse larger images (image_decode.h: kDefaultMaxImagePixels)
};

// Decodes `bytes` (JPEG or PNG, by signature) and writes the transformed sample into `out`, f32 [3, S, S]
// (S = image_size): value = (pixel / 255 - mean[c]) / std[c], the pixel the bilinear sample rounded to
// 8 bits. `seed` drives the random crop. DataError naming `source` for bytes that do not decode.
void transform_image(std::span<const uint8_t> bytes, const std::string& source, const ImageTransform& transform,
                     uint64_t seed, float* out);

class ImageFolder final : public Dataset {
 public:
  // Scans <root>/<split>: each subfolder is a class, every file below it (subfolders too, in sorted
  // order, as torchvision's os.walk) with an image extension a sample. DataError naming the path for a
  // missing root or split folder, a class folder without images, a class the given list lacks, or a
  // split without classes; ConfigError for bad transform settings.
  explicit ImageFolder(ImageFolderOptions options);

  std::string name() const override { return "image_folder/" + options_.split; }
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape sample_shape() const override { return {3, options_.image_size, options_.image_size}; }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  float background_value(int64_t channel) const override;
  std::vector<std::string> class_names() const override { return classes_; }
  // Without seeds (Dataset::get): sample i gets sample_seed(0, 0, i).
  void get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const override;
  void get_batch_seeded(std::span<const int64_t> indices, std::span<const uint64_t> sample_seeds, const Tensor& inputs,
                        const Tensor& labels) const override;

  const ImageFolderOptions& options() const { return options_; }
  const std::string& folder() const { return folder_; }  // <root>/<split>
  std::string file_path(int64_t index) const;            // the file of sample `index`
  int64_t label(int64_t index) const;
  int64_t ignored_files() const { return ignored_files_; }  // non-image files found by the scan
  int64_t bad_images() const;  // distinct files skipped so far as unreadable (on_bad_image: skip)

 private:
  // Decodes sample `index` into `out`; throws DataError naming the file.
  void load(int64_t index, uint64_t seed, float* out) const;

  ImageFolderOptions options_;
  ImageTransform transform_;
  std::string folder_;
  std::vector<std::string> classes_;
  std::string relative_paths_;          // every sample's path below folder_, one after another
  std::vector<uint64_t> path_offsets_;  // sample i is relative_paths_[offsets[i], offsets[i + 1])
  std::vector<int32_t> labels_;
  int64_t ignored_files_ = 0;
  mutable std::mutex bad_mutex_;
  mutable std::unordered_set<int64_t> bad_;  // samples known not to decode
};

}  // namespace opsnn::data
