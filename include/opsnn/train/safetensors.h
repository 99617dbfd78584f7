// The safetensors file format (https://github.com/huggingface/safetensors): write named tensors and a
// string metadata map, and read them back with every field validated. Files are readable by PyTorch's
// safetensors.torch.load_file. Layout: u64 little-endian header length N, N bytes of UTF-8 JSON
// (padded with spaces to a multiple of 8), then the tensors' bytes back to back in the order written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "opsnn/core/dtype.h"
#include "opsnn/core/tensor.h"

namespace opsnn::train {

// Tensors in file order, each with its name.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// The header's "__metadata__" map (string to string, as the format requires).
using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  NamedTensors tensors;  // CPU, contiguous, in the order of their data in the file
  SafetensorsMetadata metadata;
  const Tensor* find(std::string_view name) const;  // nullptr when absent
};

// Size and zlib CRC-32 of a whole file's bytes, as written or as read.
struct FileDigest {
  uint64_t size_bytes = 0;
  uint32_t crc32 = 0;
};

// "F32", "BF16", ...: the format's dtype names; parse returns nullopt for names opsnn cannot hold.
std::string_view safetensors_dtype_name(DType dtype);
std::optional<DType> parse_safetensors_dtype(std::string_view name);

// The whole file as bytes. Tensors may live on any device and have any layout (copied to the host
// and made contiguous). Throws opsnn::Error on an undefined tensor, an empty or duplicate name, the
// reserved name "__metadata__", or names/metadata that are not valid UTF-8.
std::string encode_safetensors(const NamedTensors& tensors, const SafetensorsMetadata& metadata = {});

// Writes the file at `path` directly (not atomically: callers wanting atomicity write to a temporary
// name and rename, as checkpoints do), fsyncs it, and returns its size and CRC-32. Streams one
// tensor at a time, so the host never holds more than the largest tensor. Throws opsnn::Error with
// the path and the system's reason when the file cannot be written.
FileDigest write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                             const SafetensorsMetadata& metadata = {});

// Parses and validates a complete file image. `source` names it in error messages (a path, usually).
// Throws opsnn::DataError naming the source and the byte offset or header field at fault for: fewer
// than 8 bytes, a header length past the end, a header that is not a JSON object or not UTF-8,
// duplicate keys, missing/extra/mistyped fields, unknown dtypes, negative or overflowing shapes,
// shape * dtype size != data length, offsets outside the buffer, overlapping offsets, gaps, and
// trailing bytes after the last tensor.
SafetensorsContents decode_safetensors(std::string_view bytes, std::string_view source);

// Reads a whole file (throws DataError when it is missing or unreadable).
std::string read_file_bytes(const std::filesystem::path& path);
// read_file_bytes + decode_safetensors.
SafetensorsContents read_safetensors(const std::filesystem::path& path);

// zlib's CRC-32 of a byte range (the value Python's zlib.crc32 gives).
uint32_t crc32_of(std::string_view bytes);

}  // namespace opsnn::train
