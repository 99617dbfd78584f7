// CIFAR-10 / CIFAR-100 reader: record files generated here (full-size distributions where the reader needs
// them: every file must hold its exact record count), decoded byte for byte, and every bad input (missing
// folder or file, wrong size, cut records, extra bytes, labels out of range) refused with a DataError that
// names the path and the record or byte. Plus a short training run on a generated CIFAR-10 folder.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/data/cifar.h"
#include "opsnn/data/fashion_mnist.h"
#include "opsnn/data/registry.h"
#include "opsnn/train/config.h"
#include "opsnn/train/trainer.h"
#include "support/catch.h"
#include "support/temporary_folder.h"
#include "support/trainer_runs.h"

using namespace opsnn;
using namespace opsnn::data;
namespace fs = std::filesystem;

namespace {

// One temporary folder per test, named after this file.
struct TemporaryFolder : opsnn::testing::TemporaryFolder {
  TemporaryFolder() : opsnn::testing::TemporaryFolder("opsnn-cifar-test") {}
};

// What the generated pixels hold: bytes that differ at every position, record and file (to check the
// decoding exactly), or a colour per class under noise (something a small network learns in a few steps).
enum class Pixels { hashed, class_colours };

uint8_t hashed_byte(uint32_t salt, int64_t record, int64_t offset) {
  uint32_t x =
      salt * 2654435761u ^ static_cast<uint32_t>(record) * 40503u ^ static_cast<uint32_t>(offset) * 2246822519u;
  x ^= x >> 15;
  x *= 2654435761u;
  x ^= x >> 13;
  return static_cast<uint8_t>(x >> 24);
}

uint8_t fine_label(uint32_t salt, int64_t record, int64_t classes) {
  return static_cast<uint8_t>((record * 7 + salt) % classes);
}
uint8_t coarse_label(uint32_t salt, int64_t record) { return static_cast<uint8_t>((record * 3 + salt) % 20); }

// The byte at pixel offset `offset` (channel plane first, then row-major) of record `record`.
uint8_t pixel_byte(Pixels pixels, uint32_t salt, int64_t record, int64_t offset, uint8_t label) {
  if (pixels == Pixels::hashed) return hashed_byte(salt, record, offset);
  static const uint8_t colours[10][3] = {{230, 30, 30},  {30, 230, 30},  {30, 30, 230},   {230, 230, 30},
                                         {230, 30, 230}, {30, 230, 230}, {130, 130, 130}, {230, 130, 30},
                                         {30, 130, 230}, {130, 30, 130}};
  const int noise = static_cast<int>(hashed_byte(salt, record, offset) % 65) - 32;
  return static_cast<uint8_t>(std::clamp(colours[label % 10][offset / 1024] + noise, 0, 255));
}

// `records` records of the variant's layout, file `salt`.
std::vector<uint8_t> cifar_file(CifarVariant variant, int64_t records, uint32_t salt, Pixels pixels = Pixels::hashed) {
  const int64_t record_bytes = cifar_record_bytes(variant);
  const int64_t label_bytes = record_bytes - kCifarImageBytes;
  std::vector<uint8_t> bytes(static_cast<size_t>(records * record_bytes));
  for (int64_t r = 0; r < records; ++r) {
    uint8_t* out = bytes.data() + r * record_bytes;
    const uint8_t label = fine_label(salt, r, cifar_num_classes(variant));
    if (variant == CifarVariant::cifar100) out[0] = coarse_label(salt, r);
    out[label_bytes - 1] = label;
    for (int64_t i = 0; i < kCifarImageBytes; ++i) out[label_bytes + i] = pixel_byte(pixels, salt, r, i, label);
  }
  return bytes;
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// The distribution's files with the names and record counts of the real one; the training files get
// salts 1, 2, ... and the test file the next.
struct FileSpec {
  const char* name;
  int64_t records;
};
std::vector<FileSpec> train_files(CifarVariant variant) {
  if (variant == CifarVariant::cifar100) return {{"train.bin", 50000}};
  return {{"data_batch_1.bin", 10000},
          {"data_batch_2.bin", 10000},
          {"data_batch_3.bin", 10000},
          {"data_batch_4.bin", 10000},
          {"data_batch_5.bin", 10000}};
}
FileSpec test_file(CifarVariant variant) {
  return variant == CifarVariant::cifar100 ? FileSpec{"test.bin", 10000} : FileSpec{"test_batch.bin", 10000};
}

void write_distribution(const fs::path& folder, CifarVariant variant, Pixels pixels = Pixels::hashed) {
  fs::create_directories(folder);
  uint32_t salt = 1;
  for (const FileSpec& file : train_files(variant))
    write_bytes(folder / file.name, cifar_file(variant, file.records, salt++, pixels));
  write_bytes(folder / test_file(variant).name, cifar_file(variant, test_file(variant).records, salt, pixels));
}

// Where sample `index` of a split comes from: the file's salt and the record in it.
struct Source {
  uint32_t salt;
  int64_t record;
};
Source source_of(CifarVariant variant, Split split, int64_t index) {
  if (split == Split::test) return {static_cast<uint32_t>(train_files(variant).size() + 1), index};
  const int64_t per_file = train_files(variant)[0].records;
  return {static_cast<uint32_t>(index / per_file + 1), index % per_file};
}

// Checks that sample `index` of `dataset` decodes to exactly the generated bytes, normalised with `norm`.
void check_sample(const Cifar& dataset, Split split, int64_t index, const std::array<Normalization, 3>& norm) {
  INFO(dataset.name() << " sample " << index);
  const Source source = source_of(dataset.variant(), split, index);
  const int64_t classes = dataset.num_classes();
  Batch batch = dataset.get(std::vector<int64_t>{index});
  REQUIRE(batch.inputs.shape() == Shape{1, 3, 32, 32});
  CHECK(batch.labels.data<int64_t>()[0] == fine_label(source.salt, source.record, classes));
  if (dataset.variant() == CifarVariant::cifar100)
    CHECK(dataset.coarse_labels()[static_cast<size_t>(index)] == coarse_label(source.salt, source.record));
  const float* values = batch.inputs.data<float>();
  int mismatches = 0;
  for (int64_t i = 0; i < kCifarImageBytes; ++i) {
    const int64_t c = i / 1024;
    const uint8_t byte = hashed_byte(source.salt, source.record, i);
    const float expected = (static_cast<float>(byte) / 255.0f - norm[c].mean) / norm[c].std;
    mismatches += values[i] != expected;
    CHECK(dataset.pixels()[static_cast<size_t>(index * kCifarImageBytes + i)] == byte);
  }
  CHECK(mismatches == 0);
}

template <typename Build>
std::string data_error_of(Build&& build) {
  try {
    build();
  } catch (const DataError& error) {
    return error.what();
  }
  FAIL("expected a DataError");
  return "";
}

std::string cifar10_error(const fs::path& root, Split split = Split::train) {
  return data_error_of([&] { Cifar(root.string(), CifarVariant::cifar10, split, Cifar::no_normalization()); });
}

std::string decode_error(const std::vector<uint8_t>& bytes, CifarVariant variant, int64_t records) {
  return data_error_of([&] { decode_cifar_records(bytes, "mem.bin", variant, records); });
}

}  // namespace

TEST_CASE("CIFAR: decode_cifar_records returns the labels and pixels of each record exactly as written", "[data]") {
  REQUIRE(cifar_record_bytes(CifarVariant::cifar10) == 3073);
  REQUIRE(cifar_record_bytes(CifarVariant::cifar100) == 3074);
  for (CifarVariant variant : {CifarVariant::cifar10, CifarVariant::cifar100}) {
    const bool hundred = variant == CifarVariant::cifar100;
    INFO((hundred ? "cifar100" : "cifar10"));
    const std::vector<uint8_t> bytes = cifar_file(variant, 3, 9);
    const CifarRecords records = decode_cifar_records(bytes, "mem.bin", variant, 3);
    REQUIRE(records.count == 3);
    REQUIRE(records.pixels.size() == 3 * 3072);
    REQUIRE(records.labels.size() == 3);
    REQUIRE(records.coarse_labels.size() == (hundred ? 3u : 0u));
    const size_t label_bytes = hundred ? 2 : 1;
    for (size_t r = 0; r < 3; ++r) {
      const uint8_t* record = bytes.data() + r * (3072 + label_bytes);
      CHECK(records.labels[r] == record[label_bytes - 1]);  // CIFAR-100: the fine label, the second byte
      if (hundred) CHECK(records.coarse_labels[r] == record[0]);
      CHECK(std::memcmp(records.pixels.data() + r * 3072, record + label_bytes, 3072) == 0);
    }
  }
  CHECK(decode_cifar_records({}, "empty.bin", CifarVariant::cifar10, 0).count == 0);
  CHECK(std::string(Cifar::cifar10_class_name(9)) == "truck");
}

TEST_CASE("CIFAR: decode_cifar_records refuses wrong sizes, cut records, extra bytes and labels out of range",
          "[data]") {
  const std::vector<uint8_t> ten = cifar_file(CifarVariant::cifar10, 4, 1);
  std::vector<uint8_t> bytes = ten;
  bytes.resize(3 * 3073 + 100);
  CHECK(decode_error(bytes, CifarVariant::cifar10, 4) ==
        "mem.bin: truncated at byte 9319 of the file, inside record 3 (100 of its 3073 bytes), expected 12292 "
        "bytes: 4 records of 3073 bytes (1 label byte and 3072 pixels)");
  bytes.resize(3 * 3073);
  CHECK(decode_error(bytes, CifarVariant::cifar10, 4) ==
        "mem.bin: wrong size: 9219 bytes hold 3 records, expected 12292 bytes: 4 records of 3073 bytes (1 label "
        "byte and 3072 pixels)");
  CHECK_THAT(decode_error(ten, CifarVariant::cifar10, 3), Catch::Contains("wrong size: 12292 bytes hold 4 records"));
  bytes = ten;
  bytes.push_back(0);
  CHECK(decode_error(bytes, CifarVariant::cifar10, 4) ==
        "mem.bin: unexpected extra data at byte 12292 of the file (12293 bytes, not a whole number of records), "
        "expected 12292 bytes: 4 records of 3073 bytes (1 label byte and 3072 pixels)");
  // A CIFAR-10 file read as CIFAR-100: 4 * 3073 bytes are not a whole number of 3074-byte records.
  CHECK_THAT(decode_error(ten, CifarVariant::cifar100, 4),
             Catch::Contains("truncated at byte 12292 of the file, inside record 3 (3070 of its 3074 bytes)") &&
                 Catch::Contains("(2 label bytes and 3072 pixels)"));
  bytes = ten;
  bytes[2 * 3073] = 10;
  CHECK(decode_error(bytes, CifarVariant::cifar10, 4) ==
        "mem.bin: label 10 of record 2 at byte 6146 of the file is out of range [0, 10)");
  std::vector<uint8_t> hundred = cifar_file(CifarVariant::cifar100, 4, 1);
  hundred[3 * 3074] = 20;
  CHECK(decode_error(hundred, CifarVariant::cifar100, 4) ==
        "mem.bin: coarse label 20 of record 3 at byte 9222 of the file is out of range [0, 20)");
  hundred[3 * 3074] = 19;
  hundred[1 * 3074 + 1] = 100;
  CHECK(decode_error(hundred, CifarVariant::cifar100, 4) ==
        "mem.bin: fine label 100 of record 1 at byte 3075 of the file is out of range [0, 100)");
  hundred[1 * 3074 + 1] = 99;
  CHECK(decode_cifar_records(hundred, "mem.bin", CifarVariant::cifar100, 4).labels[1] == 99);
}

TEST_CASE("CIFAR-10: a generated distribution reads exactly: file order, channel order, normalisation, padding",
          "[data]") {
  TemporaryFolder folder;
  const fs::path root = folder.path / "bins";
  write_distribution(root, CifarVariant::cifar10);
  // Record 5 of data_batch_2.bin: red plane 255, green 0, blue 128, to see the planes land in channel order.
  {
    std::fstream file(root / "data_batch_2.bin", std::ios::in | std::ios::out | std::ios::binary);
    std::vector<char> record(3073);
    std::memset(record.data() + 1, 255, 1024);
    std::memset(record.data() + 1025, 0, 1024);
    std::memset(record.data() + 2049, 128, 1024);
    record[0] = 4;
    file.seekp(5 * 3073);
    file.write(record.data(), 3073);
  }
  const std::array<Normalization, 3> norm = Cifar::standard_normalization(CifarVariant::cifar10);
  const Cifar train(root.string(), CifarVariant::cifar10, Split::train, norm);
  const Cifar test(root.string(), CifarVariant::cifar10, Split::test, norm);
  REQUIRE(train.size() == 50000);
  REQUIRE(test.size() == 10000);
  REQUIRE(train.sample_shape() == Shape{3, 32, 32});
  REQUIRE(train.num_classes() == 10);
  CHECK(train.name() == "cifar10/train");
  CHECK(test.name() == "cifar10/test");
  REQUIRE(train.paths().size() == 5);
  CHECK(train.paths()[4] == (root / "data_batch_5.bin").string());
  CHECK(test.paths() == std::vector<std::string>{(root / "test_batch.bin").string()});
  CHECK(train.coarse_labels().empty());
  // The first and last record of each file, and records inside; the test file apart.
  for (int64_t index : {int64_t{0}, int64_t{1}, int64_t{9999}, int64_t{10000}, int64_t{23456}, int64_t{49999}})
    check_sample(train, Split::train, index, norm);
  for (int64_t index : {int64_t{0}, int64_t{777}, int64_t{9999}}) check_sample(test, Split::test, index, norm);
  // Every label, in file order.
  for (int64_t index = 0; index < 50000; ++index) {
    if (index == 10005) continue;  // the channel-order record
    const Source source = source_of(CifarVariant::cifar10, Split::train, index);
    if (train.labels()[static_cast<size_t>(index)] != fine_label(source.salt, source.record, 10)) {
      FAIL("label of training sample " << index);
    }
  }
  // Channel order: red, green, blue planes, each normalised with its own statistics.
  Batch batch = train.get(std::vector<int64_t>{3, 10005});
  CHECK(batch.labels.data<int64_t>()[1] == 4);
  const float* planes = batch.inputs.data<float>() + 3072;
  CHECK(planes[0] == (1.0f - 0.4914f) / 0.2470f);
  CHECK(planes[1023] == (1.0f - 0.4914f) / 0.2470f);
  CHECK(planes[1024] == (0.0f - 0.4822f) / 0.2435f);
  CHECK(planes[2047] == (0.0f - 0.4822f) / 0.2435f);
  CHECK(planes[2048] == (128.0f / 255.0f - 0.4465f) / 0.2616f);
  CHECK(planes[3071] == (128.0f / 255.0f - 0.4465f) / 0.2616f);
  // The crop padding value is a black pixel, normalised per channel.
  CHECK(train.background_value(0) == Approx(-0.4914 / 0.2470).epsilon(1e-6));
  CHECK(train.background_value(1) == Approx(-0.4822 / 0.2435).epsilon(1e-6));
  CHECK(train.background_value(2) == Approx(-0.4465 / 0.2616).epsilon(1e-6));
  CHECK_THROWS_WITH(train.get(std::vector<int64_t>{50000}), Catch::Contains("out of range"));
  // Without normalisation: pixel / 255, black is 0.
  const Cifar plain(root.string(), CifarVariant::cifar10, Split::test, Cifar::no_normalization());
  check_sample(plain, Split::test, 4321, Cifar::no_normalization());
  CHECK(plain.background_value(2) == 0.0f);
}

TEST_CASE("CIFAR-10 and CIFAR-100 by name: data.root may be the folder holding the extracted distribution", "[data]") {
  TemporaryFolder folder;
  write_distribution(folder.path / "cifar-10-batches-bin", CifarVariant::cifar10);
  write_distribution(folder.path / "cifar-100-binary", CifarVariant::cifar100);
  DatasetOptions options;
  options.root = folder.path.string();
  SECTION("cifar10") {
    options.name = "cifar10";
    DatasetSplits splits = build_datasets(options);
    const auto& train = dynamic_cast<const Cifar&>(*splits.train);
    const auto& test = dynamic_cast<const Cifar&>(*splits.test);
    CHECK(train.size() == 50000);
    CHECK(test.size() == 10000);
    CHECK(train.paths()[0] == (folder.path / "cifar-10-batches-bin" / "data_batch_1.bin").string());
    check_sample(train, Split::train, 31234, Cifar::standard_normalization(CifarVariant::cifar10));
    check_sample(test, Split::test, 42, Cifar::standard_normalization(CifarVariant::cifar10));
    options.normalize = false;
    check_sample(dynamic_cast<const Cifar&>(*build_datasets(options).test), Split::test, 42, Cifar::no_normalization());
  }
  SECTION("cifar100: the fine label, 100 classes, its own statistics") {
    options.name = "cifar100";
    DatasetSplits splits = build_datasets(options);
    const auto& train = dynamic_cast<const Cifar&>(*splits.train);
    const auto& test = dynamic_cast<const Cifar&>(*splits.test);
    CHECK(train.name() == "cifar100/train");
    CHECK(train.size() == 50000);
    CHECK(test.size() == 10000);
    CHECK(train.num_classes() == 100);
    CHECK(train.paths() == std::vector<std::string>{(folder.path / "cifar-100-binary" / "train.bin").string()});
    CHECK(test.paths() == std::vector<std::string>{(folder.path / "cifar-100-binary" / "test.bin").string()});
    const std::array<Normalization, 3> norm = Cifar::standard_normalization(CifarVariant::cifar100);
    CHECK(norm[0].mean == 0.5071f);
    CHECK(norm[2].std == 0.2762f);
    for (int64_t index : {int64_t{0}, int64_t{49999}, int64_t{12345}}) check_sample(train, Split::train, index, norm);
    check_sample(test, Split::test, 9999, norm);
    for (int64_t index = 0; index < 50000; ++index) {
      if (train.labels()[static_cast<size_t>(index)] != fine_label(1, index, 100) ||
          train.coarse_labels()[static_cast<size_t>(index)] != coarse_label(1, index))
        FAIL("labels of training sample " << index);
    }
    CHECK(train.background_value(1) == Approx(-0.4865 / 0.2564).epsilon(1e-6));
  }
  SECTION("the folder of the files itself") {
    options.name = "cifar100";
    options.root = (folder.path / "cifar-100-binary").string();
    CHECK(build_datasets(options).train->size() == 50000);
  }
}

TEST_CASE("CIFAR: a missing folder or file, a wrong size, a truncated file and a bad label name the path", "[data]") {
  // The reader looks for every file of a split before reading any and stops at the first bad one, so
  // empty placeholders stand in for the files after it; sizes are checked before a file is read, so
  // sparse files of the right size (all zeros: label 0, black pixels) stand in for valid ones.
  TemporaryFolder folder;
  const fs::path root = folder.path / "cifar-10-batches-bin";
  fs::create_directories(root);
  for (const FileSpec& file : train_files(CifarVariant::cifar10)) write_bytes(root / file.name, {});
  write_bytes(root / "test_batch.bin", {});
  const uintmax_t full = 10000 * 3073;
  fs::resize_file(root / "data_batch_1.bin", full);
  SECTION("missing folder") {
    const fs::path missing = folder.path / "no-such-folder";
    CHECK_THAT(cifar10_error(missing), Catch::StartsWith("data root '" + missing.string() + "' does not exist; ") &&
                                           Catch::Contains("point data.root at the CIFAR-10 folder: "
                                                           "cifar-10-batches-bin/ as extracted from the binary "
                                                           "version (cifar-10-binary.tar.gz from https://"));
    CHECK_THAT(cifar10_error(root / "data_batch_1.bin"), Catch::Contains("is not a directory"));
  }
  SECTION("a folder with neither the files nor the distribution's folder") {
    fs::create_directories(folder.path / "empty");
    CHECK_THAT(
        cifar10_error(folder.path / "empty"),
        Catch::StartsWith((folder.path / "empty" / "data_batch_1.bin").string() + ": file not found (nor a folder " +
                          (folder.path / "empty" / "cifar-10-batches-bin").string() + "/ holding it); "));
    // CIFAR-100 looks for its own names.
    CHECK_THAT(data_error_of([&] {
                 Cifar((folder.path).string(), CifarVariant::cifar100, Split::train, Cifar::no_normalization());
               }),
               Catch::Contains("train.bin: file not found") && Catch::Contains("cifar-100-binary/ holding it") &&
                   Catch::Contains("the CIFAR-100 folder"));
  }
  SECTION("data.root left at Fashion-MNIST's default") {
    for (const std::string& default_root : {std::string(FashionMnist::kDefaultRoot), std::string()}) {
      CHECK_THAT(cifar10_error(default_root),
                 Catch::Contains(default_root) && Catch::Contains("data.root is left at Fashion-MNIST's default; set "
                                                                  "data.root to the CIFAR-10 folder"));
    }
  }
  SECTION("a missing file") {
    fs::remove(root / "data_batch_4.bin");
    CHECK_THAT(cifar10_error(root), Catch::StartsWith((root / "data_batch_4.bin").string() + ": file not found; "));
    fs::remove(root / "test_batch.bin");
    CHECK_THAT(cifar10_error(folder.path, Split::test),
               Catch::StartsWith((root / "test_batch.bin").string() + ": file not found; "));
    fs::create_directories(root / "data_batch_4.bin");
    CHECK_THAT(cifar10_error(root), Catch::StartsWith((root / "data_batch_4.bin").string() + ": not a regular file"));
  }
  SECTION("the wrong number of records") {
    // data_batch_1.bin is valid; data_batch_2.bin still the empty placeholder.
    CHECK(cifar10_error(root) == (root / "data_batch_2.bin").string() +
                                     ": wrong size: 0 bytes hold 0 records, expected 30730000 bytes: 10000 "
                                     "records of 3073 bytes (1 label byte and 3072 pixels)");
    fs::resize_file(root / "data_batch_1.bin", full - 3073);
    CHECK_THAT(cifar10_error(root), Catch::StartsWith((root / "data_batch_1.bin").string() +
                                                      ": wrong size: 30726927 bytes hold 9999 records, expected "
                                                      "30730000 bytes"));
    fs::resize_file(root / "data_batch_1.bin", full + 3073);
    CHECK_THAT(cifar10_error(root), Catch::Contains("data_batch_1.bin: wrong size: 30733073 bytes hold 10001 records"));
  }
  SECTION("a truncated file, and bytes after the last record") {
    fs::resize_file(root / "data_batch_1.bin", full - 5);
    CHECK(cifar10_error(root) == (root / "data_batch_1.bin").string() +
                                     ": truncated at byte 30729995 of the file, inside record 9999 (3068 of its 3073 "
                                     "bytes), expected 30730000 bytes: 10000 records of 3073 bytes (1 label byte and "
                                     "3072 pixels)");
    fs::resize_file(root / "data_batch_1.bin", full + 7);
    CHECK_THAT(cifar10_error(root),
               Catch::Contains("data_batch_1.bin: unexpected extra data at byte 30730000 of the file (30730007 bytes, "
                               "not a whole number of records)"));
  }
  SECTION("a label out of range in the second file") {
    fs::resize_file(root / "data_batch_2.bin", full);
    {
      std::fstream file(root / "data_batch_2.bin", std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(1234 * 3073);
      file.put(10);
    }
    CHECK(cifar10_error(root) == (root / "data_batch_2.bin").string() +
                                     ": label 10 of record 1234 at byte 3792082 of the file is out of "
                                     "range [0, 10)");
  }
  SECTION("CIFAR-100: coarse and fine labels out of range") {
    const fs::path hundred = folder.path / "cifar-100-binary";
    fs::create_directories(hundred);
    write_bytes(hundred / "train.bin", {});
    write_bytes(hundred / "test.bin", {});
    auto error = [&] {
      return data_error_of(
          [&] { Cifar(folder.path.string(), CifarVariant::cifar100, Split::train, Cifar::no_normalization()); });
    };
    CHECK_THAT(error(), Catch::Contains("train.bin: wrong size: 0 bytes hold 0 records, expected 153700000 bytes: "
                                        "50000 records of 3074 bytes (2 label bytes and 3072 pixels)"));
    fs::resize_file(hundred / "train.bin", 50000 * 3074);
    {
      std::fstream file(hundred / "train.bin", std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(40000 * 3074 + 1);
      file.put(100);
    }
    CHECK(error() == (hundred / "train.bin").string() +
                         ": fine label 100 of record 40000 at byte 122960001 of the file is out of range [0, 100)");
    {
      std::fstream file(hundred / "train.bin", std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(7 * 3074);
      file.put(20);
    }
    CHECK(error() == (hundred / "train.bin").string() +
                         ": coarse label 20 of record 7 at byte 21518 of the file is out of range [0, 20)");
    // A file of 10000 records is the test split's size, not the training split's.
    CHECK_THAT(data_error_of([&] {
                 Cifar(folder.path.string(), CifarVariant::cifar100, Split::test, Cifar::no_normalization());
               }),
               Catch::Contains("test.bin: wrong size: 0 bytes hold 0 records, expected 30740000 bytes"));
  }
}

TEST_CASE("CIFAR: a NaN, infinite or non-positive normalisation is a ConfigError naming the channel", "[data]") {
  TemporaryFolder folder;  // checked before any file is looked for
  std::array<Normalization, 3> norm = Cifar::standard_normalization(CifarVariant::cifar10);
  norm[1].mean = NAN;
  CHECK_THROWS_MATCHES(Cifar(folder.path.string(), CifarVariant::cifar10, Split::train, norm), ConfigError,
                       Catch::Message("CIFAR-10 normalisation mean of channel 1 must be finite, got nan"));
  norm[1].mean = 0.5f;
  norm[2].std = 0.0f;
  CHECK_THROWS_MATCHES(Cifar(folder.path.string(), CifarVariant::cifar100, Split::train, norm), ConfigError,
                       Catch::Message("CIFAR-100 normalisation std of channel 2 must be finite and positive, got 0"));
}

TEST_CASE("trainer: a few steps of small_cnn on a generated CIFAR-10 folder lower the loss", "[trainer]") {
  TemporaryFolder folder;
  write_distribution(folder.path / "cifar-10-batches-bin", CifarVariant::cifar10, Pixels::class_colours);
  const train::TrainConfig config = train::load_config_text(R"(
run: {name: tiny_cifar10}
model: {arch: small_cnn, width: 4}
data:
  dataset: cifar10
  batch_size: 32
  eval_batch_size: 1000
  augment: {crop_padding: 4, flip: true}
train: {epochs: 0, max_steps: 40, seed: 1, device: cpu}
optimizer: {name: adam, lr: 0.01}
logging: {every_steps: 1, progress: plain}
checkpoint: {enabled: false}
)",
                                                            "test.yaml", {"data.root=" + folder.path.string()});
  train::Trainer trainer(config, opsnn::testing::quiet_options(folder.path / "run"));
  const train::TrainSummary summary = trainer.fit();
  CHECK(summary.steps == 40);
  const std::vector<double>& losses = trainer.step_losses();
  REQUIRE(losses.size() == 40);
  for (double loss : losses) REQUIRE(std::isfinite(loss));
  const double first = std::accumulate(losses.begin(), losses.begin() + 5, 0.0) / 5;
  const double last = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
  INFO("loss at step 1 " << losses[0] << ", mean of the first 5 steps " << first << ", of the last 5 " << last);
  CHECK(std::abs(losses[0] - std::log(10.0)) < 0.3);  // an untrained network guesses among 10 classes
  CHECK(last < 0.5 * first);
  REQUIRE(summary.final_eval.has_value());
  CHECK(summary.final_eval->samples == 10000);
  CHECK(summary.final_eval->accuracy > 0.5);  // chance is 0.1
  // The metrics file tells the same story.
  const opsnn::testing::MetricsCurve curve = opsnn::testing::read_metrics_curve(folder.path / "run");
  CHECK(curve.losses.size() == 40);
  CHECK(curve.test_accuracy == Approx(summary.final_eval->accuracy));
}
