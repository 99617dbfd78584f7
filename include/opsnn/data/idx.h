// Reader for the IDX files of (Fashion-)MNIST, gzip-compressed or plain. Every header field and size is
// validated; problems raise opsnn::DataError naming the file and the byte offset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace opsnn::data {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension

struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, image-major then row-major
};

// The bytes of a file, gunzipped when it starts with the gzip magic (0x1f 0x8b). `complete` is false
// when a gzip stream ended early (truncated file); the bytes decompressed so far are kept so the caller
// can report where the data stops. Corrupt gzip data raises DataError with the compressed byte offset.
struct FileBytes {
  std::vector<uint8_t> bytes;
  bool gzip = false;
  bool complete = true;
};
FileBytes read_file_bytes(const std::string& path);

IdxImages read_idx_images(const std::string& path);
// Labels, each checked to be < num_classes.
std::vector<uint8_t> read_idx_labels(const std::string& path, int num_classes);

}  // namespace opsnn::data
