// CIFAR-10 and CIFAR-100 (Krizhevsky 2009) from their official binary distributions: 50000 training and
// 10000 test images of 32x32 colour pixels in 10 or 100 classes, held as bytes and normalised per
// channel on the fly.
//
// File layout (https://www.cs.toronto.edu/~kriz/cifar.html, "binary version"): fixed-size records with
// no header. A CIFAR-10 record is 1 label byte then 3072 pixel bytes (the 1024 red values of the 32x32
// image in row-major order, then the 1024 green, then the 1024 blue): 3073 bytes. A CIFAR-100 record
// has 2 label bytes, the coarse (superclass, < 20) then the fine (class, < 100) label, then the same
// 3072 pixels: 3074 bytes. CIFAR-10 ships data_batch_1.bin .. data_batch_5.bin (training) and
// test_batch.bin, 10000 records each; CIFAR-100 ships train.bin (50000) and test.bin (10000). Every file
// must hold exactly its record count; the pixel bytes are kept in that order, which is the [3, 32, 32]
// layout of a sample.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "opsnn/data/dataset.h"

namespace opsnn::data {

enum class CifarVariant { cifar10, cifar100 };

inline constexpr int64_t kCifarImageBytes = 3 * 32 * 32;

// The bytes of one or more record files: image i's pixels at [i * 3072, (i + 1) * 3072).
struct CifarRecords {
  int64_t count = 0;
  std::vector<uint8_t> pixels;         // count * 3072 bytes, per image red, green, blue planes, row-major
  std::vector<uint8_t> labels;         // count class ids (CIFAR-100: the fine label)
  std::vector<uint8_t> coarse_labels;  // CIFAR-100 only: count superclass ids; empty for CIFAR-10
};

// Bytes per record: 3073 (CIFAR-10) or 3074 (CIFAR-100).
int64_t cifar_record_bytes(CifarVariant variant);
// 10 or 100.
int64_t cifar_num_classes(CifarVariant variant);

// Decodes one record file already in memory, `path` naming it in messages: it must hold exactly
// `expected_records` records (DataError naming the path and the byte offset where it is cut short or
// goes on), and every label must be in range (DataError naming the path, the record and its byte offset).
CifarRecords decode_cifar_records(std::span<const uint8_t> bytes, const std::string& path, CifarVariant variant,
                                  int64_t expected_records);
// The same for a file: its size is checked before it is read, so a wrong file is not loaded whole.
CifarRecords read_cifar_records(const std::string& path, CifarVariant variant, int64_t expected_records);

// The folder the record files are read from: `root` itself when it holds the first file of the
// variant's training split (data_batch_1.bin, train.bin), else the distribution's extracted folder
// under it (cifar-10-batches-bin/, cifar-100-binary/) when there is one. Throws DataError naming the
// path (and how to get the files) otherwise.
std::string locate_cifar_folder(const std::string& root, CifarVariant variant);

class Cifar final : public Dataset {
 public:
  // The usual per-channel (red, green, blue) mean and std of the training images' pixels in [0, 1].
  static std::array<Normalization, 3> standard_normalization(CifarVariant variant);
  static std::array<Normalization, 3> no_normalization() { return {}; }

  // Reads the split's files (see the top of this header) from locate_cifar_folder(root, variant).
  // Throws DataError naming the path when the root or a file is missing, and naming file and record
  // or byte offset when a file is malformed; ConfigError for a NaN, infinite or non-positive setting.
  Cifar(const std::string& root, CifarVariant variant, Split split, std::array<Normalization, 3> normalization);

  std::string name() const override;  // "cifar10/train", "cifar100/test", ...
  int64_t size() const override { return records_.count; }
  Shape sample_shape() const override { return {3, 32, 32}; }
  int64_t num_classes() const override { return cifar_num_classes(variant_); }
  float background_value(int64_t channel) const override;
  void get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const override;

  CifarVariant variant() const { return variant_; }
  const std::vector<uint8_t>& labels() const { return records_.labels; }
  const std::vector<uint8_t>& coarse_labels() const { return records_.coarse_labels; }
  const std::vector<uint8_t>& pixels() const { return records_.pixels; }
  // The files actually read, in order (their records follow each other).
  const std::vector<std::string>& paths() const { return paths_; }

  static const char* cifar10_class_name(int64_t label);  // "airplane", ..., "truck"

 private:
  CifarVariant variant_;
  Split split_;
  CifarRecords records_;
  float pixel_values_[3][256];  // normalised value of each byte value, per channel
  std::vector<std::string> paths_;
};

}  // namespace opsnn::data
