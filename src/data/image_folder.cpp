// image_folder: the folder scan (classes, samples, ignored files), the torchvision crop geometry, the
// bilinear resampling of a decoded image into a normalised [3, S, S] sample, and the bad-image policy.
#include "opsnn/data/image_folder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <utility>

#include "data/image_decode.h"
#include "opsnn/core/error.h"
#include "opsnn/core/rng.h"
#include "opsnn/data/fashion_mnist.h"
#include "opsnn/data/transforms.h"

namespace opsnn::data {
namespace fs = std::filesystem;

static_assert(ImageTransform{}.max_pixels == kDefaultMaxImagePixels);

namespace {

// Python's round(): halves to even (the default rounding mode of nearbyint).
int64_t round_half_even(double value) { return static_cast<int64_t>(std::nearbyint(value)); }

// No image file is near this; a larger one is refused rather than read whole into memory.
constexpr int64_t kMaxImageFileBytes = int64_t{1} << 30;

std::vector<uint8_t> read_image_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  for (;;) {
    const size_t got = std::fread(buffer, 1, sizeof buffer, file.get());
    bytes.insert(bytes.end(), buffer, buffer + got);
    if (static_cast<int64_t>(bytes.size()) > kMaxImageFileBytes)
      throw DataError(path + ": larger than 1 GiB, not an image this loader reads");
    if (got < sizeof buffer) break;
  }
  if (std::ferror(file.get())) throw DataError(path + ": read error (" + std::strerror(errno) + ")");
  return bytes;
}

// One axis of the resampling: output pixel o samples the decoded image at position(o), a pixel-centre
// coordinate, between decoded pixels index0 and index1 = index0 + 1 (clamped) with weight of index1.
struct AxisTap {
  int64_t index0 = 0, index1 = 0;
  float weight = 0.0f;
};

// Output pixel o covers source edge coordinates start + [o, o + 1) * step; the source box [box_begin,
// box_end) is what may be sampled (the crop, as Pillow crops before it resizes). `scale` maps source edge
// coordinates to the decoded image's (DCT scaling), of `decoded` pixels.
std::vector<AxisTap> axis_taps(int64_t outputs, double start, double step, double box_begin, double box_end,
                               double scale, int64_t decoded) {
  std::vector<AxisTap> taps(static_cast<size_t>(outputs));
  const double low = std::max(0.0, (box_begin + 0.5) * scale - 0.5);
  const double high = std::max(low, std::min(static_cast<double>(decoded - 1), (box_end - 0.5) * scale - 0.5));
  for (int64_t o = 0; o < outputs; ++o) {
    const double source = start + (static_cast<double>(o) + 0.5) * step;
    const double position = std::clamp(source * scale - 0.5, low, high);
    const double floor = std::floor(position);
    AxisTap& tap = taps[static_cast<size_t>(o)];
    tap.index0 = std::min(static_cast<int64_t>(floor), decoded - 1);
    tap.index1 = std::min(tap.index0 + 1, decoded - 1);
    tap.weight = static_cast<float>(position - floor);
  }
  return taps;
}

}  // namespace

bool has_image_extension(const std::string& file_name) {
  const size_t dot = file_name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string extension = file_name.substr(dot);
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == ".jpg" || extension == ".jpeg" || extension == ".png";
}

