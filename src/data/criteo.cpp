// criteo: the streaming line reader (plain or gzip through zlib, no more than a read chunk and one line in
// memory), the parser of Criteo's TSV lines into 160-byte rows, the bad-line policy with its FILE:LINE
// messages, and the train / test splits over one shared store of rows.
#include "opsnn/data/criteo.h"

#include <spdlog/spdlog.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <string_view>

#include "core/printable.h"
#include "data/log_loss.h"
#include "opsnn/core/error.h"
#include "opsnn/data/fashion_mnist.h"

namespace opsnn::data {
namespace fs = std::filesystem;

// One line as kept: empty integer features are INT32_MIN, empty categorical ones flagged.
struct CriteoRow {
  std::array<int32_t, kCriteoDenseFields> dense;
  std::array<uint32_t, kCriteoCategoricalFields> categorical;
  uint32_t flags;  // bit f < 26: C(f + 1) is empty; bit 31: the label
};
static_assert(sizeof(CriteoRow) == 160);

// Rows in chunks of 2^16 (10 MiB), so growing never copies what is already read.
class CriteoRows {
 public:
  static constexpr int kChunkBits = 16;
  const CriteoRow& row(int64_t index) const {
    return chunks_[static_cast<size_t>(index >> kChunkBits)][static_cast<size_t>(index & ((1 << kChunkBits) - 1))];
  }
  int64_t size() const { return size_; }
  void push(const CriteoRow& row) {
    if ((size_ & ((1 << kChunkBits) - 1)) == 0) {
      chunks_.emplace_back();
      chunks_.back().reserve(size_t{1} << kChunkBits);
    }
    chunks_.back().push_back(row);
    ++size_;
  }
  CriteoLoadReport report;

 private:
  std::vector<std::vector<CriteoRow>> chunks_;
  int64_t size_ = 0;
};

namespace {

constexpr int32_t kEmptyDense = std::numeric_limits<int32_t>::min();
constexpr uint32_t kLabelBit = 1u << 31;
constexpr size_t kReadChunk = size_t{1} << 20;
constexpr size_t kFieldsPerLine = 1 + kCriteoFeatures;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A file's lines from its plain or gzip bytes (gzip by its magic 0x1f 0x8b; concatenated members are one
// stream). A line longer than kCriteoMaxLineBytes is skipped, not held.
class LineReader {
 public:
  enum class Status { line, too_long, truncated, corrupt, end };

