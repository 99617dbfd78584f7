// image_folder (src/data/image_folder.cpp, src/data/image_decode.cpp): PNG decoding exact for every colour
// type, JPEG (RGB, grayscale, CMYK) within JPEG's loss, DCT scaling, bad bytes refused with the file's
// name; the folder scan (sorted classes, ignored files, layout errors); the crop geometry; the evaluation
// transform on a known pattern; seeded random crops; flips; and the skip / error policies for bad images.
// Every image is written here at test time (tests/support/image_files.h).
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "data/image_decode.h"
#include "opsnn/core/error.h"
#include "opsnn/data/fashion_mnist.h"
#include "opsnn/data/image_folder.h"
#include "opsnn/data/loader.h"
#include "opsnn/data/synthetic.h"
#include "opsnn/data/transforms.h"
#include "support/catch.h"
#include "support/image_files.h"
#include "support/temporary_folder.h"

using namespace opsnn;
using namespace opsnn::data;
using opsnn::testing::encode_jpeg;
using opsnn::testing::encode_png;
using opsnn::testing::encode_rgb_png;
using opsnn::testing::gradient_pixels;
using opsnn::testing::PngSpec;
using opsnn::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-image-folder-test") {}
};

// Captures spdlog's default logger output while alive.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::logger> previous_;
};

size_t occurrences(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

RgbImage decode(const std::vector<uint8_t>& bytes, const DecodeOptions& options = {}) {
  return decode_image(bytes, "test-image", options);
}

// RGB pixels from a function of (x, y, channel).
template <typename Pixel>
std::vector<uint8_t> make_pixels(int width, int height, Pixel pixel) {
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) pixels[(static_cast<size_t>(y) * width + x) * 3 + c] = pixel(x, y, c);
  return pixels;
}

std::vector<uint8_t> noise_pixels(int width, int height, unsigned seed) {
  return make_pixels(width, height, [seed](int x, int y, int c) {
    return static_cast<uint8_t>((x * 73856093u ^ y * 19349663u ^ c * 83492791u ^ seed * 2654435761u) >> 7);
  });
}

// Left half `left`, right half `right` (top half); the bottom half likewise with `bottom_left` / `bottom_right`.
std::vector<uint8_t> quadrant_pixels(int width, int height, std::array<uint8_t, 3> top_left,
                                     std::array<uint8_t, 3> top_right, std::array<uint8_t, 3> bottom_left,
                                     std::array<uint8_t, 3> bottom_right) {
  return make_pixels(width, height, [&](int x, int y, int c) {
    const bool left = x < width / 2, top = y < height / 2;
    return top ? (left ? top_left[c] : top_right[c]) : (left ? bottom_left[c] : bottom_right[c]);
  });
}

int max_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  int worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(int(a[i]) - int(b[i])));
  return worst;
}

double mean_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return sum / static_cast<double>(a.size());
}

float normalized(int value, int channel) {
  return (static_cast<float>(value) / 255.0f - kImageNetMean[static_cast<size_t>(channel)]) /
         kImageNetStd[static_cast<size_t>(channel)];
}

// PNG rows of a grayscale image of `bits` per sample (packed from the high bit).
std::vector<uint8_t> pack_gray(const std::vector<int>& values, int width, int height, int bits) {
  const int row_bytes = (width * bits + 7) / 8;
  std::vector<uint8_t> rows(static_cast<size_t>(row_bytes) * height, 0);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const int value = values[static_cast<size_t>(y) * width + x];
      if (bits == 16) {
        rows[static_cast<size_t>(y) * row_bytes + 2 * x] = static_cast<uint8_t>(value >> 8);
        rows[static_cast<size_t>(y) * row_bytes + 2 * x + 1] = static_cast<uint8_t>(value);
      } else {
        const int bit = x * bits;
        rows[static_cast<size_t>(y) * row_bytes + bit / 8] |= static_cast<uint8_t>(value << (8 - bits - bit % 8));
      }
    }
  return rows;
}

PngSpec png_spec(int width, int height, int color_type, int bit_depth) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color_type = color_type;
  spec.bit_depth = bit_depth;
  return spec;
}

ImageFolderOptions folder_options(const fs::path& root, bool random_crop = false, int64_t size = 16) {
  ImageFolderOptions options;
  options.root = root.string();
  options.image_size = size;
  options.random_resized_crop = random_crop;
  return options;
}

std::vector<float> sample(const ImageFolder& folder, int64_t index, uint64_t seed) {
  Batch batch = folder.allocate_batch(1);
  const int64_t indices[1] = {index};
  const uint64_t seeds[1] = {seed};
  folder.get_batch_seeded(indices, seeds, batch.inputs, batch.labels);
  return batch.inputs.to_vector<float>();
}

}  // namespace

// ---- decoding ----

