// JPEG through TurboJPEG (with its DCT-domain scaling), PNG through libpng's progressive-free row API with
// the transforms that turn every PNG colour type into 8-bit RGB. libpng reports errors by longjmp: the
// one function that calls setjmp (read_png_rows) holds no C++ object in its frame, so nothing is skipped.
#include "data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

#include "opsnn/core/error.h"

namespace opsnn::data {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

[[noreturn]] void refuse(const std::string& source, const std::string& message) {
  throw DataError(source + ": " + message);
}

void check_pixels(int64_t width, int64_t height, const DecodeOptions& options, const std::string& source,
                  const char* format) {
  if (width <= 0 || height <= 0)
    refuse(source, detail::concat(format, " header gives a ", width, "x", height, " image"));
  if (width > options.max_pixels / height)
    refuse(source, detail::concat(format, " image of ", width, "x", height, " pixels is more than the ",
                                  options.max_pixels, " pixels allowed (a decompression bomb or a corrupt header)"));
}

uint32_t read_be32(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | p[3];
}

// ---- JPEG ----

struct TurboJpegHandle {
  tjhandle handle = tjInitDecompress();
  ~TurboJpegHandle() {
    if (handle != nullptr) tjDestroy(handle);
  }
  TurboJpegHandle() = default;
  TurboJpegHandle(const TurboJpegHandle&) = delete;
  TurboJpegHandle& operator=(const TurboJpegHandle&) = delete;
};

struct JpegHeader {
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
};

JpegHeader read_jpeg_header(tjhandle handle, std::span<const uint8_t> bytes, const std::string& source) {
  JpegHeader header;
  if (tjDecompressHeader3(handle, bytes.data(), static_cast<unsigned long>(bytes.size()), &header.width, &header.height,
                          &header.subsampling, &header.colorspace) != 0)
    refuse(source, std::string("corrupt JPEG header (") + tjGetErrorStr2(handle) + ")");
  return header;
}

// The smallest scaling factor <= 1 whose scaled size is still at least the minimum (1/1 when none is).
tjscalingfactor pick_scaling(int width, int height, const DecodeOptions& options) {
  tjscalingfactor best{1, 1};
  if (options.min_width <= 0 && options.min_height <= 0) return best;
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  int64_t best_area = static_cast<int64_t>(width) * height;
  for (int i = 0; factors != nullptr && i < count; ++i) {
    const tjscalingfactor factor = factors[i];
    if (factor.num > factor.denom) continue;  // enlarging factors cost more and add nothing
    const int64_t scaled_width = TJSCALED(width, factor), scaled_height = TJSCALED(height, factor);
    const int64_t area = scaled_width * scaled_height;
    if (scaled_width >= options.min_width && scaled_height >= options.min_height && area < best_area) {
      best = factor;
      best_area = area;
    }
  }
  return best;
}

}  // namespace

ImageFormat sniff_image_format(std::span<const uint8_t> bytes) {
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return ImageFormat::jpeg;
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngSignature, 8) == 0) return ImageFormat::png;
  return ImageFormat::unknown;
}

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::jpeg:
      return "JPEG";
    case ImageFormat::png:
      return "PNG";
    case ImageFormat::unknown:
      break;
  }
  return "unknown";
}

namespace {

[[noreturn]] void refuse_unknown(std::span<const uint8_t> bytes, const std::string& source) {
  if (bytes.empty()) refuse(source, "empty file, not a JPEG or PNG image");
  std::string start;
  for (size_t i = 0; i < bytes.size() && i < 4; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02X", bytes[i]);
    if (i > 0) start += ' ';
    start += hex;
  }
  refuse(source, "not a JPEG or PNG image (the file starts with bytes " + start + ")");
}

}  // namespace