  explicit LineReader(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "rb"), &std::fclose) {
    if (!file_) throw DataError(detail::concat(path, ": cannot open (", std::strerror(errno), ")"));
    input_.resize(kReadChunk);
    buffer_.resize(kReadChunk + static_cast<size_t>(kCriteoMaxLineBytes) + 1);
    input_size_ = read_input(0);
    gzip_ = input_size_ >= 2 && static_cast<unsigned char>(input_[0]) == 0x1f &&
            static_cast<unsigned char>(input_[1]) == 0x8b;
    if (!gzip_ && ends_with(path, ".gz"))
      throw DataError(detail::concat(path, ": not a gzip file (byte 0 is not the gzip magic 0x1f 0x8b)"));
    if (gzip_) {
      // 15 + 16: gzip wrapper only.
      if (inflateInit2(&stream_, 15 + 16) != Z_OK) throw DataError(path + ": zlib initialisation failed");
      stream_.next_in = reinterpret_cast<Bytef*>(input_.data());
      stream_.avail_in = static_cast<uInt>(input_size_);
    } else {
      std::memcpy(buffer_.data(), input_.data(), input_size_);
      end_ = input_size_;
    }
  }
  ~LineReader() {
    if (gzip_) inflateEnd(&stream_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  bool gzip() const { return gzip_; }
  // The 1-based number of the line next() last returned (or of the line where the data broke off).
  int64_t line_number() const { return line_number_; }
  // For truncated and corrupt: what happened.
  const std::string& problem() const { return problem_; }

  // The next line, without its '\n' and one '\r' before it (Windows line ends).
  Status next(std::string_view& line) {
    for (;;) {
      const char* base = buffer_.data();
      const void* newline = begin_ < end_ ? std::memchr(base + begin_, '\n', end_ - begin_) : nullptr;
      if (newline != nullptr) {
        const size_t at = static_cast<size_t>(static_cast<const char*>(newline) - base);
        ++line_number_;
        if (skipping_) {
          skipping_ = false;
          begin_ = at + 1;
          return Status::too_long;
        }
        line = std::string_view(base + begin_, at - begin_);
        begin_ = at + 1;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (static_cast<int64_t>(line.size()) > kCriteoMaxLineBytes) return Status::too_long;
        return Status::line;
      }
      // No line end in what is buffered: keep the partial line (or drop it, past the limit) and read on.
      if (skipping_ || end_ - begin_ > static_cast<size_t>(kCriteoMaxLineBytes)) {
        skipping_ = true;
        begin_ = end_;
      }
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
      if (fill()) continue;
      if (failure_ != Status::end) {  // the data broke off inside (or right after) the line being read
        const Status failure = failure_;
        failure_ = Status::end;
        begin_ = end_ = 0;
        skipping_ = false;
        ++line_number_;
        return failure;
      }
      if (skipping_) {
        skipping_ = false;
        ++line_number_;
        return Status::too_long;
      }
      if (end_ == 0) return Status::end;
      line = std::string_view(buffer_.data(), end_);  // the last line, without a final '\n'
      begin_ = end_;
      ++line_number_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      return Status::line;
    }
  }

 private:
  // Reads raw bytes into input_ from `offset` on; the count read.
  size_t read_input(size_t offset) {
    const size_t got = std::fread(input_.data() + offset, 1, input_.size() - offset, file_.get());
    if (std::ferror(file_.get())) throw DataError(detail::concat(path_, ": read error (", std::strerror(errno), ")"));
    raw_bytes_ += got;
    return got;
  }

  // The compressed bytes consumed so far.
  uint64_t compressed_offset() const { return raw_bytes_ - stream_.avail_in; }

  // Makes at least `count` compressed bytes available when the file has them.
  void want_input(size_t count) {
    if (stream_.avail_in >= count) return;
    std::memmove(input_.data(), stream_.next_in, stream_.avail_in);
    const size_t kept = stream_.avail_in;
    const size_t got = read_input(kept);
    stream_.next_in = reinterpret_cast<Bytef*>(input_.data());
    stream_.avail_in = static_cast<uInt>(kept + got);
  }

  // Appends bytes after end_; false when none came (the end of the data, or failure_ says why not).
  bool fill() {
    char* out = buffer_.data() + end_;
    const size_t room = buffer_.size() - end_;
    if (!gzip_) {
      const size_t got = std::fread(out, 1, room, file_.get());
      if (std::ferror(file_.get())) throw DataError(detail::concat(path_, ": read error (", std::strerror(errno), ")"));
      end_ += got;
      return got > 0;
    }
    if (failure_ != Status::end) return false;  // reported once the bytes before it are handed out
    for (;;) {
      want_input(stream_ended_ ? 2 : 1);
      if (stream_ended_) {
        if (stream_.avail_in == 0) return false;  // the last member ended with the file
        if (stream_.avail_in < 2 || stream_.next_in[0] != 0x1f || stream_.next_in[1] != 0x8b) {
          failure_ = Status::corrupt;
          problem_ = detail::concat("unexpected data after the end of the gzip stream at compressed byte ",
                                    compressed_offset(), "; the rest of the file is not read");
          return false;
        }
        inflateReset(&stream_);  // another member (concatenated .gz files)
        stream_ended_ = false;
      }
      if (stream_.avail_in == 0) {
        failure_ = Status::truncated;
        problem_ = detail::concat("truncated gzip file: the compressed data stops after ", compressed_offset(),
                                  " bytes, before this line's end (the rest of the file is lost)");
        return false;
      }
      stream_.next_out = reinterpret_cast<Bytef*>(out);
      stream_.avail_out = static_cast<uInt>(room);
      const int status = inflate(&stream_, Z_NO_FLUSH);
      const size_t produced = room - stream_.avail_out;
      end_ += produced;
      if (status == Z_STREAM_END) stream_ended_ = true;
      if (status == Z_STREAM_END || status == Z_OK || status == Z_BUF_ERROR) {
        if (produced > 0) return true;
        continue;
      }
      failure_ = Status::corrupt;
      problem_ = detail::concat("corrupt gzip data at compressed byte ", compressed_offset(),
                                " (zlib: ", stream_.msg != nullptr ? stream_.msg : zError(status),
                                "); the rest of the file is not read");
      return produced > 0;
    }
  }

  std::string path_;
  std::unique_ptr<FILE, int (*)(FILE*)> file_;
  bool gzip_ = false;
  z_stream stream_{};
  bool stream_ended_ = false;
  std::vector<char> input_;  // compressed bytes (gzip)
  size_t input_size_ = 0;
  uint64_t raw_bytes_ = 0;
  std::vector<char> buffer_;  // decoded bytes: [begin_, end_) not yet handed out
  size_t begin_ = 0, end_ = 0;
  bool skipping_ = false;  // inside a line past the limit: dropping bytes until its end
  Status failure_ = Status::end;
  std::string problem_;
  int64_t line_number_ = 0;
};

// A value quoted in a message: printable, and cut after 40 bytes.
std::string quoted(std::string_view value) {
  constexpr size_t kShown = 40;
  // Appended piece by piece: `"'" + std::string` trips GCC 12's -Wrestrict false positive.
  std::string text = "'";
  text += printable(value.substr(0, kShown));
  text += '\'';
  if (value.size() > kShown) text += detail::concat(" (", value.size(), " bytes)");
  return text;
}

std::string field_name(size_t field) {
  if (field == 0) return "field 1 (label)";
  if (field <= kCriteoDenseFields) return detail::concat("field ", field + 1, " (I", field, ")");
  return detail::concat("field ", field + 1, " (C", field - kCriteoDenseFields, ")");
}

// A non-empty integer feature, in [-2^31 + 1, 2^31 - 1] (-2^31 stands for an empty field); "" or what is wrong.
std::string parse_integer(std::string_view text, size_t field, int32_t& value) {
  const bool negative = text[0] == '-';
  const size_t first = negative ? 1 : 0;
  if (first == text.size()) return field_name(field) + ": " + quoted(text) + " is not an integer";
  int64_t magnitude = 0;
  for (size_t i = first; i < text.size(); ++i) {
    const char c = text[i];
    if (c < '0' || c > '9') return field_name(field) + ": " + quoted(text) + " is not an integer";
    if (magnitude <= std::numeric_limits<int32_t>::max()) magnitude = magnitude * 10 + (c - '0');
  }
  if (magnitude > std::numeric_limits<int32_t>::max())
    return field_name(field) + ": " + quoted(text) + " is outside the 32-bit range [-2147483647, 2147483647]";
  value = static_cast<int32_t>(negative ? -magnitude : magnitude);
  return {};
}

// A non-empty categorical feature: 1 to 8 hex digits, either case; "" or what is wrong.
std::string parse_hex(std::string_view text, size_t field, uint32_t& value) {
  uint32_t result = 0;
  for (char c : text) {
    uint32_t digit = 0;
    if (c >= '0' && c <= '9')
      digit = static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      digit = static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      digit = static_cast<uint32_t>(c - 'A' + 10);
    else
      return field_name(field) + ": " + quoted(text) + " is not hexadecimal";
    result = (result << 4) | digit;
  }
  if (text.size() > 8)
    return detail::concat(field_name(field), ": ", quoted(text), " has ", text.size(),
                          " hex digits, more than the 8 of a 32-bit value");
  value = result;
  return {};
}

// Splits at tabs; the number of fields (all of them, even past kFieldsPerLine, which are not stored).
size_t split_fields(std::string_view line, std::array<std::string_view, kFieldsPerLine>& fields) {
  size_t count = 0, start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    const size_t stop = tab == std::string_view::npos ? line.size() : tab;
    if (count < kFieldsPerLine) fields[count] = line.substr(start, stop - start);
    ++count;
    if (tab == std::string_view::npos) return count;
    start = tab + 1;
  }
}

// One line into `row`; "" or what is wrong with it.
std::string parse_line(std::string_view line, CriteoRow& row) {
  std::array<std::string_view, kFieldsPerLine> fields;
  const size_t count = split_fields(line, fields);
  if (count != kFieldsPerLine)
    return detail::concat(count, " tab-separated field", count == 1 ? "" : "s",
                          ", expected 40 (label, I1 .. I13, C1 .. C26)");
  if (fields[0] != "0" && fields[0] != "1")
    return fields[0].empty() ? "field 1 (label) is empty, expected 0 or 1"
                             : "field 1 (label): " + quoted(fields[0]) + " is not 0 or 1";
  row.flags = fields[0] == "1" ? kLabelBit : 0;
  for (size_t k = 0; k < static_cast<size_t>(kCriteoDenseFields); ++k) {
    const std::string_view text = fields[1 + k];
    if (text.empty()) {
      row.dense[k] = kEmptyDense;
      continue;
    }
    std::string problem = parse_integer(text, 1 + k, row.dense[k]);
    if (!problem.empty()) return problem;
  }
  for (size_t k = 0; k < static_cast<size_t>(kCriteoCategoricalFields); ++k) {
    const size_t field = 1 + kCriteoDenseFields + k;
    const std::string_view text = fields[field];
    if (text.empty()) {
      row.categorical[k] = 0;
      row.flags |= 1u << k;
      continue;
    }
    std::string problem = parse_hex(text, field, row.categorical[k]);
    if (!problem.empty()) return problem;
  }
  return {};
}

// The bad-line policy across the files of one load.
class BadLines {
 public:
  explicit BadLines(const CriteoOptions& options) : options_(options) {}

