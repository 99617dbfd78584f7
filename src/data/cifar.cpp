// CIFAR-10 / CIFAR-100: locating the binary distribution's files, checking every size and label, and
// normalising batches per channel.
#include "opsnn/data/cifar.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/data/fashion_mnist.h"

namespace opsnn::data {
namespace {

struct VariantInfo {
  const char* display;  // "CIFAR-10"
  const char* name;     // "cifar10"
  const char* folder;   // the folder the distribution's archive extracts to
  const char* archive;  // the binary distribution's archive
  int label_bytes;      // label bytes before each image's pixels
  int coarse_classes;   // CIFAR-100's superclasses; 0 for CIFAR-10
  // Name and record count of each file.
  std::vector<std::pair<std::string, int64_t>> train_files;
  std::pair<std::string, int64_t> test_file;
};

const VariantInfo& info(CifarVariant variant) {
  static const VariantInfo cifar10{.display = "CIFAR-10",
                                   .name = "cifar10",
                                   .folder = "cifar-10-batches-bin",
                                   .archive = "cifar-10-binary.tar.gz",
                                   .label_bytes = 1,
                                   .coarse_classes = 0,
                                   .train_files = {{"data_batch_1.bin", 10000},
                                                   {"data_batch_2.bin", 10000},
                                                   {"data_batch_3.bin", 10000},
                                                   {"data_batch_4.bin", 10000},
                                                   {"data_batch_5.bin", 10000}},
                                   .test_file = {"test_batch.bin", 10000}};
  static const VariantInfo cifar100{.display = "CIFAR-100",
                                    .name = "cifar100",
                                    .folder = "cifar-100-binary",
                                    .archive = "cifar-100-binary.tar.gz",
                                    .label_bytes = 2,
                                    .coarse_classes = 20,
                                    .train_files = {{"train.bin", 50000}},
                                    .test_file = {"test.bin", 10000}};
  return variant == CifarVariant::cifar10 ? cifar10 : cifar100;
}

// How to get the files, and what to set: said with every missing-file error.
std::string hint(CifarVariant variant, const std::string& root) {
  const VariantInfo& v = info(variant);
  const bool left_at_default = root.empty() || root == FashionMnist::kDefaultRoot;
  return detail::concat(left_at_default ? "data.root is left at Fashion-MNIST's default; set data.root to the "
                                        : "point data.root at the ",
                        v.display, " folder: ", v.folder, "/ as extracted from the binary version (", v.archive,
                        " from https://www.cs.toronto.edu/~kriz/cifar.html), or the folder holding it");
}

// Checks that a file of `size` bytes holds exactly `expected` records; the message says where it
// stops short or goes on.
void check_size(const std::string& path, uint64_t size, CifarVariant variant, int64_t expected) {
  const uint64_t record = static_cast<uint64_t>(cifar_record_bytes(variant));
  const uint64_t expected_bytes = static_cast<uint64_t>(expected) * record;
  if (size == expected_bytes) return;
  const VariantInfo& v = info(variant);
  const std::string layout = detail::concat(expected, " records of ", record, " bytes (", v.label_bytes,
                                            v.label_bytes == 1 ? " label byte" : " label bytes", " and 3072 pixels)");
  if (size < expected_bytes && size % record != 0) {
    throw DataError(detail::concat(path, ": truncated at byte ", size, " of the file, inside record ", size / record,
                                   " (", size % record, " of its ", record, " bytes), expected ", expected_bytes,
                                   " bytes: ", layout));
  }
  if (size > expected_bytes && size % record != 0) {
    throw DataError(detail::concat(path, ": unexpected extra data at byte ", expected_bytes, " of the file (", size,
                                   " bytes, not a whole number of records), expected ", expected_bytes,
                                   " bytes: ", layout));
  }
  throw DataError(detail::concat(path, ": wrong size: ", size, " bytes hold ", size / record, " records, expected ",
                                 expected_bytes, " bytes: ", layout));
}

}  // namespace

int64_t cifar_record_bytes(CifarVariant variant) { return info(variant).label_bytes + kCifarImageBytes; }

int64_t cifar_num_classes(CifarVariant variant) { return variant == CifarVariant::cifar10 ? 10 : 100; }

CifarRecords decode_cifar_records(std::span<const uint8_t> bytes, const std::string& path, CifarVariant variant,
                                  int64_t expected_records) {
  OPSNN_CHECK(expected_records >= 0 && expected_records <= (int64_t{1} << 40),
              "decode_cifar_records: expected_records ", expected_records, " out of range [0, 2^40]");
  check_size(path, bytes.size(), variant, expected_records);
  const VariantInfo& v = info(variant);
  const int64_t record = cifar_record_bytes(variant);
  const int num_classes = static_cast<int>(cifar_num_classes(variant));
  CifarRecords records;
  records.count = expected_records;
  records.pixels.resize(static_cast<size_t>(expected_records * kCifarImageBytes));
  records.labels.resize(static_cast<size_t>(expected_records));
  if (v.coarse_classes > 0) records.coarse_labels.resize(static_cast<size_t>(expected_records));
  for (int64_t i = 0; i < expected_records; ++i) {
    const uint8_t* source = bytes.data() + i * record;
    if (v.coarse_classes > 0 && source[0] >= v.coarse_classes) {
      throw DataError(detail::concat(path, ": coarse label ", static_cast<int>(source[0]), " of record ", i,
                                     " at byte ", i * record, " of the file is out of range [0, ", v.coarse_classes,
                                     ")"));
    }
    const uint8_t label = source[v.label_bytes - 1];
    if (label >= num_classes) {
      throw DataError(detail::concat(
          path, ": ", v.coarse_classes > 0 ? "fine label " : "label ", static_cast<int>(label), " of record ", i,
          " at byte ", i * record + v.label_bytes - 1, " of the file is out of range [0, ", num_classes, ")"));
    }
    records.labels[static_cast<size_t>(i)] = label;
    if (v.coarse_classes > 0) records.coarse_labels[static_cast<size_t>(i)] = source[0];
    std::memcpy(records.pixels.data() + i * kCifarImageBytes, source + v.label_bytes, kCifarImageBytes);
  }
  return records;
}

CifarRecords read_cifar_records(const std::string& path, CifarVariant variant, int64_t expected_records) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw DataError(detail::concat(path, ": cannot open (", std::strerror(errno), ")"));
  const std::streamoff length = file.tellg();
  if (length < 0) throw DataError(detail::concat(path, ": cannot read its size (", std::strerror(errno), ")"));
  check_size(path, static_cast<uint64_t>(length), variant, expected_records);
  file.seekg(0);
  std::vector<uint8_t> bytes(static_cast<size_t>(length));
  if (!bytes.empty() && !file.read(reinterpret_cast<char*>(bytes.data()), length)) {
    throw DataError(detail::concat(path, ": read failed after ", file.gcount(), " of ", length, " bytes (",
                                   std::strerror(errno), ")"));
  }
  return decode_cifar_records(bytes, path, variant, expected_records);
}

