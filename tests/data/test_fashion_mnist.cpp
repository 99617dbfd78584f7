// Fashion-MNIST reader: the real files, and truncated/corrupted copies that must fail with the file
// name and byte offset in the message.
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/data/fashion_mnist.h"
#include "opsnn/data/idx.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::data;
namespace fs = std::filesystem;

namespace {

const FashionMnist& real_split(Split split) {
  static const FashionMnist train(FashionMnist::kDefaultRoot, Split::train);
  static const FashionMnist test(FashionMnist::kDefaultRoot, Split::test);
  return split == Split::train ? train : test;
}

// A fresh empty folder under the system temp dir, removed when the guard dies.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path =
        fs::temp_directory_path() / ("opsnn-data-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> gzip(const std::vector<uint8_t>& plain) {
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> out(deflateBound(&stream, plain.size()) + 64);
  stream.next_in = const_cast<Bytef*>(plain.data());
  stream.avail_in = static_cast<uInt>(plain.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

// gzip of `prefix` followed by `zeros` zero bytes, compressed in pieces (zeros shrink about 1000:1).
std::vector<uint8_t> gzip_with_zeros(const std::vector<uint8_t>& prefix, size_t zeros) {
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> out, chunk(1 << 20), piece(1 << 16);
  auto feed = [&](const uint8_t* data, size_t size, int flush) {
    stream.next_in = const_cast<Bytef*>(data);
    stream.avail_in = static_cast<uInt>(size);
    do {
      stream.next_out = piece.data();
      stream.avail_out = static_cast<uInt>(piece.size());
      deflate(&stream, flush);
      out.insert(out.end(), piece.data(), piece.data() + (piece.size() - stream.avail_out));
    } while (stream.avail_out == 0);
  };
  feed(prefix.data(), prefix.size(), Z_NO_FLUSH);
  for (size_t left = zeros; left > 0;) {
    const size_t size = std::min(left, chunk.size());
    feed(chunk.data(), size, Z_NO_FLUSH);
    left -= size;
  }
  feed(nullptr, 0, Z_FINISH);
  deflateEnd(&stream);
  return out;
}

void put_u32(std::vector<uint8_t>& bytes, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(value >> shift));
}

std::vector<uint8_t> idx_images(uint32_t count, uint32_t rows = 28, uint32_t cols = 28,
                                uint32_t magic = kIdxImagesMagic) {
  std::vector<uint8_t> bytes;
  put_u32(bytes, magic);
  put_u32(bytes, count);
  put_u32(bytes, rows);
  put_u32(bytes, cols);
  uint32_t state = 12345;  // incompressible pixels, so a cut gzip stream really ends early
  for (uint32_t i = 0; i < count * rows * cols; ++i) {
    state = state * 1664525u + 1013904223u;
    bytes.push_back(static_cast<uint8_t>(state >> 24));
  }
  return bytes;
}

std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = kIdxLabelsMagic) {
  std::vector<uint8_t> bytes;
  put_u32(bytes, magic);
  put_u32(bytes, static_cast<uint32_t>(labels.size()));
  bytes.insert(bytes.end(), labels.begin(), labels.end());
  return bytes;
}

// Writes a small gzip Fashion-MNIST train split (5 images) into `dir`.
void write_small_split(const TempDir& dir) {
  write_bytes(dir.file("train-images-idx3-ubyte.gz"), gzip(idx_images(5)));
  write_bytes(dir.file("train-labels-idx1-ubyte.gz"), gzip(idx_labels({0, 1, 2, 3, 9})));
}

std::string error_of(const std::string& root) {
  try {
    FashionMnist dataset(root, Split::train);
  } catch (const DataError& error) {
    return error.what();
  }
  FAIL("expected a DataError for " << root);
  return "";
}

}  // namespace

TEST_CASE("Fashion-MNIST: the real files read with the known sizes and first labels", "[data]") {
  const FashionMnist& train = real_split(Split::train);
  const FashionMnist& test = real_split(Split::test);
  REQUIRE(train.size() == 60000);
  REQUIRE(test.size() == 10000);
  REQUIRE(train.sample_shape() == Shape{1, 28, 28});
  REQUIRE(train.num_classes() == 10);
  REQUIRE(static_cast<int>(train.labels()[0]) == 9);  // ankle boot
  REQUIRE(static_cast<int>(test.labels()[0]) == 9);
  REQUIRE(std::string(FashionMnist::class_name(9)) == "Ankle boot");
  // Balanced classes: 6000 per class in train, 1000 in test.
  std::vector<int> train_counts(10, 0), test_counts(10, 0);
  for (uint8_t label : train.labels()) ++train_counts[label];
  for (uint8_t label : test.labels()) ++test_counts[label];
  for (int c = 0; c < 10; ++c) {
    REQUIRE(train_counts[c] == 6000);
    REQUIRE(test_counts[c] == 1000);
  }
}