TEST_CASE("image decode: PNG of every colour type decodes exactly to the pixels written", "[data][image]") {
  const int width = 7, height = 5;  // odd sizes: interlace passes and sub-byte rows with padding bits
  const std::vector<uint8_t> rgb = noise_pixels(width, height, 1);

  SECTION("8-bit RGB, plain and Adam7-interlaced") {
    PngSpec spec;
    spec.width = width;
    spec.height = height;
    spec.rows = rgb;
    REQUIRE(decode(encode_png(spec)).pixels == rgb);
    spec.interlaced = true;
    const RgbImage image = decode(encode_png(spec));
    REQUIRE(image.width == width);
    REQUIRE(image.height == height);
    REQUIRE(image.pixels == rgb);
  }
  SECTION("RGBA: the alpha channel is dropped") {
    PngSpec spec = png_spec(width, height, PNG_COLOR_TYPE_RGB_ALPHA, 8);
    for (size_t i = 0; i < rgb.size() / 3; ++i) {
      spec.rows.insert(spec.rows.end(), rgb.begin() + 3 * i, rgb.begin() + 3 * i + 3);
      spec.rows.push_back(static_cast<uint8_t>(i * 37));
    }
    REQUIRE(decode(encode_png(spec)).pixels == rgb);
  }
  SECTION("16-bit RGB keeps the high byte") {
    PngSpec spec = png_spec(width, height, PNG_COLOR_TYPE_RGB, 16);
    for (size_t i = 0; i < rgb.size(); ++i) {
      spec.rows.push_back(rgb[i]);
      spec.rows.push_back(static_cast<uint8_t>(255 - rgb[i]));  // the low byte must not round the result
    }
    REQUIRE(decode(encode_png(spec)).pixels == rgb);
  }
  SECTION("palette, 8-bit with tRNS and 4-bit interlaced") {
    const std::vector<png_color> palette = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {12, 34, 56}, {200, 100, 50}};
    std::vector<int> indices(static_cast<size_t>(width * height));
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int>((i * 3) % palette.size());
    std::vector<uint8_t> expected;
    for (int index : indices)
      expected.insert(expected.end(), {palette[index].red, palette[index].green, palette[index].blue});
    for (int bits : {8, 4}) {
      INFO(bits << "-bit palette");
      PngSpec spec = png_spec(width, height, PNG_COLOR_TYPE_PALETTE, bits);
      spec.rows = pack_gray(indices, width, height, bits);
      spec.palette = palette;
      spec.interlaced = bits == 4;
      if (bits == 8) spec.palette_alpha = {0, 128, 255};  // transparency is dropped with convert("RGB")
      REQUIRE(decode(encode_png(spec)).pixels == expected);
    }
  }
  SECTION("grayscale of 2, 8 and 16 bits, and grayscale + alpha") {
    std::vector<int> gray(static_cast<size_t>(width * height));
    for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<int>((i * 41) % 256);
    auto replicated = [](const std::vector<int>& values) {
      std::vector<uint8_t> out;
      for (int v : values) out.insert(out.end(), 3, static_cast<uint8_t>(v));
      return out;
    };
    PngSpec gray8 = png_spec(width, height, PNG_COLOR_TYPE_GRAY, 8);
    gray8.rows = pack_gray(gray, width, height, 8);
    REQUIRE(decode(encode_png(gray8)).pixels == replicated(gray));

    std::vector<int> gray16(gray.size());
    for (size_t i = 0; i < gray.size(); ++i) gray16[i] = gray[i] * 256 + 201;
    PngSpec deep = png_spec(width, height, PNG_COLOR_TYPE_GRAY, 16);
    deep.rows = pack_gray(gray16, width, height, 16);
    REQUIRE(decode(encode_png(deep)).pixels == replicated(gray));

    std::vector<int> two_bit(gray.size()), scaled(gray.size());
    for (size_t i = 0; i < gray.size(); ++i) {
      two_bit[i] = static_cast<int>(i % 4);
      scaled[i] = two_bit[i] * 85;  // 0, 85, 170, 255: the bits replicated
    }
    PngSpec low = png_spec(width, height, PNG_COLOR_TYPE_GRAY, 2);
    low.rows = pack_gray(two_bit, width, height, 2);
    REQUIRE(decode(encode_png(low)).pixels == replicated(scaled));

    PngSpec with_alpha = png_spec(width, height, PNG_COLOR_TYPE_GRAY_ALPHA, 8);
    for (int v : gray) with_alpha.rows.insert(with_alpha.rows.end(), {static_cast<uint8_t>(v), uint8_t{77}});
    REQUIRE(decode(encode_png(with_alpha)).pixels == replicated(gray));
  }
}