CropBox random_resized_crop_box(int64_t width, int64_t height, std::array<double, 2> scale, std::array<double, 2> ratio,
                                uint64_t seed) {
  OPSNN_CHECK(width > 0 && height > 0, "random_resized_crop_box: image of ", width, "x", height);
  Generator generator(seed);
  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double log_low = std::log(ratio[0]), log_high = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (scale[0] + (scale[1] - scale[0]) * generator.next_double());
    const double aspect = std::exp(log_low + (log_high - log_low) * generator.next_double());
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      CropBox box;
      box.height = h;
      box.width = w;
      box.top = static_cast<int64_t>(generator.next_below(static_cast<uint64_t>(height - h + 1)));
      box.left = static_cast<int64_t>(generator.next_below(static_cast<uint64_t>(width - w + 1)));
      return box;
    }
  }
  // Fallback: the whole image, cut to the nearest allowed aspect ratio, centred.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  const double min_ratio = std::min(ratio[0], ratio[1]), max_ratio = std::max(ratio[0], ratio[1]);
  CropBox box;
  box.width = width;
  box.height = height;
  if (in_ratio < min_ratio) {
    box.height = std::clamp<int64_t>(round_half_even(static_cast<double>(width) / min_ratio), 1, height);
  } else if (in_ratio > max_ratio) {
    box.width = std::clamp<int64_t>(round_half_even(static_cast<double>(height) * max_ratio), 1, width);
  }
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

ResizeCenterCrop resize_center_crop(int64_t width, int64_t height, int64_t size) {
  OPSNN_CHECK(width > 0 && height > 0 && size > 0, "resize_center_crop: image of ", width, "x", height, " to ", size);
  const int64_t shorter_target = round_half_even(static_cast<double>(size) / 0.875);
  ResizeCenterCrop geometry;
  geometry.resized_width = width;
  geometry.resized_height = height;
  const int64_t shorter = std::min(width, height), longer = std::max(width, height);
  if (shorter != shorter_target) {  // torchvision leaves an image whose shorter side fits as it is
    // int(new_short * long / short) in torchvision: the longer side truncated, never below the shorter.
    const int64_t new_longer = std::max<int64_t>(
        shorter_target,
        static_cast<int64_t>(static_cast<double>(shorter_target * longer) / static_cast<double>(shorter)));
    geometry.resized_width = width <= height ? shorter_target : new_longer;
    geometry.resized_height = width <= height ? new_longer : shorter_target;
  }
  geometry.top = round_half_even(static_cast<double>(geometry.resized_height - size) / 2.0);
  geometry.left = round_half_even(static_cast<double>(geometry.resized_width - size) / 2.0);
  return geometry;
}

JitterFactors draw_jitter(const ColorJitter& jitter, uint64_t seed) {
  Generator generator;
  generator.set_state(seed, uint64_t{1} << 40);  // counters far from the crop's, which start at 0
  auto factor = [&](double amount) {
    const double low = std::max(0.0, 1.0 - amount), high = 1.0 + amount;
    const double u = generator.next_double();  // drawn whether or not the amount is 0: stable streams
    return amount > 0.0 ? low + (high - low) * u : 1.0;
  };
  JitterFactors factors;
  factors.brightness = factor(jitter.brightness);
  factors.contrast = factor(jitter.contrast);
  factors.saturation = factor(jitter.saturation);
  const double u = generator.next_double();
  factors.hue = jitter.hue > 0.0 ? -jitter.hue + 2.0 * jitter.hue * u : 0.0;
  return factors;
}