TEST_CASE("Fashion-MNIST: batches are normalised to about zero mean and unit variance", "[data]") {
  const FashionMnist& train = real_split(Split::train);
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < train.size(); i += 7) indices.push_back(i);
  Batch batch = train.get(indices);
  REQUIRE(batch.inputs.shape() == Shape{static_cast<int64_t>(indices.size()), 1, 28, 28});
  REQUIRE(batch.labels.dtype() == DType::i64);
  const float* values = batch.inputs.data<float>();
  double sum = 0.0, sum_squares = 0.0;
  for (int64_t i = 0; i < batch.inputs.numel(); ++i) {
    sum += values[i];
    sum_squares += static_cast<double>(values[i]) * values[i];
  }
  const double mean = sum / static_cast<double>(batch.inputs.numel());
  const double std = std::sqrt(sum_squares / static_cast<double>(batch.inputs.numel()) - mean * mean);
  REQUIRE(std::abs(mean) < 0.01);
  REQUIRE(std::abs(std - 1.0) < 0.02);
  // Label row i is the label of sample indices[i]; the black background maps to -mean/std.
  REQUIRE(batch.labels.data<int64_t>()[1] == train.labels()[7]);
  REQUIRE(train.background_value(0) == Approx(-0.2860 / 0.3530).epsilon(1e-5));
  REQUIRE_THROWS_WITH(train.get(std::vector<int64_t>{60000}), Catch::Contains("out of range"));
}

TEST_CASE("Fashion-MNIST: a truncated copy of the real gzip names the file and the byte offset", "[data]") {
  TempDir dir;
  std::vector<uint8_t> compressed = read_bytes(real_split(Split::train).images_path());
  REQUIRE(compressed.size() > 100000);
  compressed.resize(20000);
  write_bytes(dir.file("train-images-idx3-ubyte.gz"), compressed);
  fs::copy_file(real_split(Split::train).labels_path(), dir.file("train-labels-idx1-ubyte.gz"));
  const std::string message = error_of(dir.path.string());
  CHECK_THAT(message, Catch::Contains("train-images-idx3-ubyte.gz: truncated at byte "));
  CHECK_THAT(message, Catch::Contains("of the decompressed stream, expected 47040016 bytes"));
}

TEST_CASE("Fashion-MNIST: corrupted files give DataError with file and offset", "[data]") {
  TempDir dir;
  write_small_split(dir);
  SECTION("the small valid copy reads") {
    FashionMnist dataset(dir.path.string(), Split::train);
    REQUIRE(dataset.size() == 5);
    REQUIRE(static_cast<int>(dataset.labels()[4]) == 9);
  }
  SECTION("truncated gzip stream") {
    std::vector<uint8_t> compressed = gzip(idx_images(5));
    compressed.resize(compressed.size() / 2);
    write_bytes(dir.file("train-images-idx3-ubyte.gz"), compressed);
    const std::string message = error_of(dir.path.string());
    CHECK_THAT(message, Catch::Contains("train-images-idx3-ubyte.gz: truncated at byte "));
    CHECK_THAT(message, Catch::Contains("expected 3936 bytes"));  // 16 + 5 * 784
  }
  SECTION("gzip of a short IDX file") {
    std::vector<uint8_t> plain = idx_images(5);
    plain.resize(1000);
    write_bytes(dir.file("train-images-idx3-ubyte.gz"), gzip(plain));
    CHECK_THAT(error_of(dir.path.string()),
               Catch::Contains("truncated at byte 1000 of the decompressed stream, expected 3936 bytes"));
  }
  SECTION("corrupt deflate data") {
    std::vector<uint8_t> compressed = gzip(idx_images(5));
    for (size_t i = 20; i < 60; ++i) compressed[i] ^= 0x5A;
    write_bytes(dir.file("train-images-idx3-ubyte.gz"), compressed);
    const std::string message = error_of(dir.path.string());
    CHECK_THAT(message, Catch::Contains("train-images-idx3-ubyte.gz: corrupt gzip data at compressed byte"));
  }
  SECTION("wrong magic number") {
    write_bytes(dir.file("train-labels-idx1-ubyte.gz"), gzip(idx_labels({0, 1, 2, 3, 9}, kIdxImagesMagic)));
    CHECK_THAT(error_of(dir.path.string()),
               Catch::Contains("train-labels-idx1-ubyte.gz: wrong magic number 0x00000803 at byte 0") &&
                   Catch::Contains("expected 0x00000801"));
  }
  SECTION("image and label counts differ") {
    write_bytes(dir.file("train-labels-idx1-ubyte.gz"), gzip(idx_labels({0, 1, 2, 3})));
    CHECK_THAT(error_of(dir.path.string()), Catch::Contains("train-images-idx3-ubyte.gz holds 5 images") &&
                                                Catch::Contains("train-labels-idx1-ubyte.gz holds 4 labels"));
  }
  SECTION("label out of range") {
    write_bytes(dir.file("train-labels-idx1-ubyte.gz"), gzip(idx_labels({0, 1, 2, 12, 9})));
    CHECK_THAT(error_of(dir.path.string()),
               Catch::Contains("train-labels-idx1-ubyte.gz: label 12 of item 3 at byte 11") &&
                   Catch::Contains("out of range [0, 10)"));
  }
  SECTION("images that are not 28 x 28") {
    write_bytes(dir.file("train-images-idx3-ubyte.gz"), gzip(idx_images(5, 32, 32)));
    CHECK_THAT(error_of(dir.path.string()), Catch::Contains("images are 32 x 32"));
  }
  SECTION("a gzip bomb stops inflating just past the size its header promises") {
    // A valid header for 5 images, then 256 MiB of zeros (about 1 MB compressed): reading it whole
    // before comparing sizes is what a 5 GiB bomb would do to memory.
    std::vector<uint8_t> header = idx_images(5);
    header.resize(16);
    write_bytes(dir.file("train-images-idx3-ubyte.gz"), gzip_with_zeros(header, size_t{256} << 20));
    CHECK_THAT(error_of(dir.path.string()),
               Catch::Contains("train-images-idx3-ubyte.gz: unexpected extra data at byte 3936 of the decompressed "
                               "stream (more than ") &&
                   Catch::Contains("decompression stopped there; the header promises 3936)"));
    FileBytes start =
        read_file_bytes(dir.file("train-images-idx3-ubyte.gz"), {16, [](const uint8_t*) -> uint64_t { return 3936; }});
    CHECK(start.stopped);
    CHECK(start.bytes.size() == 3937);
    // The labels file the same way.
    write_bytes(dir.file("train-images-idx3-ubyte.gz"), gzip(idx_images(5)));
    write_bytes(dir.file("train-labels-idx1-ubyte.gz"), gzip_with_zeros(idx_labels({0, 1, 2, 3, 9}), size_t{64} << 20));
    CHECK_THAT(error_of(dir.path.string()),
               Catch::Contains("train-labels-idx1-ubyte.gz: unexpected extra data at byte 13") &&
                   Catch::Contains("decompression stopped there"));
  }
  SECTION("a .gz name without gzip content") {
    write_bytes(dir.file("train-images-idx3-ubyte.gz"), idx_images(5));
    CHECK_THAT(error_of(dir.path.string()), Catch::Contains("train-images-idx3-ubyte.gz: not a gzip file"));
  }
  SECTION("missing file") {
    fs::remove(dir.file("train-labels-idx1-ubyte.gz"));
    CHECK_THAT(error_of(dir.path.string()), Catch::Contains(dir.file("train-labels-idx1-ubyte.gz")) &&
                                                Catch::Contains("file not found") &&
                                                Catch::Contains("dataset-fashion-mnist"));
  }
  SECTION("missing root") {
    const std::string root = dir.file("no-such-folder");
    CHECK_THAT(error_of(root),
               Catch::Contains("data root '" + root + "' does not exist") && Catch::Contains("dataset-fashion-mnist"));
  }
}

