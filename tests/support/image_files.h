// Writing small JPEG (TurboJPEG's tjCompress2) and PNG (libpng) files from generated pixels, for the
// image_folder tests: the tests make their photos at test time rather than committing any.
#pragma once

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace opsnn::testing {

inline void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!file) throw std::runtime_error("cannot write " + path.string());
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// A JPEG of width x height pixels in `pixel_format` (TJPF_RGB: 3 bytes a pixel, TJPF_GRAY: 1, TJPF_CMYK: 4).
inline std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& pixels, int width, int height,
                                        int pixel_format = TJPF_RGB, int quality = 100, int subsampling = TJSAMP_444) {
  if (pixel_format == TJPF_GRAY) subsampling = TJSAMP_GRAY;
  tjhandle handle = tjInitCompress();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int status = tjCompress2(handle, pixels.data(), width, 0, height, pixel_format, &buffer, &size, subsampling,
                                 quality, TJFLAG_ACCURATEDCT);
  std::vector<uint8_t> bytes;
  if (status == 0) bytes.assign(buffer, buffer + size);
  const std::string message = status == 0 ? "" : tjGetErrorStr2(handle);
  tjFree(buffer);
  tjDestroy(handle);
  if (status != 0) throw std::runtime_error("tjCompress2: " + message);
  return bytes;
}

// What a PNG file holds: rows of `bit_depth` samples as PNG stores them (16-bit big-endian, sub-byte
// samples packed from the high bit), of `color_type` (PNG_COLOR_TYPE_*), with an optional palette and tRNS.
struct PngSpec {
  int width = 0, height = 0;
  int color_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<uint8_t> rows;  // height rows of png row bytes, one after another
  std::vector<png_color> palette;
  std::vector<uint8_t> palette_alpha;  // tRNS for a palette image
};

namespace detail {

struct PngOutput {
  std::vector<uint8_t>* bytes;
};

inline void png_write_bytes(png_structp png, png_bytep data, size_t length) {
  auto* output = static_cast<PngOutput*>(png_get_io_ptr(png));
  output->bytes->insert(output->bytes->end(), data, data + length);
}
inline void png_flush_nothing(png_structp) {}

// Owns nothing with a destructor: libpng's error longjmp lands in this frame.
inline bool write_png_rows(png_structp png, png_infop info, const PngSpec* spec, png_bytep* rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, spec->width, spec->height, spec->bit_depth, spec->color_type,
               spec->interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec->palette.empty()) png_set_PLTE(png, info, spec->palette.data(), static_cast<int>(spec->palette.size()));
  if (!spec->palette_alpha.empty())
    png_set_tRNS(png, info, spec->palette_alpha.data(), static_cast<int>(spec->palette_alpha.size()), nullptr);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}

}  // namespace detail

inline std::vector<uint8_t> encode_png(const PngSpec& spec) {
  std::vector<uint8_t> bytes;
  detail::PngOutput output{&bytes};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &output, detail::png_write_bytes, detail::png_flush_nothing);
  const size_t row_bytes = spec.rows.size() / static_cast<size_t>(spec.height);
  std::vector<png_bytep> rows(static_cast<size_t>(spec.height));
  for (int y = 0; y < spec.height; ++y)
    rows[static_cast<size_t>(y)] = const_cast<png_bytep>(spec.rows.data()) + static_cast<size_t>(y) * row_bytes;
  const bool written = detail::write_png_rows(png, info, &spec, rows.data());
  png_destroy_write_struct(&png, &info);
  if (!written) throw std::runtime_error("libpng could not write the test image");
  return bytes;
}

// An 8-bit RGB PNG of interleaved pixels.
inline std::vector<uint8_t> encode_rgb_png(const std::vector<uint8_t>& pixels, int width, int height) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.rows = pixels;
  return encode_png(spec);
}

// A smooth colour pattern (JPEG keeps it within a few levels), varied by `variant`.
inline std::vector<uint8_t> gradient_pixels(int width, int height, int variant = 0) {
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      uint8_t* p = pixels.data() + (static_cast<size_t>(y) * width + x) * 3;
      p[0] = static_cast<uint8_t>((x * 255) / std::max(1, width - 1));
      p[1] = static_cast<uint8_t>((y * 255) / std::max(1, height - 1));
      p[2] = static_cast<uint8_t>((variant * 29) % 128 + ((x + y) * 127) / std::max(1, width + height - 2));
    }
  return pixels;
}

}  // namespace opsnn::testing
