// criteo (src/data/criteo.cpp): rows and batches against the lines written, empty fields, negative
// integers and hex in either case; the held-out split and a test.txt beside train.txt (and Kaggle's
// unlabelled one ignored); gzip (multi-member, misnamed, truncated, corrupt); every class of bad line with
// its FILE:LINE message and the skip count, the message cap, the fail policy; max_lines; and the errors
// for a missing root or file, an empty file and a file without a good line. Every file is written here
// at test time (tests/support/criteo_files.h).
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/data/criteo.h"
#include "opsnn/data/fashion_mnist.h"
#include "opsnn/data/registry.h"
#include "support/catch.h"
#include "support/criteo_files.h"
#include "support/temporary_folder.h"

using namespace opsnn;
using namespace opsnn::data;
using namespace opsnn::testing;
namespace fs = std::filesystem;

namespace {

// One temporary folder per test, named after this file.
struct Folder : opsnn::testing::TemporaryFolder {
  Folder() : opsnn::testing::TemporaryFolder("opsnn-criteo-test") {}
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

CriteoOptions options_for(const fs::path& root) {
  CriteoOptions options;
  options.root = root.string();
  return options;
}

// A line of 40 fields from its parts: label, 13 integers and 26 hex values (tab-joined).
std::string tsv(const std::string& label, const std::vector<std::string>& dense,
                const std::vector<std::string>& categorical) {
  std::string line = label;
  for (const std::string& value : dense) line += "\t" + value;
  for (const std::string& value : categorical) line += "\t" + value;
  return line;
}

// A good line with every integer `dense` and every categorical value `hex`.
std::string uniform_line(const std::string& label, const std::string& dense, const std::string& hex) {
  return tsv(label, std::vector<std::string>(13, dense), std::vector<std::string>(26, hex));
}

// The values a batch holds for generated line `index` of `seed`, parsed here independently.
std::vector<int64_t> expected_values(uint64_t seed, int64_t index) {
  const std::string text = criteo_line(seed, index).text;
  std::vector<int64_t> values;
  size_t start = text.find('\t') + 1;
  for (int field = 0; field < 39; ++field) {
    const size_t tab = text.find('\t', start);
    const std::string value = text.substr(start, tab == std::string::npos ? std::string::npos : tab - start);
    if (value.empty())
      values.push_back(kCriteoEmpty);
    else
      values.push_back(field < 13 ? std::stoll(value) : static_cast<int64_t>(std::stoull(value, nullptr, 16)));
    start = tab + 1;
  }
  return values;
}

}  // namespace

TEST_CASE("criteo: rows hold the lines' values and the last test_fraction is the test split", "[data]") {
  Folder folder;
  write_criteo_file(folder.path / "train.txt", criteo_text(7, 0, 1000));
  LogCapture log;
  const CriteoSplits splits = load_criteo(options_for(folder.path));
  REQUIRE(splits.train->size() == 900);
  REQUIRE(splits.test->size() == 100);
  CHECK(splits.train->name() == "criteo/train");
  CHECK(splits.test->name() == "criteo/test");
  CHECK(splits.train->sample_shape() == Shape{39});
  CHECK(splits.train->input_dtype() == DType::i64);
  CHECK(splits.train->label_dtype() == DType::f32);
  CHECK(splits.train->num_classes() == 2);
  CHECK(splits.train->report().held_out);
  CHECK(splits.train->report().train.lines == 1000);
  CHECK(splits.train->report().train.good_lines == 1000);
  CHECK(splits.train->report().train.bad_lines == 0);
  for (int64_t i : {0, 1, 517, 899}) {
    INFO("line " << i);
    CHECK(splits.train->values(i) == expected_values(7, i));
    CHECK(splits.train->label(i) == criteo_line(7, i).label);
  }
  for (int64_t i : {0, 99}) {
    INFO("test row " << i);
    CHECK(splits.test->values(i) == expected_values(7, 900 + i));
    CHECK(splits.test->label(i) == criteo_line(7, 900 + i).label);
  }
  // A batch holds the same values and the labels as 0/1 floats.
  const Batch batch = splits.train->get(std::vector<int64_t>{517, 3});
  const std::vector<int64_t> inputs = batch.inputs.to_vector<int64_t>();
  CHECK(std::vector<int64_t>(inputs.begin(), inputs.begin() + 39) == expected_values(7, 517));
  CHECK(std::vector<int64_t>(inputs.begin() + 39, inputs.end()) == expected_values(7, 3));
  CHECK(batch.labels.to_vector<float>() ==
        std::vector<float>{static_cast<float>(criteo_line(7, 517).label), static_cast<float>(criteo_line(7, 3).label)});
  CHECK_THROWS(splits.test->get(std::vector<int64_t>{100}));

  double clicks = 0;
  for (int64_t i = 900; i < 1000; ++i) clicks += criteo_line(7, i).label;
  CHECK(splits.test->click_rate() == clicks / 100.0);
  const double rate = clicks / 100.0;
  CHECK(std::fabs(splits.test->base_rate_log_loss() - criteo_log_loss(rate, rate)) < 1e-12);
  CHECK_THAT(log.text(), Catch::Contains("1000 lines read, 1000 rows kept") && Catch::Contains("900 training rows") &&
                             Catch::Contains("100 test rows"));

  // The held-out count rounds test_fraction x good lines and always leaves one row on each side.
  CriteoOptions options = options_for(folder.path);
  options.test_fraction = 0.0004;
  CHECK(load_criteo(options).test->size() == 1);
  options.test_fraction = 0.9999;
  CHECK(load_criteo(options).train->size() == 1);
}

TEST_CASE("criteo: empty fields negative integers hex of either case and CRLF line ends", "[data]") {
  Folder folder;
  std::vector<std::string> dense(13, ""), categorical(26, "");
  dense[0] = "-3";
  dense[1] = "2147483647";
  dense[2] = "-2147483647";
  dense[12] = "0";
  categorical[0] = "ffffffff";
  categorical[1] = "00000000";
  categorical[2] = "AbCd1234";
  categorical[25] = "7";
  const std::string first = tsv("1", dense, categorical);
  write_criteo_file(folder.path / "train.txt", first + "\r\n" + uniform_line("0", "5", "a") + "\r\n" +
                                                   uniform_line("1", "6", "b"));  // no final line end
  const CriteoSplits splits = load_criteo(options_for(folder.path));
  REQUIRE(splits.train->size() == 2);
  REQUIRE(splits.test->size() == 1);
  std::vector<int64_t> expected(39, kCriteoEmpty);
  expected[0] = -3;
  expected[1] = 2147483647;
  expected[2] = -2147483647;
  expected[12] = 0;
  expected[13] = 0xffffffffll;
  expected[14] = 0;
  expected[15] = 0xabcd1234ll;
  expected[38] = 7;
  CHECK(splits.train->values(0) == expected);
  CHECK(splits.train->label(0) == 1);
  std::vector<int64_t> second(13, 5);
  second.resize(39, 0xa);
  CHECK(splits.train->values(1) == second);
  CHECK(splits.test->label(0) == 1);
  CHECK(splits.test->values(0)[0] == 6);
}

TEST_CASE("criteo: a test.txt beside train.txt is the test split and plain or gzip give the same rows", "[data]") {
  Folder folder;
  write_criteo_file(folder.path / "plain" / "train.txt", criteo_text(3, 0, 300));
  write_criteo_file(folder.path / "plain" / "test.txt", criteo_text(4, 0, 70));
  write_criteo_file(folder.path / "gzip" / "train.txt.gz", criteo_gzip(criteo_text(3, 0, 300)));
  write_criteo_file(folder.path / "gzip" / "test.txt.gz", criteo_gzip(criteo_text(4, 0, 70)));
  // Concatenated gzip members are one stream; a gzip file named .txt is read as gzip.
  std::vector<uint8_t> members = criteo_gzip(criteo_text(3, 0, 120));
  const std::vector<uint8_t> rest = criteo_gzip(criteo_text(3, 120, 180));
  members.insert(members.end(), rest.begin(), rest.end());
  write_criteo_file(folder.path / "members" / "train.txt", members);
  write_criteo_file(folder.path / "members" / "test.txt", criteo_gzip(criteo_text(4, 0, 70)));

  for (const char* name : {"plain", "gzip", "members"}) {
    INFO(name);
    const CriteoSplits splits = load_criteo(options_for(folder.path / name));
    REQUIRE(splits.train->size() == 300);
    REQUIRE(splits.test->size() == 70);
    const CriteoLoadReport& report = splits.train->report();
    CHECK_FALSE(report.held_out);
    CHECK(report.train.gzip == (std::string(name) != "plain"));
    CHECK(report.test.path ==
          (folder.path / name / (std::string(name) == "gzip" ? "test.txt.gz" : "test.txt")).string());
    for (int64_t i : {0, 119, 120, 299}) CHECK(splits.train->values(i) == expected_values(3, i));
    for (int64_t i : {0, 69}) CHECK(splits.test->values(i) == expected_values(4, i));
  }
  // train.txt is taken over train.txt.gz when both are there.
  write_criteo_file(folder.path / "both" / "train.txt", criteo_text(3, 0, 10));
  write_criteo_file(folder.path / "both" / "train.txt.gz", criteo_gzip(criteo_text(3, 0, 20)));
  CHECK(load_criteo(options_for(folder.path / "both")).train->report().train.path ==
        (folder.path / "both" / "train.txt").string());
}

TEST_CASE("criteo: Kaggle's unlabelled test.txt is not used and the test split is held out", "[data]") {
  Folder folder;
  write_criteo_file(folder.path / "train.txt", criteo_text(5, 0, 100));
  std::string unlabelled;
  for (int64_t i = 0; i < 5; ++i) {
    const std::string line = criteo_line(6, i).text;
    unlabelled += line.substr(line.find('\t') + 1) + "\n";  // 39 fields
  }
  write_criteo_file(folder.path / "test.txt", unlabelled);
  LogCapture log;
  const CriteoSplits splits = load_criteo(options_for(folder.path));
  CHECK(splits.train->size() == 90);
  CHECK(splits.test->size() == 10);
  CHECK(splits.train->report().held_out);
  CHECK_THAT(splits.train->report().test_file_ignored, Catch::Contains("39 fields, no label"));
  CHECK_THAT(log.text(), Catch::Contains((folder.path / "test.txt").string() + ": its first line has 39 fields"));
}

TEST_CASE("criteo: every class of bad line is reported as FILE:LINE with what is wrong then skipped and counted",
          "[data]") {
  Folder folder;
  struct Bad {
    std::string line;
    std::string message;  // what the report says after "FILE:LINE: "
  };
  std::vector<std::string> long_categorical(26, "a");
  long_categorical[4] = "123456789";
  std::vector<std::string> bad_hex(26, "a");
  bad_hex[25] = "12g4";
  auto with_dense = [](int position, const std::string& value) {
    std::vector<std::string> dense(13, "1");
    dense[static_cast<size_t>(position)] = value;
    return tsv("0", dense, std::vector<std::string>(26, "a"));
  };
  const std::string good = uniform_line("0", "1", "a");
  const std::vector<Bad> bad_lines = {
      {good.substr(0, good.rfind('\t')), "39 tab-separated fields, expected 40 (label, I1 .. I13, C1 .. C26)"},
      {good + "\tff", "41 tab-separated fields, expected 40"},
      {"", "1 tab-separated field, expected 40"},
      {uniform_line("2", "1", "a"), "field 1 (label): '2' is not 0 or 1"},
      {uniform_line("", "1", "a"), "field 1 (label) is empty, expected 0 or 1"},
      {uniform_line("yes", "1", "a"), "field 1 (label): 'yes' is not 0 or 1"},
      {with_dense(0, "12a"), "field 2 (I1): '12a' is not an integer"},
      {with_dense(4, "1.5"), "field 6 (I5): '1.5' is not an integer"},
      {with_dense(12, "-"), "field 14 (I13): '-' is not an integer"},
      {with_dense(1, "+4"), "field 3 (I2): '+4' is not an integer"},
      {with_dense(2, "99999999999"),
       "field 4 (I3): '99999999999' is outside the 32-bit range [-2147483647, 2147483647]"},
      {with_dense(2, "-2147483648"), "field 4 (I3): '-2147483648' is outside the 32-bit range"},
      {tsv("1", std::vector<std::string>(13, "1"), long_categorical),
       "field 19 (C5): '123456789' has 9 hex digits, more than the 8 of a 32-bit value"},
      {tsv("1", std::vector<std::string>(13, "1"), bad_hex), "field 40 (C26): '12g4' is not hexadecimal"},
      {std::string(70000, 'x'), "longer than 65536 bytes"},
  };
  // Good lines around every bad one: line 2k + 1 good, 2k + 2 the k-th bad one.
  std::string text;
  for (size_t k = 0; k < bad_lines.size(); ++k)
    text += criteo_line(9, static_cast<int64_t>(k)).text + "\n" + bad_lines[k].line + "\n";
  text += criteo_line(9, 99).text + "\n";
  write_criteo_file(folder.path / "train.txt", text);
  CriteoOptions options = options_for(folder.path);
  options.bad_line_messages = 100;
  LogCapture log;
  const CriteoSplits splits = load_criteo(options);
  const CriteoFileReport& report = splits.train->report().train;
  CHECK(report.lines == static_cast<int64_t>(2 * bad_lines.size() + 1));
  CHECK(report.bad_lines == static_cast<int64_t>(bad_lines.size()));
  CHECK(report.good_lines == static_cast<int64_t>(bad_lines.size() + 1));
  CHECK(splits.train->size() + splits.test->size() == report.good_lines);
  // The good lines survive in order.
  CHECK(splits.train->values(1) == expected_values(9, 1));
  const std::string path = (folder.path / "train.txt").string();
  for (size_t k = 0; k < bad_lines.size(); ++k) {
    INFO(bad_lines[k].message);
    CHECK_THAT(log.text(), Catch::Contains(path + ":" + std::to_string(2 * k + 2) + ": " + bad_lines[k].message));
  }
  CHECK(occurrences(log.text(), "; skipped (data.criteo.bad_lines: skip)") == bad_lines.size());
  CHECK_THAT(log.text(), Catch::Contains(std::to_string(bad_lines.size()) + " bad lines skipped"));
  CHECK(log.text().find(std::string(100, 'x')) == std::string::npos);  // the long line is not echoed

  // A line of several read chunks is skipped without being held, plain and in gzip.
  const std::string huge = criteo_text(9, 0, 3) + std::string(3 << 20, '7') + "\n" + criteo_text(9, 3, 3);
  write_criteo_file(folder.path / "huge" / "train.txt", huge);
  write_criteo_file(folder.path / "huge_gzip" / "train.txt.gz", criteo_gzip(huge));
  for (const char* name : {"huge", "huge_gzip"}) {
    INFO(name);
    LogCapture huge_log;
    const CriteoSplits rows = load_criteo(options_for(folder.path / name));
    CHECK(rows.train->report().train.good_lines == 6);
    CHECK(rows.train->report().train.bad_lines == 1);
    CHECK(rows.test->values(0) == expected_values(9, 5));
    CHECK_THAT(huge_log.text(), Catch::Contains(":4: longer than 65536 bytes"));
  }
}

TEST_CASE("criteo: bad_line_messages caps the messages while every bad line is counted", "[data]") {
  Folder folder;
  std::string text;
  for (int64_t i = 0; i < 40; ++i) text += criteo_line(2, i).text + "\n" + uniform_line("3", "1", "a") + "\n";
  write_criteo_file(folder.path / "train.txt", text);
  CriteoOptions options = options_for(folder.path);
  options.bad_line_messages = 5;
  LogCapture log;
  const CriteoSplits splits = load_criteo(options);
  CHECK(splits.train->report().train.bad_lines == 40);
  CHECK(occurrences(log.text(), "is not 0 or 1; skipped") == 5);
  CHECK_THAT(log.text(), Catch::Contains((folder.path / "train.txt").string() + ":10: field 1 (label): '3'"));
  CHECK(log.text().find((folder.path / "train.txt").string() + ":12:") == std::string::npos);
  CHECK(occurrences(log.text(), "more bad lines follow") == 1);
  CHECK_THAT(log.text(), Catch::Contains("80 lines read, 40 rows kept, 40 bad lines skipped"));
  options.bad_line_messages = 0;
  LogCapture quiet;
  load_criteo(options);
  CHECK(occurrences(quiet.text(), "; skipped") == 0);
  CHECK_THAT(quiet.text(), Catch::Contains("40 bad lines skipped"));
}

TEST_CASE("criteo: bad_lines fail stops at the first bad line naming FILE:LINE", "[data]") {
  Folder folder;
  write_criteo_file(folder.path / "train.txt", criteo_text(1, 0, 50));
  write_criteo_file(folder.path / "test.txt",
                    criteo_text(1, 50, 6) + uniform_line("1", "1", "xyz") + "\n" + criteo_text(1, 57, 3));
  CriteoOptions options = options_for(folder.path);
  options.bad_lines = BadLinePolicy::fail;
  try {
    load_criteo(options);
    FAIL("expected a DataError");
  } catch (const DataError& error) {
    CHECK(std::string(error.what()) == (folder.path / "test.txt").string() +
                                           ":7: field 15 (C1): 'xyz' is not hexadecimal (data.criteo.bad_lines: fail)");
  }
  options.bad_lines = BadLinePolicy::skip;
  CHECK(load_criteo(options).test->size() == 9);
}

TEST_CASE("criteo: truncated or corrupt gzip is a bad line where the data stops", "[data]") {
  Folder folder;
  const std::vector<uint8_t> whole = criteo_gzip(criteo_text(8, 0, 400));
  const std::vector<uint8_t> cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(whole.size() / 2));
  write_criteo_file(folder.path / "cut" / "train.txt.gz", cut);
  LogCapture log;
  const CriteoSplits splits = load_criteo(options_for(folder.path / "cut"));
  const CriteoFileReport& report = splits.train->report().train;
  CHECK(report.bad_lines == 1);
  CHECK(report.good_lines > 50);
  CHECK(report.good_lines < 400);
  CHECK(report.lines == report.good_lines + 1);
  // The rows before the cut are intact; the line the data stopped in is the one reported.
  CHECK(splits.test->values(splits.test->size() - 1) == expected_values(8, report.good_lines - 1));
  const std::string where =
      (folder.path / "cut" / "train.txt.gz").string() + ":" + std::to_string(report.good_lines + 1) + ": ";
  CHECK_THAT(log.text(), Catch::Contains(where + "truncated gzip file: the compressed data stops after " +
                                         std::to_string(cut.size()) + " bytes"));
  CriteoOptions fail = options_for(folder.path / "cut");
  fail.bad_lines = BadLinePolicy::fail;
  CHECK_THROWS_WITH(load_criteo(fail), Catch::Contains(where + "truncated gzip file"));