TEST_CASE("image decode: JPEG within JPEG's loss of the pixels written, grayscale and CMYK", "[data][image]") {
  const int width = 48, height = 40;
  SECTION("RGB, quality 100 and 95 with 4:2:0 subsampling") {
    const std::vector<uint8_t> pixels = gradient_pixels(width, height);
    const std::vector<uint8_t> best = encode_jpeg(pixels, width, height, TJPF_RGB, 100);
    const ImageInfo info = read_image_info(best, "x.jpg");
    REQUIRE(info.format == ImageFormat::jpeg);
    REQUIRE(info.width == width);
    REQUIRE(info.height == height);
    RgbImage image = decode(best);
    REQUIRE(image.width == width);
    REQUIRE(image.height == height);
    CHECK(max_difference(image.pixels, pixels) <= 4);
    CHECK(mean_difference(image.pixels, pixels) < 1.0);
    image = decode(encode_jpeg(pixels, width, height, TJPF_RGB, 95, TJSAMP_420));
    CHECK(max_difference(image.pixels, pixels) <= 12);
    CHECK(mean_difference(image.pixels, pixels) < 2.5);
  }
  SECTION("grayscale is replicated into R, G and B") {
    std::vector<uint8_t> gray(static_cast<size_t>(width * height));
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x) gray[static_cast<size_t>(y * width + x)] = static_cast<uint8_t>(x * 5 + y);
    const RgbImage image = decode(encode_jpeg(gray, width, height, TJPF_GRAY, 100));
    std::vector<uint8_t> expected;
    for (uint8_t v : gray) expected.insert(expected.end(), 3, v);
    CHECK(max_difference(image.pixels, expected) <= 3);
    for (size_t i = 0; i < image.pixels.size(); i += 3) {
      REQUIRE(image.pixels[i] == image.pixels[i + 1]);
      REQUIRE(image.pixels[i] == image.pixels[i + 2]);
    }
  }
  SECTION("CMYK (written as YCCK) is read with Adobe's inverted convention and converted to RGB") {
    // Stored values are 255 - ink. Left half: no cyan, full magenta and yellow, no black = red. Right half:
    // ink (127, 127, 127) with black 55: R = G = B = 200 * (255 - 127) / 255 = 100.
    std::vector<uint8_t> cmyk;
    for (int y = 0; y < 16; ++y)
      for (int x = 0; x < 32; ++x)
        if (x < 16)
          cmyk.insert(cmyk.end(), {255, 0, 0, 255});
        else
          cmyk.insert(cmyk.end(), {128, 128, 128, 200});
    const RgbImage image = decode(encode_jpeg(cmyk, 32, 16, TJPF_CMYK, 100));
    REQUIRE(image.width == 32);
    const uint8_t* red = image.pixels.data() + (8 * 32 + 4) * 3;
    const uint8_t* grey = image.pixels.data() + (8 * 32 + 28) * 3;
    CHECK(std::abs(red[0] - 255) <= 3);
    CHECK(red[1] <= 3);
    CHECK(red[2] <= 3);
    for (int c = 0; c < 3; ++c) CHECK(std::abs(grey[c] - 100) <= 3);
  }
}

TEST_CASE("image decode: DCT scaling takes the smallest scale still at least the size asked for", "[data][image]") {
  const int width = 256, height = 192;
  const std::vector<uint8_t> pixels = gradient_pixels(width, height);
  const std::vector<uint8_t> jpeg = encode_jpeg(pixels, width, height, TJPF_RGB, 100);
  DecodeOptions options;
  const RgbImage full = decode(jpeg, options);
  REQUIRE(full.width == 256);
  REQUIRE(full.scale_denom == 1);
  options.min_width = 100;  // 1/4 gives 64 (too small), 3/8 gives 96 (too small), 1/2 gives 128
  options.min_height = 10;
  RgbImage half = decode(jpeg, options);
  REQUIRE(half.width == 128);
  REQUIRE(half.height == 96);
  REQUIRE(half.scale_num * 2 == half.scale_denom);
  // Each decoded pixel is (about) the mean of the 2x2 source pixels it covers.
  std::vector<uint8_t> reduced(static_cast<size_t>(128 * 96 * 3));
  for (int y = 0; y < 96; ++y)
    for (int x = 0; x < 128; ++x)
      for (int c = 0; c < 3; ++c) {
        int sum = 0;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) sum += pixels[((2 * y + dy) * width + 2 * x + dx) * 3 + c];
        reduced[(static_cast<size_t>(y) * 128 + x) * 3 + c] = static_cast<uint8_t>((sum + 2) / 4);
      }
  CHECK(max_difference(half.pixels, reduced) <= 6);
  options.min_width = 1;
  options.min_height = 1;
  const RgbImage eighth = decode(jpeg, options);
  REQUIRE(eighth.width == 32);
  REQUIRE(eighth.height == 24);
  options.min_width = 300;  // larger than the image: full size (no enlarging factor)
  REQUIRE(decode(jpeg, options).width == 256);
  // PNG ignores the request.
  REQUIRE(decode(encode_rgb_png(pixels, width, height), options).width == 256);
}