void apply_jitter(const JitterFactors& factors, float* rgb, int64_t plane) {
  float* r = rgb;
  float* g = rgb + plane;
  float* b = rgb + 2 * plane;
  auto clamp01 = [](float v) { return std::clamp(v, 0.0f, 1.0f); };
  auto gray = [&](int64_t i) { return 0.299f * r[i] + 0.587f * g[i] + 0.114f * b[i]; };
  if (factors.brightness != 1.0) {
    const float f = static_cast<float>(factors.brightness);
    for (int64_t i = 0; i < 3 * plane; ++i) rgb[i] = clamp01(rgb[i] * f);
  }
  if (factors.contrast != 1.0) {
    double sum = 0.0;
    for (int64_t i = 0; i < plane; ++i) sum += gray(i);
    const float mean = static_cast<float>(sum / static_cast<double>(plane)), f = static_cast<float>(factors.contrast);
    for (int64_t i = 0; i < 3 * plane; ++i) rgb[i] = clamp01(f * rgb[i] + (1.0f - f) * mean);
  }
  if (factors.saturation != 1.0) {
    const float f = static_cast<float>(factors.saturation);
    for (int64_t i = 0; i < plane; ++i) {
      const float y = gray(i);
      r[i] = clamp01(f * r[i] + (1.0f - f) * y);
      g[i] = clamp01(f * g[i] + (1.0f - f) * y);
      b[i] = clamp01(f * b[i] + (1.0f - f) * y);
    }
  }
  if (factors.hue != 0.0) {
    // RGB -> YIQ, rotate (I, Q) by the angle, back to RGB (NTSC coefficients).
    const double angle = 2.0 * 3.14159265358979323846 * factors.hue;
    const float c = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle));
    for (int64_t i = 0; i < plane; ++i) {
      const float y = 0.299f * r[i] + 0.587f * g[i] + 0.114f * b[i];
      const float in = 0.596f * r[i] - 0.274f * g[i] - 0.322f * b[i];
      const float q = 0.211f * r[i] - 0.523f * g[i] + 0.312f * b[i];
      const float i2 = c * in - sn * q, q2 = sn * in + c * q;
      r[i] = clamp01(y + 0.956f * i2 + 0.621f * q2);
      g[i] = clamp01(y - 0.272f * i2 - 0.647f * q2);
      b[i] = clamp01(y - 1.106f * i2 + 1.703f * q2);
    }
  }
}

void transform_image(std::span<const uint8_t> bytes, const std::string& source, const ImageTransform& transform,
                     uint64_t seed, float* out) {
  const ImageInfo info = read_image_info(bytes, source);
  const int64_t width = info.width, height = info.height, size = transform.image_size;
  DecodeOptions decode;
  decode.max_pixels = transform.max_pixels;
  // The source region (edge coordinates) that becomes the output, and the box it may sample from.
  double start_x = 0.0, start_y = 0.0, step_x = 1.0, step_y = 1.0;
  double box_x0 = 0.0, box_y0 = 0.0, box_x1 = static_cast<double>(width), box_y1 = static_cast<double>(height);
  if (transform.random_resized_crop) {
    const CropBox box = random_resized_crop_box(width, height, transform.crop_scale, transform.crop_ratio, seed);
    start_x = box_x0 = static_cast<double>(box.left);
    start_y = box_y0 = static_cast<double>(box.top);
    box_x1 = static_cast<double>(box.left + box.width);
    box_y1 = static_cast<double>(box.top + box.height);
    step_x = static_cast<double>(box.width) / static_cast<double>(size);
    step_y = static_cast<double>(box.height) / static_cast<double>(size);
  } else {
    const ResizeCenterCrop geometry = resize_center_crop(width, height, size);
    step_x = static_cast<double>(width) / static_cast<double>(geometry.resized_width);
    step_y = static_cast<double>(height) / static_cast<double>(geometry.resized_height);
    start_x = static_cast<double>(geometry.left) * step_x;
    start_y = static_cast<double>(geometry.top) * step_y;
  }
  if (transform.jpeg_dct_scaling) {
    // At least one decoded pixel per output pixel across the region: the image at 1 / step of its size.
    decode.min_width = static_cast<int64_t>(std::ceil(static_cast<double>(width) / step_x - 1e-6));
    decode.min_height = static_cast<int64_t>(std::ceil(static_cast<double>(height) / step_y - 1e-6));
  }
  const RgbImage image = decode_image(bytes, source, decode);
  const double scale = static_cast<double>(image.scale_num) / static_cast<double>(image.scale_denom);
  const std::vector<AxisTap> columns = axis_taps(size, start_x, step_x, box_x0, box_x1, scale, image.width);
  const std::vector<AxisTap> rows = axis_taps(size, start_y, step_y, box_y0, box_y1, scale, image.height);
  float table[3][256];
  for (int c = 0; c < 3; ++c)
    for (int value = 0; value < 256; ++value)
      table[c][value] = (static_cast<float>(value) / 255.0f - transform.mean[c]) / transform.std[c];
  const uint8_t* pixels = image.pixels.data();
  const int64_t plane = size * size, stride = image.width * 3;
  const bool jitter = transform.random_resized_crop && transform.color_jitter.enabled();
  for (int64_t y = 0; y < size; ++y) {
    const AxisTap& row = rows[static_cast<size_t>(y)];
    const uint8_t* upper = pixels + row.index0 * stride;
    const uint8_t* lower = pixels + row.index1 * stride;
    for (int64_t x = 0; x < size; ++x) {
      const AxisTap& column = columns[static_cast<size_t>(x)];
      const int64_t left = column.index0 * 3, right = column.index1 * 3;
      for (int c = 0; c < 3; ++c) {
        const float top = upper[left + c] + (static_cast<float>(upper[right + c]) - upper[left + c]) * column.weight;
        const float bottom = lower[left + c] + (static_cast<float>(lower[right + c]) - lower[left + c]) * column.weight;
        const float value = top + (bottom - top) * row.weight;
        const int rounded = static_cast<int>(value + 0.5f);  // the 8-bit pixel Pillow's resize would store
        out[c * plane + y * size + x] =
            jitter ? static_cast<float>(std::clamp(rounded, 0, 255)) / 255.0f : table[c][std::clamp(rounded, 0, 255)];
      }
    }
  }
  if (jitter) {  // on the [0, 1] pixels, then normalised
    apply_jitter(draw_jitter(transform.color_jitter, seed), out, plane);
    for (int c = 0; c < 3; ++c)
      for (int64_t i = 0; i < plane; ++i)
        out[c * plane + i] = (out[c * plane + i] - transform.mean[c]) / transform.std[c];
  }
}

