// Decoding JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libpng) files from memory into 8-bit RGB pixels,
// for the image_folder dataset. Byte-level entry points, so the fuzz target (tests/fuzz/fuzz_image_decode.cpp)
// reaches exactly what the dataset runs. The format is taken from the leading bytes, not the file name
// (a PNG named .JPEG, as ImageNet has, decodes as the PNG it is).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace opsnn::data {

enum class ImageFormat { unknown, jpeg, png };

// The format whose signature the bytes start with (JPEG: FF D8 FF; PNG: the 8-byte PNG signature).
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);
const char* image_format_name(ImageFormat format);  // "JPEG", "PNG", "unknown"

// Pillow's decompression-bomb limit (2 x Image.MAX_IMAGE_PIXELS): a header of a few bytes can claim a
// gigapixel image, and the decoder would allocate it before finding the data missing.
inline constexpr int64_t kDefaultMaxImagePixels = 178956970;

struct ImageInfo {
  ImageFormat format = ImageFormat::unknown;
  int64_t width = 0;
  int64_t height = 0;
};

struct DecodeOptions {
  // JPEG only: decode with the smallest of TurboJPEG's DCT scaling factors (1/8 to 1) whose result is still
  // at least min_width x min_height, which skips most of the inverse DCT work when the target is much
  // smaller than the file. 0 x 0 = full size. PNG is always decoded at full size.
  int64_t min_width = 0;
  int64_t min_height = 0;
  // Images claiming more pixels than this are refused (DataError) before anything is allocated for them.
  int64_t max_pixels = kDefaultMaxImagePixels;
};

// 8-bit RGB, rows top to bottom, the three channels of each pixel together (HWC).
struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3
  // The DCT scaling factor the JPEG was decoded with: a source pixel edge at x lies at x * scale_num /
  // scale_denom here (exact per 8x8 block; the last column and row may cover the block's padding).
  int scale_num = 1;
  int scale_denom = 1;
};

// The format and size from the header alone. DataError naming `source` when the bytes are neither a
// JPEG nor a PNG, or the header is malformed.
ImageInfo read_image_info(std::span<const uint8_t> bytes, const std::string& source);

// Decodes a JPEG or PNG (by its signature). Every failure is a DataError naming `source`: unknown format,
// corrupt or truncated data, an image over options.max_pixels. Never anything else for bad bytes.
//  - JPEG: grayscale is replicated into RGB; 4-component (CMYK and YCCK) files are read with Adobe's
//    inverted convention and converted as Pillow does (R = (255 - C)(255 - K) / 255, ...), since TurboJPEG
//    decodes those to CMYK only. A file that ends before its image data does ("Premature end of JPEG
//    file") is refused, as Pillow refuses truncated files; other libjpeg warnings (extraneous bytes, a
//    corrupt data segment libjpeg recovers from) are accepted.
//  - PNG: palette, grayscale (1 to 16 bits), grayscale + alpha, RGB, RGBA and Adam7-interlaced images;
//    16-bit samples keep their high byte (libpng's strip_16), alpha and tRNS transparency are dropped
//    (Pillow's convert("RGB")), gamma and colour-profile chunks are ignored. A missing IEND is accepted.
RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options = {});
RgbImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options = {});
RgbImage decode_png(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options = {});

}  // namespace opsnn::data