TEST_CASE("image decode: bad bytes are DataErrors naming the source", "[data][image]") {
  const std::vector<uint8_t> jpeg = encode_jpeg(noise_pixels(64, 64, 2), 64, 64, TJPF_RGB, 95);
  const std::vector<uint8_t> png = encode_rgb_png(noise_pixels(64, 64, 3), 64, 64);
  auto refusal = [](const std::vector<uint8_t>& bytes) {
    try {
      decode_image(bytes, "/photos/bad.file");
    } catch (const DataError& error) {
      return std::string(error.what());
    }
    FAIL("decoded bad bytes");
    return std::string();
  };
  using Catch::Contains;
  CHECK_THAT(refusal({}), Contains("/photos/bad.file") && Contains("empty file"));
  const std::string text = "just some text, not an image";
  CHECK_THAT(refusal(std::vector<uint8_t>(text.begin(), text.end())),
             Contains("/photos/bad.file") && Contains("not a JPEG or PNG image") && Contains("6A 75 73 74"));
  std::vector<uint8_t> corrupt = {0xFF, 0xD8, 0xFF};
  for (int i = 0; i < 200; ++i) corrupt.push_back(static_cast<uint8_t>(i * 7));
  CHECK_THAT(refusal(corrupt), Contains("/photos/bad.file") && Contains("corrupt JPEG"));
  CHECK_THAT(refusal(std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + jpeg.size() * 6 / 10)),
             Contains("/photos/bad.file") && Contains("truncated JPEG"));
  CHECK_THAT(refusal(std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + 100)), Contains("/photos/bad.file"));
  CHECK_THAT(refusal(std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2)),
             Contains("/photos/bad.file") && Contains("corrupt PNG") && Contains("truncated"));
  CHECK_THAT(refusal(std::vector<uint8_t>(png.begin(), png.begin() + 20)), Contains("/photos/bad.file"));
  std::vector<uint8_t> flipped = png;
  flipped[40] ^= 0x55;  // inside IDAT: a CRC error on a critical chunk
  CHECK_THAT(refusal(flipped), Contains("/photos/bad.file") && Contains("corrupt PNG"));
  // A valid IHDR claiming 100000 x 100000 pixels: refused before anything is allocated for it.
  std::vector<uint8_t> bomb(png.begin(), png.begin() + 8);
  const uint8_t ihdr[] = {0, 0, 0, 13, 'I', 'H', 'D', 'R', 0, 1, 0x86, 0xA0, 0, 1, 0x86, 0xA0, 8, 2, 0, 0, 0};
  bomb.insert(bomb.end(), std::begin(ihdr), std::end(ihdr));
  const uLong crc = crc32(0, ihdr + 4, sizeof ihdr - 4);
  for (int shift = 24; shift >= 0; shift -= 8) bomb.push_back(static_cast<uint8_t>(crc >> shift));
  REQUIRE(read_image_info(bomb, "bomb.png").width == 100000);
  CHECK_THAT(refusal(bomb), Contains("/photos/bad.file") && Contains("pixels allowed"));
}

// ---- the folder scan ----

namespace {

// root/train/{ant, bee, cat} and root/val/{ant, bee}: JPEG (.jpg, .JPEG, .jpeg) and PNG files (one in a
// subfolder), plus a notes.txt and a README without extension that are ignored.
void make_tree(const fs::path& root) {
  const int w = 40, h = 30;
  write_bytes(root / "train/cat/c0.jpeg", encode_jpeg(gradient_pixels(w, h, 1), w, h));
  write_bytes(root / "train/ant/a1.JPEG", encode_jpeg(gradient_pixels(w, h, 2), w, h));
  write_bytes(root / "train/ant/a0.jpg", encode_jpeg(gradient_pixels(w, h, 3), w, h));
  write_bytes(root / "train/ant/notes.txt", {'h', 'i'});
  write_bytes(root / "train/bee/sub/b2.png", encode_rgb_png(gradient_pixels(w, h, 4), w, h));
  write_bytes(root / "train/bee/b0.png", encode_rgb_png(gradient_pixels(w, h, 5), w, h));
  write_bytes(root / "train/bee/README", {'x'});
  write_bytes(root / "train/cat/c1.PNG", encode_rgb_png(gradient_pixels(w, h, 6), w, h));
  write_bytes(root / "val/bee/v1.png", encode_rgb_png(gradient_pixels(w, h, 7), w, h));
  write_bytes(root / "val/ant/v0.jpg", encode_jpeg(gradient_pixels(w, h, 8), w, h));
}

}  // namespace