// ---- the dataset ----

ImageFolder::ImageFolder(ImageFolderOptions options) : options_(std::move(options)) {
  const ImageFolderOptions& o = options_;
  OPSNN_CHECK_AS(ConfigError, o.image_size >= 1 && o.image_size <= 8192,
                 "image_folder: image_size must be in [1, 8192], got ", o.image_size);
  OPSNN_CHECK_AS(ConfigError,
                 std::isfinite(o.crop_scale[0]) && std::isfinite(o.crop_scale[1]) && o.crop_scale[0] > 0.0 &&
                     o.crop_scale[0] <= o.crop_scale[1] && o.crop_scale[1] <= 1.0,
                 "image_folder: random_resized_crop scale must be [low, high] with 0 < low <= high <= 1, got [",
                 o.crop_scale[0], ", ", o.crop_scale[1], "]");
  OPSNN_CHECK_AS(ConfigError,
                 std::isfinite(o.crop_ratio[0]) && std::isfinite(o.crop_ratio[1]) && o.crop_ratio[0] > 0.0 &&
                     o.crop_ratio[0] <= o.crop_ratio[1],
                 "image_folder: random_resized_crop ratio must be [low, high] with 0 < low <= high, got [",
                 o.crop_ratio[0], ", ", o.crop_ratio[1], "]");
  transform_.image_size = o.image_size;
  transform_.random_resized_crop = o.random_resized_crop;
  transform_.crop_scale = o.crop_scale;
  transform_.crop_ratio = o.crop_ratio;
  transform_.jpeg_dct_scaling = o.jpeg_dct_scaling;
  for (int c = 0; c < 3; ++c)
    OPSNN_CHECK_AS(ConfigError, std::isfinite(o.mean[c]) && std::isfinite(o.std[c]) && o.std[c] > 0.0f,
                   "image_folder: normalisation std must be > 0 and mean and std finite, got mean ", o.mean[c],
                   ", std ", o.std[c], " for channel ", c);
  const ColorJitter& j = o.color_jitter;
  OPSNN_CHECK_AS(ConfigError,
                 j.brightness >= 0.0 && j.brightness <= 1.0 && j.contrast >= 0.0 && j.contrast <= 1.0 &&
                     j.saturation >= 0.0 && j.saturation <= 1.0 && j.hue >= 0.0 && j.hue <= 0.5,
                 "image_folder: color_jitter brightness, contrast and saturation must be in [0, 1] and hue in [0, "
                 "0.5], got ",
                 j.brightness, ", ", j.contrast, ", ", j.saturation, ", ", j.hue);
  if (o.normalize) {
    transform_.mean = o.mean;
    transform_.std = o.std;
  }
  transform_.color_jitter = o.color_jitter;

  // Said with a missing root or split: what data.root must be.
  const std::string hint = o.root.empty() || o.root == FashionMnist::kDefaultRoot
                               ? "data.root is left at Fashion-MNIST's default; set it to a folder holding "
                                 "train/<class>/ and val/<class>/"
                               : "data.root: a folder holding train/<class>/ and val/<class>/";
  std::error_code error;
  if (!fs::is_directory(o.root, error))
    throw DataError(detail::concat("image_folder root '", o.root, "' ",
                                   fs::exists(o.root, error) ? "is not a directory" : "does not exist", " (", hint,
                                   ")"));
  const fs::path folder = fs::path(o.root) / o.split;
  folder_ = folder.string();
  if (!fs::is_directory(folder, error)) throw DataError(detail::concat(folder_, ": no such folder (", hint, ")"));
  std::vector<std::string> found;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    std::error_code kind_error;
    if (it->is_directory(kind_error)) found.push_back(it->path().filename().string());
  }
  if (error) throw DataError(detail::concat(folder_, ": cannot list (", error.message(), ")"));
  std::sort(found.begin(), found.end());  // byte order
  if (o.classes.empty()) {
    classes_ = found;
    if (classes_.empty())
      throw DataError(detail::concat(folder_, ": no class folders (expected one subfolder per class)"));
  } else {
    classes_ = o.classes;
    for (const std::string& name : found) {
      if (std::find(classes_.begin(), classes_.end(), name) == classes_.end())
        throw DataError(detail::concat((folder / name).string(), ": class '", name, "' is not one of the ",
                                       classes_.size(), " classes of the training split"));
    }
  }
  OPSNN_CHECK_AS(DataError, classes_.size() <= 0x7FFFFFFF, folder_, ": too many classes");

  path_offsets_.push_back(0);
  for (const std::string& name : found) {
    const int32_t label = static_cast<int32_t>(std::find(classes_.begin(), classes_.end(), name) - classes_.begin());
    const fs::path class_folder = folder / name;
    // (folder below the class folder, file name): sorted like torchvision's sorted(os.walk(...)).
    std::vector<std::pair<std::string, std::string>> files;
    fs::recursive_directory_iterator it(class_folder, error), end;
    for (; !error && it != end; it.increment(error)) {
      std::error_code kind_error;
      if (it->is_directory(kind_error)) continue;  // walked into (symlinked folders are not: no loops)
      const std::string file_name = it->path().filename().string();
      if (it->is_regular_file(kind_error) && has_image_extension(file_name)) {
        files.emplace_back(it->path().parent_path().lexically_relative(folder).generic_string(), file_name);
      } else {
        ++ignored_files_;
      }
    }
    if (error) throw DataError(detail::concat(class_folder.string(), ": cannot list (", error.message(), ")"));
    if (files.empty())
      throw DataError(detail::concat(class_folder.string(), ": no .jpg, .jpeg or .png file in class '", name,
                                     "' (an empty class folder)"));
    std::sort(files.begin(), files.end());
    for (const auto& [directory, file_name] : files) {
      relative_paths_ += directory;
      relative_paths_ += '/';
      relative_paths_ += file_name;
      path_offsets_.push_back(relative_paths_.size());
      labels_.push_back(label);
    }
  }
  spdlog::info("image_folder {}: {} classes, {} images{}", folder_, classes_.size(), labels_.size(),
               ignored_files_ > 0 ? fmt::format("; {} other files ignored (not .jpg, .jpeg or .png)", ignored_files_)
                                  : std::string());
}