std::string locate_cifar_folder(const std::string& root, CifarVariant variant) {
  namespace fs = std::filesystem;
  const VariantInfo& v = info(variant);
  std::error_code error;
  if (!fs::is_directory(root, error)) {
    throw DataError(detail::concat("data root '", root, "' ",
                                   fs::exists(root, error) ? "is not a directory" : "does not exist", "; ",
                                   hint(variant, root)));
  }
  const fs::path folder(root);
  const std::string& first = v.train_files.front().first;
  if (fs::is_regular_file(folder / first, error)) return folder.string();
  if (fs::is_directory(folder / v.folder, error)) return (folder / v.folder).string();
  throw DataError(detail::concat((folder / first).string(), ": file not found (nor a folder ",
                                 (folder / v.folder).string(), "/ holding it); ", hint(variant, root)));
}

std::array<Normalization, 3> Cifar::standard_normalization(CifarVariant variant) {
  if (variant == CifarVariant::cifar10)
    return {Normalization{0.4914f, 0.2470f}, Normalization{0.4822f, 0.2435f}, Normalization{0.4465f, 0.2616f}};
  return {Normalization{0.5071f, 0.2673f}, Normalization{0.4865f, 0.2564f}, Normalization{0.4409f, 0.2762f}};
}

Cifar::Cifar(const std::string& root, CifarVariant variant, Split split, std::array<Normalization, 3> normalization)
    : variant_(variant), split_(split) {
  namespace fs = std::filesystem;
  const VariantInfo& v = info(variant);
  // A NaN or infinite setting would turn every pixel into NaN (or 0) without a word: settings, not data.
  for (int c = 0; c < 3; ++c) {
    OPSNN_CHECK_AS(ConfigError, std::isfinite(normalization[c].mean), v.display, " normalisation mean of channel ", c,
                   " must be finite, got ", normalization[c].mean);
    OPSNN_CHECK_AS(ConfigError, std::isfinite(normalization[c].std) && normalization[c].std > 0.0f, v.display,
                   " normalisation std of channel ", c, " must be finite and positive, got ", normalization[c].std);
  }
  const fs::path folder(locate_cifar_folder(root, variant));
  std::vector<std::pair<std::string, int64_t>> files = v.train_files;
  if (split == Split::test) files = {v.test_file};
  // Every file is looked for before any is read, so a missing one is reported at once.
  std::error_code error;
  for (const auto& [file_name, count] : files) {
    const std::string path = (folder / file_name).string();
    if (!fs::is_regular_file(path, error)) {
      throw DataError(detail::concat(path, ": ", fs::exists(path, error) ? "not a regular file" : "file not found",
                                     "; ", hint(variant, root)));
    }
    paths_.push_back(path);
  }
  int64_t total = 0;
  for (const auto& file : files) total += file.second;
  records_.pixels.reserve(static_cast<size_t>(total * kCifarImageBytes));
  records_.labels.reserve(static_cast<size_t>(total));
  for (size_t i = 0; i < files.size(); ++i) {
    CifarRecords part = read_cifar_records(paths_[i], variant, files[i].second);
    records_.count += part.count;
    records_.pixels.insert(records_.pixels.end(), part.pixels.begin(), part.pixels.end());
    records_.labels.insert(records_.labels.end(), part.labels.begin(), part.labels.end());
    records_.coarse_labels.insert(records_.coarse_labels.end(), part.coarse_labels.begin(), part.coarse_labels.end());
  }
  for (int c = 0; c < 3; ++c) {
    for (int value = 0; value < 256; ++value) {
      pixel_values_[c][value] = (static_cast<float>(value) / 255.0f - normalization[c].mean) / normalization[c].std;
    }
  }
}