TEST_CASE("image_folder: classes sorted by name, samples in torchvision's order, other files counted",
          "[data][image]") {
  TemporaryFolder folder;
  make_tree(folder.path);
  LogCapture log;
  ImageFolderOptions options = folder_options(folder.path);
  const ImageFolder train(options);
  REQUIRE(train.class_names() == std::vector<std::string>{"ant", "bee", "cat"});
  REQUIRE(train.num_classes() == 3);
  REQUIRE(train.size() == 6);
  REQUIRE(train.ignored_files() == 2);
  REQUIRE(train.sample_shape() == Shape{3, 16, 16});
  const fs::path split = folder.path / "train";
  const std::vector<std::string> expected = {"ant/a0.jpg",     "ant/a1.JPEG", "bee/b0.png",
                                             "bee/sub/b2.png", "cat/c0.jpeg", "cat/c1.PNG"};
  const std::vector<int64_t> labels = {0, 0, 1, 1, 2, 2};
  for (int64_t i = 0; i < train.size(); ++i) {
    CHECK(train.file_path(i) == (split / expected[static_cast<size_t>(i)]).string());
    CHECK(train.label(i) == labels[static_cast<size_t>(i)]);
  }
  CHECK_THAT(log.text(), Catch::Contains("3 classes, 6 images; 2 other files ignored"));
  CHECK(has_image_extension("x.JpEg"));
  CHECK_FALSE(has_image_extension("jpg"));
  CHECK_FALSE(has_image_extension("x.jpg.txt"));

  options.split = "val";
  options.classes = train.class_names();
  const ImageFolder val(options);
  REQUIRE(val.size() == 2);
  REQUIRE(val.num_classes() == 3);  // the training split's list, although val has no cat
  CHECK(val.label(0) == 0);
  CHECK(val.label(1) == 1);
  // Every sample decodes, with its label.
  Batch batch = val.get(std::vector<int64_t>{0, 1});
  CHECK(batch.labels.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  // Other datasets have no class names.
  CHECK(SyntheticImages(SyntheticImageOptions{}).class_names().empty());
}

TEST_CASE("image_folder: layout problems are DataErrors naming the path", "[data][image]") {
  using Catch::Contains;
  TemporaryFolder folder;
  make_tree(folder.path);
  ImageFolderOptions options = folder_options(folder.path / "nowhere");
  REQUIRE_THROWS_MATCHES(
      ImageFolder(options), DataError,
      Catch::Message(std::string("image_folder root '") + (folder.path / "nowhere").string() +
                     "' does not exist (data.root: a folder holding train/<class>/ and val/<class>/)"));
  options = folder_options(FashionMnist::kDefaultRoot);  // exists or not: the message says what to set
  REQUIRE_THROWS_WITH(ImageFolder(options), Contains("data.root is left at Fashion-MNIST's default"));
  options = folder_options(folder.path);
  options.split = "test";
  REQUIRE_THROWS_WITH(ImageFolder(options), Contains((folder.path / "test").string()) && Contains("no such folder"));

  fs::create_directories(folder.path / "train/dog");
  options.split = "train";
  REQUIRE_THROWS_WITH(ImageFolder(options),
                      Contains((folder.path / "train/dog").string()) && Contains("empty class folder"));
  write_bytes(folder.path / "train/dog/only.txt", {'x'});  // no image either
  REQUIRE_THROWS_WITH(ImageFolder(options), Contains("train/dog") && Contains("no .jpg, .jpeg or .png"));
  fs::remove_all(folder.path / "train/dog");

  write_bytes(folder.path / "val/eel/e.png", encode_rgb_png(gradient_pixels(4, 4), 4, 4));
  options.split = "val";
  options.classes = {"ant", "bee", "cat"};
  REQUIRE_THROWS_WITH(ImageFolder(options), Contains((folder.path / "val/eel").string()) &&
                                                Contains("class 'eel' is not one of the 3 classes"));

  fs::create_directories(folder.path / "bare/train");
  options = folder_options(folder.path / "bare");
  REQUIRE_THROWS_WITH(ImageFolder(options),
                      Contains((folder.path / "bare/train").string()) && Contains("no class folders"));
  options = folder_options(folder.path);
  options.crop_scale = {0.5, 0.2};
  REQUIRE_THROWS_AS(ImageFolder(options), ConfigError);
}

// ---- geometry and transforms ----

TEST_CASE("image_folder: torchvision's crop geometry", "[data][image]") {
  // Resize(256) of a 500 x 375 photo: 341 x 256 (341.33 truncated); CenterCrop(224): top 16, left
  // round(58.5) = 58 (Python rounds halves to even).
  ResizeCenterCrop geometry = resize_center_crop(500, 375, 224);
  CHECK(geometry.resized_width == 341);
  CHECK(geometry.resized_height == 256);
  CHECK(geometry.top == 16);
  CHECK(geometry.left == 58);
  geometry = resize_center_crop(300, 600, 224);  // portrait
  CHECK(geometry.resized_width == 256);
  CHECK(geometry.resized_height == 512);
  CHECK(geometry.left == 16);
  CHECK(geometry.top == 144);
  geometry = resize_center_crop(256, 300, 224);  // the shorter side already fits: left as it is
  CHECK(geometry.resized_width == 256);
  CHECK(geometry.resized_height == 300);
  CHECK(geometry.top == 38);

  // A 1000 x 10 strip: no try can fit (the crop would be at least 25 pixels high), so the fallback
  // crops the whole height at ratio 4/3: width round(13.33) = 13, centred.
  const CropBox strip = random_resized_crop_box(1000, 10, {0.08, 1.0}, {3.0 / 4.0, 4.0 / 3.0}, 7);
  CHECK(strip == CropBox{0, 493, 10, 13});
  const CropBox tall = random_resized_crop_box(10, 1000, {0.08, 1.0}, {3.0 / 4.0, 4.0 / 3.0}, 7);
  CHECK(tall == CropBox{493, 0, 13, 10});

  // Every box lies inside the image, with an area and aspect ratio near the ranges asked for.
  int distinct = 0;
  CropBox previous;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    const CropBox box = random_resized_crop_box(400, 300, {0.08, 1.0}, {3.0 / 4.0, 4.0 / 3.0}, seed);
    INFO("seed " << seed);
    REQUIRE(box.top >= 0);
    REQUIRE(box.left >= 0);
    REQUIRE(box.width >= 1);
    REQUIRE(box.height >= 1);
    REQUIRE(box.top + box.height <= 300);
    REQUIRE(box.left + box.width <= 400);
    const double area = static_cast<double>(box.width * box.height) / (400.0 * 300.0);
    REQUIRE(area > 0.07);
    const double ratio = static_cast<double>(box.width) / static_cast<double>(box.height);
    REQUIRE(ratio > 0.70);
    REQUIRE(ratio < 1.40);
    REQUIRE(box == random_resized_crop_box(400, 300, {0.08, 1.0}, {3.0 / 4.0, 4.0 / 3.0}, seed));
    distinct += !(box == previous);
    previous = box;
  }
  CHECK(distinct > 450);
}