float ImageFolder::background_value(int64_t channel) const {
  const size_t c = static_cast<size_t>(std::clamp<int64_t>(channel, 0, 2));
  return (0.0f - transform_.mean[c]) / transform_.std[c];
}

std::string ImageFolder::file_path(int64_t index) const {
  OPSNN_CHECK(index >= 0 && index < size(), name(), ": sample index ", index, " out of range [0, ", size(), ")");
  const size_t begin = path_offsets_[static_cast<size_t>(index)], end = path_offsets_[static_cast<size_t>(index) + 1];
  return (fs::path(folder_) / relative_paths_.substr(begin, end - begin)).string();
}

int64_t ImageFolder::label(int64_t index) const {
  OPSNN_CHECK(index >= 0 && index < size(), name(), ": sample index ", index, " out of range [0, ", size(), ")");
  return labels_[static_cast<size_t>(index)];
}

int64_t ImageFolder::bad_images() const {
  std::lock_guard<std::mutex> lock(bad_mutex_);
  return static_cast<int64_t>(bad_.size());
}

void ImageFolder::load(int64_t index, uint64_t seed, float* out) const {
  const std::string path = file_path(index);
  try {
    const std::vector<uint8_t> bytes = read_image_file(path);
    transform_image(bytes, path, transform_, seed, out);
  } catch (const std::bad_alloc&) {
    throw DataError(path + ": out of memory decoding it");
  }
}

