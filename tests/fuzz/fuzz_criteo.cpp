// libFuzzer target: the Criteo TSV reader (opsnn::data::load_criteo), plain and gzip, through a file in a
// private temporary folder. The first input byte picks the file name (bit 0: train.txt.gz, else
// train.txt), the bad-line policy (bit 1: fail, else skip) and max_lines (bits 2-7: 0 = all); the rest
// is the file. An accepted file must give two non-empty splits of the good lines it reports, with every
// value of a batch empty or in its field's range and every label 0 or 1.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "opsnn/data/criteo.h"

namespace {

namespace fs = std::filesystem;
using namespace opsnn::data;

const fs::path& folder() {
  static const fs::path path = [] {
    const fs::path made = fs::temp_directory_path() / ("opsnn-fuzz-criteo-" + std::to_string(::getpid()));
    fs::create_directories(made);
    return made;
  }();
  return path;
}

void check_split(const Criteo& split) {
  if (split.size() < 1) __builtin_trap();
  for (int64_t index : {int64_t{0}, split.size() - 1}) {
    const std::vector<int64_t> values = split.values(index);
    for (int64_t k = 0; k < kCriteoFeatures; ++k) {
      const int64_t value = values[static_cast<size_t>(k)];
      if (value == kCriteoEmpty) continue;
      const bool fits =
          k < kCriteoDenseFields ? value > -2147483648LL && value <= 2147483647LL : value >= 0 && value <= 4294967295LL;
      if (!fits) __builtin_trap();
    }
    const int64_t label = split.label(index);
    if (label != 0 && label != 1) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const fs::path plain = folder() / "train.txt", gzip = folder() / "train.txt.gz";
  std::error_code ignored;
  fs::remove(plain, ignored);
  fs::remove(gzip, ignored);
  {
    std::ofstream file(mode & 1 ? gzip : plain, std::ios::binary);
    file.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  CriteoOptions options;
  options.root = folder().string();
  options.bad_lines = mode & 2 ? BadLinePolicy::fail : BadLinePolicy::skip;
  options.max_lines = mode >> 2;
  options.bad_line_messages = 3;
  opsnn::fuzz::expect_clean_refusal([&] {
    const CriteoSplits splits = load_criteo(options);
    const CriteoFileReport& report = splits.train->report().train;
    if (report.lines != report.good_lines + report.bad_lines) __builtin_trap();
    if (splits.train->size() + splits.test->size() != report.good_lines) __builtin_trap();
    if (options.max_lines > 0 && report.lines > options.max_lines) __builtin_trap();
    check_split(*splits.train);
    check_split(*splits.test);
  });
  return 0;
}