ImageInfo read_image_info(std::span<const uint8_t> bytes, const std::string& source) {
  ImageInfo info;
  info.format = sniff_image_format(bytes);
  if (info.format == ImageFormat::jpeg) {
    TurboJpegHandle tj;
    if (tj.handle == nullptr) refuse(source, std::string("cannot start TurboJPEG: ") + tjGetErrorStr2(nullptr));
    const JpegHeader header = read_jpeg_header(tj.handle, bytes, source);
    info.width = header.width;
    info.height = header.height;
    if (info.width <= 0 || info.height <= 0)
      refuse(source, detail::concat("corrupt JPEG header (", info.width, "x", info.height, " pixels)"));
  } else if (info.format == ImageFormat::png) {
    // Signature, then the IHDR chunk: length 13, type, width, height (big-endian).
    if (bytes.size() < 8 + 8 + 13) refuse(source, "truncated PNG (no complete IHDR chunk)");
    if (read_be32(bytes.data() + 8) != 13 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0)
      refuse(source, "corrupt PNG (the first chunk is not a 13-byte IHDR)");
    info.width = read_be32(bytes.data() + 16);
    info.height = read_be32(bytes.data() + 20);
    if (info.width == 0 || info.height == 0 || info.width > 0x7FFFFFFF || info.height > 0x7FFFFFFF)
      refuse(source, detail::concat("corrupt PNG header (", info.width, "x", info.height, " pixels)"));
  } else {
    refuse_unknown(bytes, source);
  }
  return info;
}

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options) {
  if (sniff_image_format(bytes) != ImageFormat::jpeg) refuse(source, "not a JPEG file (no FF D8 FF signature)");
  TurboJpegHandle tj;
  if (tj.handle == nullptr) refuse(source, std::string("cannot start TurboJPEG: ") + tjGetErrorStr2(nullptr));
  const JpegHeader header = read_jpeg_header(tj.handle, bytes, source);
  check_pixels(header.width, header.height, options, source, "JPEG");
  const tjscalingfactor factor = pick_scaling(header.width, header.height, options);
  RgbImage image;
  image.width = TJSCALED(header.width, factor);
  image.height = TJSCALED(header.height, factor);
  image.scale_num = factor.num;
  image.scale_denom = factor.denom;
  // TurboJPEG decodes CMYK and YCCK files to CMYK only (TJPF_RGB is refused for them): convert below.
  const bool cmyk = header.colorspace == TJCS_CMYK || header.colorspace == TJCS_YCCK;
  const int channels = cmyk ? 4 : 3;
  std::vector<uint8_t> decoded(static_cast<size_t>(image.width * image.height * channels));
  // Accurate integer IDCT (libjpeg's default, what Pillow uses); a bound on progressive scans so a file
  // of endless scans cannot take minutes.
  const int flags = TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS;
  if (tjDecompress2(tj.handle, bytes.data(), static_cast<unsigned long>(bytes.size()), decoded.data(),
                    static_cast<int>(image.width), 0, static_cast<int>(image.height), cmyk ? TJPF_CMYK : TJPF_RGB,
                    flags) != 0) {
    const std::string message = tjGetErrorStr2(tj.handle);
    if (tjGetErrorCode(tj.handle) != TJERR_WARNING) refuse(source, "corrupt JPEG (" + message + ")");
    // libjpeg pads a file that ends early with grey and warns: that is a truncated file, refused.
    if (message.find("Premature end of JPEG file") != std::string::npos)
      refuse(source, "truncated JPEG (" + message + ")");
  }
  if (!cmyk) {
    image.pixels = std::move(decoded);
    return image;
  }
  image.pixels.resize(static_cast<size_t>(image.width * image.height * 3));
  const size_t pixels = static_cast<size_t>(image.width * image.height);
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* in = decoded.data() + 4 * i;
    uint8_t* out = image.pixels.data() + 3 * i;
    // Stored inverted (Adobe): ink = 255 - stored. Pillow's cmyk2rgb: out = nk - nk * ink / 255, nk = 255 - K.
    const int nk = in[3];  // 255 - K
    for (int c = 0; c < 3; ++c) {
      const int ink = 255 - in[c];
      const int t = ink * nk + 128;
      const int value = nk - (((t >> 8) + t) >> 8);
      out[c] = static_cast<uint8_t>(value < 0 ? 0 : value > 255 ? 255 : value);
    }
  }
  return image;
}

// ---- PNG ----