void ImageFolder::get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const {
  std::vector<uint64_t> seeds(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) seeds[i] = sample_seed(0, 0, indices[i]);
  get_batch_seeded(indices, seeds, inputs, labels);
}

void ImageFolder::get_batch_seeded(std::span<const int64_t> indices, std::span<const uint64_t> sample_seeds,
                                   const Tensor& inputs, const Tensor& labels) const {
  check_batch_arguments(indices, inputs, labels);
  OPSNN_CHECK(sample_seeds.size() == indices.size(), name(), ": ", sample_seeds.size(), " sample seeds for ",
              indices.size(), " samples");
  const int64_t values = 3 * options_.image_size * options_.image_size, count = size();
  float* out = inputs.data<float>();
  int64_t* out_labels = labels.data<int64_t>();
  for (size_t row = 0; row < indices.size(); ++row) {
    float* sample = out + static_cast<int64_t>(row) * values;
    bool loaded = false;
    // on_bad_image skip: the next sample (cyclically) that decodes stands in, with this row's seed.
    for (int64_t attempt = 0; attempt < count && !loaded; ++attempt) {
      const int64_t candidate = (indices[row] + attempt) % count;
      {
        std::lock_guard<std::mutex> lock(bad_mutex_);
        if (bad_.count(candidate) != 0) continue;
      }
      try {
        load(candidate, sample_seeds[row], sample);
        out_labels[row] = labels_[static_cast<size_t>(candidate)];
        loaded = true;
      } catch (const Error& failure) {
        if (options_.on_bad_image == BadImagePolicy::error)
          throw DataError(std::string(failure.what()) + " (data.on_bad_image: error)");
        int64_t bad_count = 0;
        bool first_time = false;
        {
          std::lock_guard<std::mutex> lock(bad_mutex_);
          first_time = bad_.insert(candidate).second;
          bad_count = static_cast<int64_t>(bad_.size());
        }
        if (first_time)
          spdlog::warn(
              "{}; skipped (data.on_bad_image: skip), the next image that decodes stands in; {} bad image{} "
              "in {} so far",
              failure.what(), bad_count, bad_count == 1 ? "" : "s", name());
      }
    }
    if (!loaded)
      throw DataError(detail::concat(folder_, ": none of its ", count,
                                     " images decodes (data.on_bad_image: skip has nothing to use instead)"));
  }
}

}  // namespace opsnn::data