  // One bad line: thrown (fail) or counted and, while under the cap, logged (skip).
  void report(const std::string& path, int64_t line, const std::string& what, CriteoFileReport& file) {
    const std::string message = detail::concat(path, ":", line, ": ", what);
    if (options_.bad_lines == BadLinePolicy::fail) throw DataError(message + " (data.criteo.bad_lines: fail)");
    ++file.bad_lines;
    if (first_.empty()) first_ = message;
    if (listed_ < options_.bad_line_messages) {
      spdlog::warn("{}; skipped (data.criteo.bad_lines: skip)", message);
      ++listed_;
    } else if (!cap_noted_) {
      spdlog::warn(
          "criteo: more bad lines follow, skipped and counted but not listed (data.criteo.bad_line_messages: {})",
          options_.bad_line_messages);
      cap_noted_ = true;
    }
  }
  // The first bad line of the load, for the message when no line was good.
  const std::string& first() const { return first_; }
  void forget_first() { first_.clear(); }

 private:
  const CriteoOptions& options_;
  int64_t listed_ = 0;
  bool cap_noted_ = false;
  std::string first_;
};

// Reads one file's lines into `rows`.
void read_file(const std::string& path, const CriteoOptions& options, BadLines& bad, CriteoRows& rows,
               CriteoFileReport& report) {
  LineReader reader(path);
  report.path = path;
  report.gzip = reader.gzip();
  bad.forget_first();
  std::string_view line;
  CriteoRow row{};
  bool reading = true;
  while (reading && (options.max_lines == 0 || report.lines < options.max_lines)) {
    const LineReader::Status status = reader.next(line);
    if (status == LineReader::Status::end) break;
    ++report.lines;
    switch (status) {
      case LineReader::Status::line: {
        const std::string problem = parse_line(line, row);
        if (!problem.empty()) {
          bad.report(path, reader.line_number(), problem, report);
          break;
        }
        try {
          rows.push(row);
        } catch (const std::bad_alloc&) {
          throw DataError(detail::concat(path, ":", reader.line_number(), ": out of memory after ", rows.size(),
                                         " rows of 160 bytes; data.criteo.max_lines reads fewer"));
        }
        ++report.good_lines;
        break;
      }
      case LineReader::Status::too_long:
        bad.report(path, reader.line_number(),
                   detail::concat("longer than ", kCriteoMaxLineBytes,
                                  " bytes (a Criteo line has a few hundred: is this a Criteo TSV file?)"),
                   report);
        break;
      default:  // truncated or corrupt gzip data: nothing after it can be read
        bad.report(path, reader.line_number(), reader.problem(), report);
        reading = false;
        break;
    }
  }
  if (report.lines == 0) throw DataError(path + ": the file is empty (no lines)");
  if (report.good_lines == 0)
    throw DataError(detail::concat(path, ": none of its ", report.lines, " line", report.lines == 1 ? " is" : "s are",
                                   " a valid Criteo line (label, 13 integer and 26 hexadecimal fields, "
                                   "tab-separated); the first: ",
                                   bad.first()));
  if (report.bad_lines > 0)
    spdlog::warn("criteo {}: {} lines read, {} rows kept, {} bad line{} skipped (data.criteo.bad_lines: skip)", path,
                 report.lines, report.good_lines, report.bad_lines, report.bad_lines == 1 ? "" : "s");
  else
    spdlog::info("criteo {}: {} lines read, {} rows kept{}", path, report.lines, report.good_lines,
                 report.gzip ? " (gzip)" : "");
}

// <root>/<stem> or, without it, <root>/<stem>.gz; "" when neither is a regular file.
std::string find_file(const fs::path& root, const std::string& stem) {
  std::error_code error;
  for (const std::string& name : {stem, stem + ".gz"})
    if (fs::is_regular_file(root / name, error)) return (root / name).string();
  return {};
}

// The number of tab-separated fields of a file's first line (0 when it has none).
size_t first_line_fields(const std::string& path) {
  LineReader reader(path);
  std::string_view line;
  if (reader.next(line) != LineReader::Status::line) return 0;
  return static_cast<size_t>(std::count(line.begin(), line.end(), '\t')) + 1;
}

}  // namespace

Criteo::Criteo(std::shared_ptr<const CriteoRows> rows, Split split, int64_t begin, int64_t end)
    : rows_(std::move(rows)), split_(split), begin_(begin), end_(end) {
  OPSNN_CHECK(rows_ != nullptr && 0 <= begin_ && begin_ <= end_ && end_ <= rows_->size(), "criteo: rows [", begin_,
              ", ", end_, ") are not a range of the ", rows_ ? rows_->size() : 0, " rows read");
}

void Criteo::get_batch(std::span<const int64_t> indices, const Tensor& inputs, const Tensor& labels) const {
  check_batch_arguments(indices, inputs, labels);
  int64_t* out = inputs.data<int64_t>();
  float* out_labels = labels.data<float>();
  for (size_t i = 0; i < indices.size(); ++i) {
    const CriteoRow& row = rows_->row(begin_ + indices[i]);
    int64_t* values = out + static_cast<int64_t>(i) * kCriteoFeatures;
    for (size_t k = 0; k < static_cast<size_t>(kCriteoDenseFields); ++k)
      values[k] = row.dense[k] == kEmptyDense ? kCriteoEmpty : row.dense[k];
    for (size_t k = 0; k < static_cast<size_t>(kCriteoCategoricalFields); ++k)
      values[kCriteoDenseFields + static_cast<int64_t>(k)] =
          (row.flags >> k) & 1u ? kCriteoEmpty : static_cast<int64_t>(row.categorical[k]);
    out_labels[i] = (row.flags & kLabelBit) != 0 ? 1.0f : 0.0f;
  }
}

std::vector<int64_t> Criteo::values(int64_t index) const {
  const std::vector<int64_t> indices{index};
  Tensor inputs = Tensor::empty({1, kCriteoFeatures}, DType::i64), labels = Tensor::empty({1}, DType::f32);
  get_batch(indices, inputs, labels);
  return inputs.to_vector<int64_t>();
}

int64_t Criteo::label(int64_t index) const {
  OPSNN_CHECK(index >= 0 && index < size(), name(), ": sample index ", index, " out of range [0, ", size(), ")");
  return (rows_->row(begin_ + index).flags & kLabelBit) != 0 ? 1 : 0;
}

double Criteo::click_rate() const {
  int64_t clicks = 0;
  for (int64_t i = begin_; i < end_; ++i) clicks += (rows_->row(i).flags & kLabelBit) != 0 ? 1 : 0;
  return size() == 0 ? 0.0 : static_cast<double>(clicks) / static_cast<double>(size());
}

double Criteo::base_rate_log_loss() const { return binary_entropy(click_rate()); }

const CriteoLoadReport& Criteo::report() const { return rows_->report; }

CriteoSplits load_criteo(const CriteoOptions& options) {
  OPSNN_CHECK_AS(ConfigError, options.test_fraction > 0.0 && options.test_fraction < 1.0,
                 "data.criteo.test_fraction must be in (0, 1), got ", options.test_fraction);
  OPSNN_CHECK_AS(ConfigError, options.max_lines >= 0, "data.criteo.max_lines must be >= 0 (0 = all), got ",
                 options.max_lines);
  OPSNN_CHECK_AS(ConfigError, options.bad_line_messages >= 0, "data.criteo.bad_line_messages must be >= 0, got ",
                 options.bad_line_messages);
  const std::string hint = options.root.empty() || options.root == FashionMnist::kDefaultRoot
                               ? "data.root is left at Fashion-MNIST's default; set it to the folder of Criteo's "
                                 "train.txt"
                               : "data.root: a folder holding train.txt or train.txt.gz, and optionally test.txt";
  std::error_code error;
  if (!fs::is_directory(options.root, error))
    throw DataError(detail::concat("criteo root '", options.root, "' ",
                                   fs::exists(options.root, error) ? "is not a directory" : "does not exist", " (",
                                   hint, ")"));
  const fs::path root(options.root);
  const std::string train_path = find_file(root, "train.txt");
  if (train_path.empty())
    throw DataError(detail::concat((root / "train.txt").string(), ": file not found (nor train.txt.gz; ", hint, ")"));
  std::string test_path = find_file(root, "test.txt");

  auto rows = std::make_shared<CriteoRows>();
  CriteoLoadReport& report = rows->report;
  BadLines bad(options);
  read_file(train_path, options, bad, *rows, report.train);
  const int64_t train_rows = rows->size();
  if (!test_path.empty() && first_line_fields(test_path) == kFieldsPerLine - 1) {
    report.test_file_ignored =
        detail::concat(test_path,
                       ": its first line has 39 fields, no label (Kaggle's competition test set): not used; the test "
                       "split is held out of the training file instead");
    spdlog::warn("criteo {}", report.test_file_ignored);
    test_path.clear();
  }
  int64_t test_begin = train_rows;
  if (!test_path.empty()) {
    read_file(test_path, options, bad, *rows, report.test);
  } else {
    report.held_out = true;
    if (train_rows < 2)
      throw DataError(
          detail::concat(train_path, ": ", train_rows, " good line", train_rows == 1 ? "" : "s",
                         ": holding a test split out of it (data.criteo.test_fraction ", options.test_fraction,
                         ") needs at least 2, one to train on and one to test; or put a test.txt beside it"));
    const int64_t held =
        std::clamp<int64_t>(std::llround(options.test_fraction * static_cast<double>(train_rows)), 1, train_rows - 1);
    test_begin = train_rows - held;
  }
  auto train = std::make_shared<Criteo>(rows, Split::train, 0, test_begin);
  auto test = std::make_shared<Criteo>(rows, Split::test, test_begin, rows->size());
  spdlog::info(
      "criteo: {} training rows (click rate {:.4f}), {} test rows{} (click rate {:.4f}; predicting it for every "
      "row gives log-loss {:.5f}); {:.1f} MiB in memory",
      train->size(), train->click_rate(), test->size(),
      report.held_out ? fmt::format(" (the last {:.3g} of the training file)", options.test_fraction)
                      : std::string(" from ") + test_path,
      test->click_rate(), test->base_rate_log_loss(),
      static_cast<double>(rows->size()) * sizeof(CriteoRow) / (1024.0 * 1024.0));
  return {std::move(train), std::move(test)};
}

}  // namespace opsnn::data