TEST_CASE("image_folder: the evaluation transform puts a quadrant pattern where expected", "[data][image]") {
  // 64 x 48 with red / blue on top and green / white below, to 16 x 16: resized to 24 x 18 (shorter side
  // round(16 / 0.875) = 18), centre crop from (top 1, left 4). The halves meet between output columns 7
  // and 8 and rows 7 and 8, with no sample straddling them.
  TemporaryFolder folder;
  const std::array<uint8_t, 3> red{255, 0, 0}, blue{0, 0, 255}, green{0, 255, 0}, white{255, 255, 255};
  write_bytes(folder.path / "val/x/q.png", encode_rgb_png(quadrant_pixels(64, 48, red, blue, green, white), 64, 48));
  ImageFolderOptions options = folder_options(folder.path);
  options.split = "val";
  const ImageFolder val(options);
  const std::vector<float> image = sample(val, 0, 0);
  REQUIRE(image.size() == 3 * 16 * 16);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) {
      const std::array<uint8_t, 3>& expected = y < 8 ? (x < 8 ? red : blue) : (x < 8 ? green : white);
      for (int c = 0; c < 3; ++c) {
        INFO("pixel (" << y << ", " << x << ") channel " << c);
        REQUIRE(image[static_cast<size_t>(c * 256 + y * 16 + x)] == normalized(expected[c], c));
      }
    }
  // Without normalisation the values are pixel / 255; the background (crop padding) is a black pixel.
  options.normalize = false;
  const ImageFolder plain(options);
  CHECK(sample(plain, 0, 0)[0] == 1.0f);
  CHECK(plain.background_value(1) == 0.0f);
  CHECK(val.background_value(1) == normalized(0, 1));
}

TEST_CASE("image_folder: DCT-scaled JPEG decoding lands on the same geometry as a full decode", "[data][image]") {
  // 256 x 192 to 32 x 32: the evaluation resize is to 49 x 37, so the decode is at 1/4 scale (64 x 48).
  TemporaryFolder folder;
  write_bytes(folder.path / "val/x/g.jpg", encode_jpeg(gradient_pixels(256, 192), 256, 192));
  ImageFolderOptions options = folder_options(folder.path, false, 32);
  options.split = "val";
  options.normalize = false;
  const std::vector<float> scaled = sample(ImageFolder(options), 0, 0);
  options.jpeg_dct_scaling = false;
  const std::vector<float> full = sample(ImageFolder(options), 0, 0);
  float worst = 0.0f;
  for (size_t i = 0; i < full.size(); ++i) worst = std::max(worst, std::abs(full[i] - scaled[i]));
  CHECK(worst * 255.0f <= 4.5f);  // a shifted or misscaled mapping would be off by tens of levels
  CHECK(scaled != full);          // the scaled decode was used
  // Random crops too: each box in either decode gives nearly the same pixels.
  options.random_resized_crop = true;
  options.split = "val";
  for (uint64_t seed = 0; seed < 8; ++seed) {
    options.jpeg_dct_scaling = true;
    const std::vector<float> a = sample(ImageFolder(options), 0, seed);
    options.jpeg_dct_scaling = false;
    const std::vector<float> b = sample(ImageFolder(options), 0, seed);
    float difference = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) difference = std::max(difference, std::abs(a[i] - b[i]));
    INFO("seed " << seed);
    CHECK(difference * 255.0f <= 6.5f);
  }
}

TEST_CASE("image_folder: random crops are a pure function of (seed, epoch, index), new every epoch", "[data][image]") {
  TemporaryFolder folder;
  make_tree(folder.path);
  auto train = std::make_shared<ImageFolder>(folder_options(folder.path, true, 16));
  const std::vector<float> epoch0 = sample(*train, 2, sample_seed(5, 0, 2));
  CHECK(sample(*train, 2, sample_seed(5, 0, 2)) == epoch0);  // bit for bit
  CHECK(sample(ImageFolder(folder_options(folder.path, true, 16)), 2, sample_seed(5, 0, 2)) == epoch0);
  CHECK(sample(*train, 2, sample_seed(5, 1, 2)) != epoch0);  // another epoch, another crop
  CHECK(sample(*train, 2, sample_seed(6, 0, 2)) != epoch0);  // another seed
  CHECK(sample_seed(5, 0, 2) != sample_seed(5, 0, 3));

  // Through the loader: the same batches whatever the worker count, repeated from a seek.
  LoaderOptions options;
  options.batch_size = 4;
  options.seed = 5;
  options.num_workers = 0;
  DataLoader serial(train, options);
  options.num_workers = 2;
  DataLoader threaded(train, options);
  for (int64_t epoch = 0; epoch < 2; ++epoch)
    for (int64_t index = 0; index < 2; ++index) {
      const Batch a = serial.make_batch({epoch, index}), b = threaded.make_batch({epoch, index});
      REQUIRE(a.inputs.to_vector<float>() == b.inputs.to_vector<float>());
      REQUIRE(a.labels.to_vector<int64_t>() == b.labels.to_vector<int64_t>());
    }
  const std::vector<int64_t> indices = serial.batch_indices({1, 0});
  const Batch batch = serial.make_batch({1, 0});
  const std::vector<float> values = batch.inputs.to_vector<float>();
  const std::vector<float> first(values.begin(), values.begin() + 3 * 16 * 16);
  CHECK(first == sample(*train, indices[0], sample_seed(5, 1, indices[0])));
}

