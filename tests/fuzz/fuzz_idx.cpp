// libFuzzer target: the IDX reader (opsnn::data::decode_idx_images / decode_idx_labels), raw and gzip.
// The first input byte picks images or labels and whether the name ends in .gz; the rest is the file.
#include <vector>

#include "fuzz_support.h"
#include "opsnn/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::vector<uint8_t> file(data + 1, data + size);
  const char* name = mode & 2 ? "fuzz-idx-ubyte.gz" : "fuzz-idx-ubyte";
  opsnn::fuzz::expect_clean_refusal([&] {
    if (mode & 1) {
      const std::vector<uint8_t> labels = opsnn::data::decode_idx_labels(std::move(file), name, 10);
      for (uint8_t label : labels)
        if (label >= 10) __builtin_trap();  // the reader promises labels below num_classes
    } else {
      const opsnn::data::IdxImages images = opsnn::data::decode_idx_images(std::move(file), name);
      if (static_cast<uint64_t>(images.count) * images.rows * images.cols != images.pixels.size()) __builtin_trap();
    }
  });
  return 0;
}
