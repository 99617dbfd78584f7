// criteo: click logs in Criteo's TSV format (the Kaggle Display Advertising Challenge's train.txt, a day of
// the Terabyte release renamed train.txt), plain or gzip-compressed, read once into compact rows in
// memory. Each line is `label \t I1 .. I13 \t C1 .. C26`: a 0/1 click label, 13 integer features
// (possibly negative or empty) and 26 categorical features as hexadecimal strings (8 digits as Criteo
// writes them, 1 to 8 accepted, or empty). Batches hand out the raw values; hashing categories into table
// rows is the model's job (models::make_dlrm), so the table size is a model setting.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "opsnn/data/dataset.h"

namespace opsnn::data {

inline constexpr int64_t kCriteoDenseFields = 13;        // I1 .. I13
inline constexpr int64_t kCriteoCategoricalFields = 26;  // C1 .. C26
inline constexpr int64_t kCriteoFeatures = kCriteoDenseFields + kCriteoCategoricalFields;
// What an empty field (dense or categorical) is in a batch. No value read can equal it: integer features
// are 32-bit (in [-2^31 + 1, 2^31 - 1]) and categorical values 32-bit unsigned.
inline constexpr int64_t kCriteoEmpty = std::numeric_limits<int64_t>::min();
// No Criteo line comes near this many bytes; a longer one is a bad line (and no line is held longer).
inline constexpr int64_t kCriteoMaxLineBytes = 65536;

enum class BadLinePolicy {
  skip,  // warn with FILE:LINE and what is wrong (the first bad_line_messages of them), count, go on
  fail,  // DataError with FILE:LINE and what is wrong
};

struct CriteoOptions {
  std::string root;  // holds train.txt or train.txt.gz, and optionally test.txt or test.txt.gz
  // Without a (labelled) test file, the test split is the last round(test_fraction x good lines) good
  // lines of the training file (at least one, leaving at least one): Criteo's lines are in time order,
  // so it is the latest traffic, as the DLRM benchmark's split of Kaggle's last day. In (0, 1).
  double test_fraction = 0.1;
  int64_t max_lines = 0;  // read at most this many lines of each file (good and bad); 0 = all
  BadLinePolicy bad_lines = BadLinePolicy::skip;
  int64_t bad_line_messages = 10;  // with skip: how many bad lines are reported one by one (the rest counted)
};

// What reading one file found.
struct CriteoFileReport {
  std::string path;  // "" when there was no such file
  bool gzip = false;
  int64_t lines = 0;       // lines read, good and bad
  int64_t good_lines = 0;  // rows kept
  int64_t bad_lines = 0;   // skipped (data.criteo.bad_lines: skip)
};

struct CriteoLoadReport {
  CriteoFileReport train, test;  // test.path "" when the test split was held out of the training file
  bool held_out = false;         // the test split is the training file's last good lines
  // Why a test file present was not used ("" when none was or it was): Kaggle's test.txt has no labels.
  std::string test_file_ignored;
};

class CriteoRows;  // the rows of one load, shared by its two splits (criteo.cpp)

// One split. Inputs i64 [39]: I1 .. I13 as read, then C1 .. C26 as their unsigned 32-bit values, an empty
// field as kCriteoEmpty; labels f32 0/1.
class Criteo final : public Dataset {
 public:
  Criteo(std::shared_ptr<const CriteoRows> rows, Split split, int64_t begin, int64_t end);

  std::string name() const override { return split_ == Split::train ? "criteo/train" : "criteo/test"; }
  int64_t size() const override { return end_ - begin_; }
  Shape sample_shape() const override { return {kCriteoFeatures}; }
  DType input_dtype() const override { return DType::i64; }
  DType label_dtype() const override { return DType::f32; }
  int64_t num_classes() const override { return 2; }
  void get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const override;

  // Sample `index` of this split: its 39 values as a batch holds them, and its label.
  std::vector<int64_t> values(int64_t index) const;
  int64_t label(int64_t index) const;
  double click_rate() const;  // mean label of this split
  // Log-loss of always predicting this split's click rate (natural log): what a model must beat.
  double base_rate_log_loss() const;
  const CriteoLoadReport& report() const;

 private:
  std::shared_ptr<const CriteoRows> rows_;
  Split split_;
  int64_t begin_, end_;  // this split's rows of rows_
};

struct CriteoSplits {
  std::shared_ptr<const Criteo> train, test;
};

// Reads <root>/train.txt (else train.txt.gz; gzip is recognised by its magic bytes, whatever the name) and
// <root>/test.txt (else test.txt.gz) when present. Bad lines follow options.bad_lines; every one reported
// goes to spdlog's default logger (opsnn-train's console and train.log) as "FILE:LINE: what is wrong",
// and each file's counts are logged at its end. DataError for a missing root or training file, an empty
// file, a file without one good line, too few lines to hold a test split out, and (bad_lines: fail) the
// first bad line; ConfigError for bad options. A test.txt whose first line has 39 fields (no label:
// Kaggle's competition test set) is not used: a warning says so and the test split is held out.
CriteoSplits load_criteo(const CriteoOptions& options);

}  // namespace opsnn::data