namespace {

struct PngInput {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t offset = 0;
  char message[256] = {};
};

void png_read_bytes(png_structp png, png_bytep out, size_t length) {
  PngInput* input = static_cast<PngInput*>(png_get_io_ptr(png));
  if (length > input->size - input->offset) png_error(png, "truncated file (it ends inside a chunk)");
  std::memcpy(out, input->data + input->offset, length);
  input->offset += length;
}

void png_on_error(png_structp png, png_const_charp message) {
  PngInput* input = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(input->message, sizeof input->message, "%s", message != nullptr ? message : "libpng error");
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // ancillary-chunk complaints; the pixels are fine

// What read_png_rows needs, owned by its caller so that the setjmp frame owns nothing.
struct PngJob {
  png_structp png = nullptr;
  png_infop info = nullptr;
  PngInput* input = nullptr;
  const DecodeOptions* options = nullptr;
  RgbImage* image = nullptr;
  std::vector<png_bytep>* rows = nullptr;
  bool too_large = false;
};

// Returns false with input->message set (or job->too_large) on failure. No C++ object with a destructor
// lives in this frame, so libpng's longjmp back into it skips nothing; the vectors it fills belong to the
// caller (their resize may throw std::bad_alloc, which leaves through this frame as usual).
bool read_png_rows(PngJob* job) {
  png_structp png = job->png;
  png_infop info = job->info;
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
  png_get_IHDR(png, info, &width, &height, &bit_depth, &color_type, nullptr, nullptr, nullptr);
  if (width == 0 || height == 0 || static_cast<int64_t>(width) > job->options->max_pixels / height) {
    job->too_large = true;
    job->image->width = width;
    job->image->height = height;
    return false;
  }
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);  // an alpha channel, or the one palette and tRNS expansion would add
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(width) * 3) png_error(png, "unexpected row layout");
  job->image->width = width;
  job->image->height = height;
  job->image->pixels.resize(static_cast<size_t>(width) * height * 3);
  job->rows->resize(height);
  for (png_uint_32 y = 0; y < height; ++y)
    (*job->rows)[y] = job->image->pixels.data() + static_cast<size_t>(y) * width * 3;
  png_read_image(png, job->rows->data());
  return true;  // the chunks after the image data (and IEND) are not read: Pillow ignores them too
}

}  // namespace

RgbImage decode_png(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options) {
  if (sniff_image_format(bytes) != ImageFormat::png) refuse(source, "not a PNG file (no PNG signature)");
  const ImageInfo header = read_image_info(bytes, source);  // the size from IHDR, before libpng reads on
  check_pixels(header.width, header.height, options, source, "PNG");
  PngInput input;
  input.data = bytes.data();
  input.size = bytes.size();
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &input, png_on_error, png_on_warning);
  if (png == nullptr) refuse(source, "cannot start libpng");
  png_infop info = png_create_info_struct(png);
  struct Cleanup {
    png_structp* png;
    png_infop* info;
    ~Cleanup() { png_destroy_read_struct(png, *info != nullptr ? info : nullptr, nullptr); }
  } cleanup{&png, &info};
  if (info == nullptr) refuse(source, "cannot start libpng");
  png_set_read_fn(png, &input, png_read_bytes);
  // The pixels need none of the ancillary chunks but tRNS, and a file may claim any length for them:
  // libpng reads a text chunk or an ICC profile into a buffer of the claimed length (a 56-byte fuzz input
  // with a zTXt header claiming 1.2 GB made it allocate and clear that much). Ignored chunks are skipped
  // as they are read, never buffered; the limit bounds what any other chunk may make libpng allocate.
  static const png_byte kIgnored[] =
      "bKGD\0cHRM\0eXIf\0gAMA\0hIST\0iCCP\0iTXt\0oFFs\0pCAL\0pHYs\0sBIT\0sCAL\0sPLT\0"
      "sRGB\0sTER\0tEXt\0tIME\0zTXt";
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kIgnored, static_cast<int>(sizeof kIgnored / 5));
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, 0);  // chunks libpng does not know
  png_set_chunk_malloc_max(png, size_t{8} << 20);
  RgbImage image;
  std::vector<png_bytep> rows;
  PngJob job{png, info, &input, &options, &image, &rows};
  if (!read_png_rows(&job)) {
    if (job.too_large) check_pixels(image.width, image.height, options, source, "PNG");
    refuse(source, std::string("corrupt PNG (") + input.message + ")");
  }
  return image;
}

RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& source, const DecodeOptions& options) {
  switch (sniff_image_format(bytes)) {
    case ImageFormat::jpeg:
      return decode_jpeg(bytes, source, options);
    case ImageFormat::png:
      return decode_png(bytes, source, options);
    case ImageFormat::unknown:
      break;
  }
  refuse_unknown(bytes, source);
}

}  // namespace opsnn::data