TEST_CASE("Fashion-MNIST: plain uncompressed IDX files read, and their size is checked", "[data]") {
  TempDir dir;
  write_bytes(dir.file("train-images-idx3-ubyte"), idx_images(3));
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_labels({4, 5, 6}));
  {
    FashionMnist dataset(dir.path.string(), Split::train);
    REQUIRE(dataset.size() == 3);
    REQUIRE(dataset.images_path() == dir.file("train-images-idx3-ubyte"));
    const std::vector<uint8_t> file_bytes = idx_images(3);
    REQUIRE(dataset.pixels() == std::vector<uint8_t>(file_bytes.begin() + 16, file_bytes.end()));
  }
  SECTION("extra bytes after the data") {
    std::vector<uint8_t> bytes = idx_images(3);
    bytes.push_back(0);
    write_bytes(dir.file("train-images-idx3-ubyte"), bytes);
    CHECK_THAT(error_of(dir.path.string()), Catch::Contains("unexpected extra data at byte 2368 of the file"));
  }
  SECTION("a header cut short") {
    std::vector<uint8_t> bytes = idx_images(3);
    bytes.resize(10);
    write_bytes(dir.file("train-images-idx3-ubyte"), bytes);
    CHECK_THAT(error_of(dir.path.string()),
               Catch::Contains(
                   "train-images-idx3-ubyte: truncated at byte 10 of the file, the IDX images header needs 16 bytes"));
  }
}

TEST_CASE("Fashion-MNIST: a NaN or infinite normalisation is a ConfigError naming it", "[data]") {
  // Checked before any file is read: every pixel would otherwise become NaN (or 0) without a word.
  TempDir dir;
  CHECK_THROWS_MATCHES(FashionMnist(dir.path.string(), Split::train, {NAN, 1.0f}), ConfigError,
                       Catch::Message("Fashion-MNIST normalisation mean must be finite, got nan"));
  CHECK_THROWS_MATCHES(FashionMnist(dir.path.string(), Split::train, {0.5f, INFINITY}), ConfigError,
                       Catch::Message("Fashion-MNIST normalisation std must be finite and positive, got inf"));
  CHECK_THROWS_AS(FashionMnist(dir.path.string(), Split::train, {0.5f, 0.0f}), ConfigError);
}
