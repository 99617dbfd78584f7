// Reader for the IDX files of (Fashion-)MNIST, gzip-compressed or plain. Every header field and size is
// validated; problems raise opsnn::DataError naming the file and the byte offset.
#pragma once

#include <cstdint>
#include <functional>
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
  bool stopped = false;  // inflation stopped past the limit: bytes holds only the start (and too many of them)
};

// No file decompresses to more than this (4 GiB: Fashion-MNIST's largest file is 47 MB); more is a
// DataError before the memory is taken.
inline constexpr uint64_t kMaxDecompressedBytes = uint64_t{1} << 32;

// How far a gzip file may inflate, judged from its first header_bytes decompressed bytes: total_bytes
// returns the whole size they promise (at least header_bytes). Inflation stops, with
// FileBytes::stopped set, as soon as the output passes it. A total of 0 (an unusable header) keeps
// only the header bytes, still inflating the rest, unkept, to report corrupt gzip data.
struct DecompressedLimit {
  size_t header_bytes = 0;
  std::function<uint64_t(const uint8_t* header)> total_bytes;
};
FileBytes read_file_bytes(const std::string& path, const DecompressedLimit& limit = {});
// The same for bytes already in memory; `path` names them in messages (a ".gz" name must hold gzip data).
FileBytes decode_file_bytes(std::vector<uint8_t> raw, const std::string& path, const DecompressedLimit& limit = {});

IdxImages read_idx_images(const std::string& path);
// Labels, each checked to be < num_classes.
std::vector<uint8_t> read_idx_labels(const std::string& path, int num_classes);
// The readers above on a file image already in memory (raw or gzip bytes), `path` naming it in messages.
IdxImages decode_idx_images(std::vector<uint8_t> raw, const std::string& path);
std::vector<uint8_t> decode_idx_labels(std::vector<uint8_t> raw, const std::string& path, int num_classes);

}  // namespace opsnn::data
