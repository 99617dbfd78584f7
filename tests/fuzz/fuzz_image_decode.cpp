// libFuzzer target: the image decoders of image_folder (opsnn::data::decode_image: JPEG through
// TurboJPEG, PNG through libpng), at full size and DCT-scaled, and the training and evaluation transforms
// of what they accept. The input is the image file.
#include <algorithm>
#include <cmath>
#include <span>

#include "data/image_decode.h"
#include "fuzz_support.h"
#include "opsnn/data/image_folder.h"

namespace {

// Bounded time and memory per input: a header may claim any size, and every claimed pixel is decoded
// (libjpeg fills what is missing).
constexpr int64_t kMaxPixels = int64_t{1} << 20;

void check_image(const opsnn::data::RgbImage& image) {
  if (image.width <= 0 || image.height <= 0 || image.width * image.height > kMaxPixels) __builtin_trap();
  if (image.pixels.size() != static_cast<size_t>(image.width * image.height * 3)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace opsnn::data;
  const std::span<const uint8_t> bytes(data, size);
  const char* source = "fuzz-image";
  opsnn::fuzz::expect_clean_refusal([&] {
    const ImageInfo info = read_image_info(bytes, source);
    DecodeOptions options;
    options.max_pixels = kMaxPixels;
    const RgbImage full = decode_image(bytes, source, options);
    check_image(full);
    if (full.width != info.width || full.height != info.height) __builtin_trap();
    // A reduced decode is at least the size asked for (or the full size) and never larger than full.
    options.min_width = std::max<int64_t>(1, info.width / 5);
    options.min_height = std::max<int64_t>(1, info.height / 3);
    const RgbImage reduced = decode_image(bytes, source, options);
    check_image(reduced);
    if (reduced.width > full.width || reduced.height > full.height) __builtin_trap();
    if (reduced.width < options.min_width || reduced.height < options.min_height) __builtin_trap();
  });
  opsnn::fuzz::expect_clean_refusal([&] {
    ImageTransform transform;
    transform.image_size = 8;
    transform.max_pixels = kMaxPixels;
    transform.mean = kImageNetMean;
    transform.std = kImageNetStd;
    float sample[3 * 8 * 8];
    for (const bool random_crop : {false, true}) {
      transform.random_resized_crop = random_crop;
      transform_image(bytes, source, transform, size, sample);
      for (float value : sample)
        if (!std::isfinite(value) || std::abs(value) > 3.0f) __builtin_trap();  // (0..1 - mean) / std
    }
  });
  return 0;
}