  std::vector<uint8_t> corrupt = whole;
  for (size_t i = corrupt.size() / 3; i < corrupt.size() / 3 + 64; ++i) corrupt[i] ^= 0x5a;
  write_criteo_file(folder.path / "corrupt" / "train.txt.gz", corrupt);
  LogCapture corrupt_log;
  const CriteoSplits rest = load_criteo(options_for(folder.path / "corrupt"));
  // Bytes inflated from the damaged data before zlib notices may form a bad line of their own.
  CHECK(rest.train->report().train.bad_lines >= 1);
  CHECK(rest.train->report().train.good_lines < 400);
  CHECK_THAT(corrupt_log.text(), Catch::Contains("corrupt gzip data at compressed byte") &&
                                     Catch::Contains("the rest of the file is not read"));

  // Data after the end of the gzip stream that is not another member.
  std::vector<uint8_t> trailing = criteo_gzip(criteo_text(8, 0, 20));
  trailing.push_back('x');
  trailing.push_back('y');
  write_criteo_file(folder.path / "trailing" / "train.txt.gz", trailing);
  LogCapture trailing_log;
  CHECK(load_criteo(options_for(folder.path / "trailing")).train->report().train.good_lines == 20);
  CHECK_THAT(trailing_log.text(), Catch::Contains("train.txt.gz:21: unexpected data after the end of the gzip stream"));
}