TEST_CASE("image_folder: data.augment.flip mirrors the transformed sample", "[data][image]") {
  TemporaryFolder folder;
  const std::array<uint8_t, 3> red{255, 0, 0}, blue{0, 0, 255};
  write_bytes(folder.path / "val/x/q.png", encode_rgb_png(quadrant_pixels(64, 48, red, blue, red, blue), 64, 48));
  ImageFolderOptions folder_settings = folder_options(folder.path);
  folder_settings.split = "val";
  auto val = std::make_shared<ImageFolder>(folder_settings);
  LoaderOptions options = LoaderOptions::evaluation(1, 0);
  options.augment.horizontal_flip = true;
  options.seed = 11;
  DataLoader loader(val, options);
  int flipped = 0;
  for (int64_t epoch = 0; epoch < 12; ++epoch) {
    const std::vector<float> image = loader.make_batch({epoch, 0}).inputs.to_vector<float>();
    const bool flip = draw_augment(options.augment, 11, epoch, 0).flip;
    flipped += flip;
    INFO("epoch " << epoch);
    // Red (channel 0 high) on the left unless flipped.
    REQUIRE(image[0] == normalized(flip ? 0 : 255, 0));
    REQUIRE(image[15] == normalized(flip ? 255 : 0, 0));
  }
  CHECK(flipped > 0);
  CHECK(flipped < 12);
}

// ---- bad images ----

TEST_CASE("image_folder: a bad image is skipped (warned once, counted) or fatal, naming its path", "[data][image]") {
  using Catch::Contains;
  TemporaryFolder folder;
  write_bytes(folder.path / "train/a/0.png", encode_rgb_png(gradient_pixels(20, 20, 1), 20, 20));
  write_bytes(folder.path / "train/a/1.jpg", {0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3});  // corrupt JPEG
  const std::vector<uint8_t> png = encode_rgb_png(noise_pixels(20, 20, 4), 20, 20);
  write_bytes(folder.path / "train/a/2.png", std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2));
  write_bytes(folder.path / "train/b/3.png", encode_rgb_png(gradient_pixels(20, 20, 3), 20, 20));
  const std::string corrupt = (folder.path / "train/a/1.jpg").string();
  const std::string truncated = (folder.path / "train/a/2.png").string();

  ImageFolderOptions options = folder_options(folder.path);
  const ImageFolder skip(options);
  REQUIRE(skip.size() == 4);
  {
    LogCapture log;
    // Samples 1 and 2 do not decode: sample 3 (class b) stands in for both, with each row's seed.
    const std::vector<float> expected = sample(skip, 3, 42);
    Batch batch = skip.allocate_batch(2);
    const std::vector<int64_t> indices = {1, 2};
    const std::vector<uint64_t> seeds = {42, 42};
    skip.get_batch_seeded(indices, seeds, batch.inputs, batch.labels);
    CHECK(batch.labels.to_vector<int64_t>() == std::vector<int64_t>{1, 1});
    const std::vector<float> values = batch.inputs.to_vector<float>();
    CHECK(std::vector<float>(values.begin(), values.begin() + expected.size()) == expected);
    CHECK(skip.bad_images() == 2);
    skip.get_batch_seeded(indices, seeds, batch.inputs, batch.labels);  // known bad: no second warning
    const std::string text = log.text();
    CHECK(occurrences(text, corrupt) == 1);
    CHECK(occurrences(text, truncated) == 1);
    CHECK_THAT(text, Contains("[warning]") && Contains("corrupt JPEG") && Contains("data.on_bad_image: skip") &&
                         Contains("2 bad images in image_folder/train so far"));
  }
  options.on_bad_image = BadImagePolicy::error;
  const ImageFolder strict(options);
  REQUIRE_THROWS_AS(strict.get(std::vector<int64_t>{0, 1}), DataError);
  REQUIRE_THROWS_WITH(strict.get(std::vector<int64_t>{0, 1}),
                      Catch::StartsWith(corrupt + ": corrupt JPEG") && Contains("(data.on_bad_image: error)"));
  REQUIRE_THROWS_WITH(strict.get(std::vector<int64_t>{2}), Contains(truncated) && Contains("truncated"));
  CHECK(strict.get(std::vector<int64_t>{3}).labels.to_vector<int64_t>() == std::vector<int64_t>{1});

  // A file that cannot be read, and a folder where nothing decodes.
  fs::remove(folder.path / "train/a/0.png");
  REQUIRE_THROWS_WITH(strict.get(std::vector<int64_t>{0}),
                      Contains((folder.path / "train/a/0.png").string()) && Contains("cannot open"));
  fs::remove(folder.path / "train/b/3.png");
  LogCapture quiet;
  REQUIRE_THROWS_WITH(skip.get(std::vector<int64_t>{0}),
                      Contains((folder.path / "train").string()) && Contains("none of its 4 images decodes"));
}

// ---- colour jitter and normalisation statistics ----