std::string Cifar::name() const {
  return std::string(info(variant_).name) + (split_ == Split::train ? "/train" : "/test");
}

float Cifar::background_value(int64_t channel) const {
  OPSNN_CHECK(channel >= 0 && channel < 3, name(), ": channel ", channel, " out of range [0, 3)");
  return pixel_values_[channel][0];
}

void Cifar::get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const {
  check_batch_arguments(indices, inputs, labels);
  constexpr int64_t plane = kCifarImageBytes / 3;
  float* out = inputs.data<float>();
  int64_t* out_labels = labels.data<int64_t>();
  for (size_t row = 0; row < indices.size(); ++row) {
    const uint8_t* source = records_.pixels.data() + indices[row] * kCifarImageBytes;
    float* destination = out + static_cast<int64_t>(row) * kCifarImageBytes;
    for (int64_t c = 0; c < 3; ++c) {
      const float* values = pixel_values_[c];
      for (int64_t i = c * plane; i < (c + 1) * plane; ++i) destination[i] = values[source[i]];
    }
    out_labels[row] = records_.labels[static_cast<size_t>(indices[row])];
  }
}

const char* Cifar::cifar10_class_name(int64_t label) {
  static const char* const names[10] = {"airplane", "automobile", "bird",  "cat",  "deer",
                                        "dog",      "frog",       "horse", "ship", "truck"};
  OPSNN_CHECK(label >= 0 && label < 10, "CIFAR-10 label ", label, " out of range [0, 10)");
  return names[label];
}

}  // namespace opsnn::data