TEST_CASE("criteo: max_lines reads only the first lines of each file", "[data]") {
  Folder folder;
  write_criteo_file(folder.path / "train.txt", criteo_text(4, 0, 100));
  CriteoOptions options = options_for(folder.path);
  options.max_lines = 30;
  const CriteoSplits held_out = load_criteo(options);
  CHECK(held_out.train->size() == 27);
  CHECK(held_out.test->size() == 3);
  CHECK(held_out.test->values(2) == expected_values(4, 29));
  write_criteo_file(folder.path / "test.txt", criteo_text(5, 0, 50));
  options.max_lines = 8;
  const CriteoSplits both = load_criteo(options);
  CHECK(both.train->size() == 8);
  CHECK(both.test->size() == 8);
}

TEST_CASE("criteo: a missing root or file an empty file and a file without a good line are errors", "[data]") {
  Folder folder;
  CHECK_THROWS_WITH(load_criteo(options_for(folder.path / "nowhere")),
                    Catch::Contains("criteo root '" + (folder.path / "nowhere").string() + "' does not exist"));
  CHECK_THROWS_AS(load_criteo(options_for(folder.path / "nowhere")), DataError);
  CHECK_THROWS_WITH(load_criteo(options_for("/usr/share/datasets/fashion-mnist-missing")),
                    Catch::Contains("does not exist"));
  CHECK_THROWS_WITH(load_criteo(options_for(folder.path)),
                    Catch::Contains((folder.path / "train.txt").string() + ": file not found (nor train.txt.gz"));
  write_criteo_file(folder.path / "empty" / "train.txt", std::string());
  CHECK_THROWS_WITH(load_criteo(options_for(folder.path / "empty")),
                    Catch::Contains((folder.path / "empty" / "train.txt").string() + ": the file is empty (no lines)"));
  write_criteo_file(folder.path / "empty_gzip" / "train.txt.gz", criteo_gzip(""));
  CHECK_THROWS_WITH(load_criteo(options_for(folder.path / "empty_gzip")), Catch::Contains("the file is empty"));
  write_criteo_file(folder.path / "not_gzip" / "train.txt.gz", criteo_text(1, 0, 3));
  CHECK_THROWS_WITH(load_criteo(options_for(folder.path / "not_gzip")), Catch::Contains("not a gzip file"));
  write_criteo_file(folder.path / "bad" / "train.txt", "a\tb\nc\n");
  CHECK_THROWS_WITH(
      load_criteo(options_for(folder.path / "bad")),
      Catch::Contains("none of its 2 lines are a valid Criteo line") &&
          Catch::Contains("the first: " + (folder.path / "bad" / "train.txt").string() + ":1: 2 tab-separated fields"));
  write_criteo_file(folder.path / "one" / "train.txt", criteo_text(1, 0, 1));
  CHECK_THROWS_WITH(
      load_criteo(options_for(folder.path / "one")),
      Catch::Contains("1 good line: holding a test split out of it") && Catch::Contains("needs at least 2"));
  write_criteo_file(folder.path / "bad_test" / "train.txt", criteo_text(1, 0, 5));
  write_criteo_file(folder.path / "bad_test" / "test.txt", "\n\n");
  CHECK_THROWS_WITH(load_criteo(options_for(folder.path / "bad_test")),
                    Catch::Contains((folder.path / "bad_test" / "test.txt").string() + ": none of its 2 lines"));
  CHECK_THROWS_AS(load_criteo(options_for(folder.path / "bad_test")), DataError);
  CriteoOptions options = options_for(folder.path / "one");
  options.test_fraction = 1.0;
  CHECK_THROWS_AS(load_criteo(options), ConfigError);
}

TEST_CASE("criteo: the registry builds it from data.root and refuses pixel statistics", "[data]") {
  Folder folder;
  write_criteo_file(folder.path / "train.txt", criteo_text(4, 0, 40));
  DatasetOptions options;
  options.name = "criteo";
  options.root = folder.path.string();
  options.criteo.test_fraction = 0.25;
  const DatasetSplits splits = build_datasets(options);
  CHECK(splits.train->size() == 30);
  CHECK(splits.test->size() == 10);
  CHECK_FALSE(splits.train->is_image());
  options.mean = {0.5};
  options.std = {0.2};
  CHECK_THROWS_WITH(build_datasets(options), Catch::Contains("not to criteo"));
  // data.root left at Fashion-MNIST's default: the message says what to set.
  options.mean.clear();
  options.std.clear();
  options.root = FashionMnist::kDefaultRoot;
  CHECK_THROWS_WITH(build_datasets(options), Catch::Contains("data.root is left at Fashion-MNIST's default; set it "
                                                             "to the folder of Criteo's train.txt"));
}