TEST_CASE("colour jitter: factors from the seed within their ranges, each step does what it says", "[data][image]") {
  ColorJitter jitter{0.4, 0.3, 0.2, 0.1};
  const JitterFactors a = draw_jitter(jitter, 17), b = draw_jitter(jitter, 17), c = draw_jitter(jitter, 18);
  CHECK(a.brightness == b.brightness);
  CHECK(a.hue == b.hue);
  CHECK(a.brightness != c.brightness);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const JitterFactors f = draw_jitter(jitter, seed);
    REQUIRE(f.brightness >= 0.6);
    REQUIRE(f.brightness <= 1.4);
    REQUIRE(f.contrast >= 0.7);
    REQUIRE(f.contrast <= 1.3);
    REQUIRE(f.saturation >= 0.8);
    REQUIRE(f.saturation <= 1.2);
    REQUIRE(std::abs(f.hue) <= 0.1);
  }
  const JitterFactors off = draw_jitter(ColorJitter{}, 17);
  CHECK((off.brightness == 1.0 && off.contrast == 1.0 && off.saturation == 1.0 && off.hue == 0.0));

  const int64_t plane = 4;
  const std::vector<float> image = {0.1f, 0.5f, 0.9f, 0.3f, 0.2f, 0.2f, 0.8f, 0.6f, 0.7f, 0.1f, 0.4f, 0.3f};
  auto jittered = [&](JitterFactors f) {
    std::vector<float> out = image;
    apply_jitter(f, out.data(), plane);
    return out;
  };
  // Brightness scales and clamps to 1.
  std::vector<float> bright = jittered({1.5, 1.0, 1.0, 0.0});
  for (size_t i = 0; i < image.size(); ++i) CHECK(bright[i] == Approx(std::min(1.0f, image[i] * 1.5f)));
  // Saturation 0 leaves each pixel's gray in every channel; contrast 0 leaves the crop's mean gray.
  std::vector<float> gray = jittered({1.0, 1.0, 0.0, 0.0});
  double mean_gray = 0.0;
  for (int64_t i = 0; i < plane; ++i) {
    const float y = 0.299f * image[i] + 0.587f * image[plane + i] + 0.114f * image[2 * plane + i];
    mean_gray += y / plane;
    CHECK(gray[i] == Approx(y));
    CHECK(gray[plane + i] == Approx(y));
    CHECK(gray[2 * plane + i] == Approx(y));
  }
  for (float v : jittered({1.0, 0.0, 1.0, 0.0})) CHECK(v == Approx(mean_gray));
  // A hue rotation keeps gray pixels gray and, away from the clamp, each pixel's luma.
  std::vector<float> grays = {0.2f, 0.5f, 0.7f, 0.9f, 0.2f, 0.5f, 0.7f, 0.9f, 0.2f, 0.5f, 0.7f, 0.9f};
  apply_jitter({1.0, 1.0, 1.0, 0.25}, grays.data(), plane);
  for (int64_t i = 0; i < plane; ++i) CHECK(grays[i] == Approx(grays[2 * plane + i]).margin(1e-5));
  std::vector<float> hue = jittered({1.0, 1.0, 1.0, 0.05});
  CHECK(hue != image);
  for (int64_t i = 0; i < plane; ++i)
    CHECK(0.299f * hue[i] + 0.587f * hue[plane + i] + 0.114f * hue[2 * plane + i] ==
          Approx(0.299f * image[i] + 0.587f * image[plane + i] + 0.114f * image[2 * plane + i]).margin(2e-3));
}

TEST_CASE("image_folder: colour jitter on training crops only, repeatable, custom mean and std", "[data][image]") {
  TemporaryFolder folder;
  make_tree(folder.path);
  ImageFolderOptions plain = folder_options(folder.path, true, 16);
  ImageFolderOptions jittered = plain;
  jittered.color_jitter = {0.4, 0.4, 0.4, 0.1};
  const ImageFolder without(plain), with(jittered);
  const uint64_t seed = sample_seed(3, 0, 1);
  const std::vector<float> a = sample(with, 1, seed);
  CHECK(a == sample(with, 1, seed));  // the factors come from the sample's seed
  CHECK(a != sample(without, 1, seed));
  CHECK(a != sample(with, 1, sample_seed(3, 1, 1)));
  // The evaluation transform ignores the jitter.
  ImageFolderOptions evaluation = folder_options(folder.path, false, 16), evaluation_jittered = evaluation;
  evaluation_jittered.color_jitter = jittered.color_jitter;
  CHECK(sample(ImageFolder(evaluation), 0, 0) == sample(ImageFolder(evaluation_jittered), 0, 0));

  // Other statistics: (pixel - mean) / std with the given values instead of ImageNet's.
  ImageFolderOptions custom = evaluation;
  custom.mean = {0.5f, 0.25f, 0.75f};
  custom.std = {0.5f, 0.125f, 0.25f};
  const std::vector<float> imagenet = sample(ImageFolder(evaluation), 0, 0), mine = sample(ImageFolder(custom), 0, 0);
  const int64_t plane = 16 * 16;
  for (int c = 0; c < 3; ++c)
    for (int64_t i = 0; i < plane; i += 17) {
      const float pixel = imagenet[c * plane + i] * kImageNetStd[c] + kImageNetMean[c];
      CHECK(mine[c * plane + i] == Approx((pixel - custom.mean[c]) / custom.std[c]).margin(1e-4));
    }
  ImageFolderOptions bad = evaluation;
  bad.std = {0.5f, 0.0f, 0.5f};
  CHECK_THROWS_WITH(ImageFolder(bad), Catch::Contains("std must be > 0"));
  ImageFolderOptions too_much = plain;
  too_much.color_jitter.hue = 0.7;
  CHECK_THROWS_WITH(ImageFolder(too_much), Catch::Contains("hue in [0, 0.5]"));
}
