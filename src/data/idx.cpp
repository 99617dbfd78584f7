// IDX parsing and gzip decompression (zlib inflate on the whole file, so truncation and corruption are
// reported with exact offsets rather than a generic read failure).
#include "opsnn/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "opsnn/core/error.h"

namespace opsnn::data {
namespace {

std::vector<uint8_t> read_raw(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw DataError(detail::concat(path, ": cannot open (", std::strerror(errno), ")"));
  std::streamoff length = file.tellg();
  file.seekg(0);
  std::vector<uint8_t> bytes(static_cast<size_t>(std::max<std::streamoff>(length, 0)));
  if (!bytes.empty() && !file.read(reinterpret_cast<char*>(bytes.data()), length)) {
    throw DataError(detail::concat(path, ": read failed (", std::strerror(errno), ")"));
  }
  return bytes;
}

bool has_gzip_magic(const std::vector<uint8_t>& bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Inflates every gzip member of `compressed`. Sets complete=false when the input ends mid-stream.
// Inflation stops once the output passes what the header (limit) allows, or kMaxDecompressedBytes: a
// few MB of compressed zeros can expand to many GB, which must be refused before it fills memory.
void gunzip(const std::string& path, const std::vector<uint8_t>& compressed, const DecompressedLimit& limit,
            FileBytes& result) {
  // The gzip trailer's ISIZE (uncompressed size mod 2^32) is a good first guess for the output size;
  // capped so a corrupt trailer cannot request absurd memory.
  size_t guess = compressed.size() * 4;
  if (compressed.size() >= 4) {
    const uint8_t* tail = compressed.data() + compressed.size() - 4;
    size_t isize = tail[0] | (tail[1] << 8) | (tail[2] << 16) | (static_cast<size_t>(tail[3]) << 24);
    guess = std::min<size_t>(std::max(isize, guess), compressed.size() * 1032 + 1024);
  }
  guess = std::max<size_t>(guess, 1024);
  uint64_t cap = kMaxDecompressedBytes;
  bool header_known = limit.header_bytes == 0 || !limit.total_bytes;
  // An unusable header (total_bytes 0) keeps only the header; the rest is inflated into a scratch area
  // and dropped, so that corrupt gzip data is still reported as such rather than as a bad header.
  bool discard = false;
  uint64_t discarded = 0;
  std::vector<uint8_t>& out = result.bytes;
  // Until the header is out its limit is unknown: inflate only that far first.
  out.resize(header_known ? std::min<uint64_t>(guess, cap + 1) : limit.header_bytes);
  size_t produced = 0;

  z_stream stream{};
  // 15 + 16: gzip wrapper only, so a zlib or raw stream is reported as corrupt rather than half-accepted.
  if (inflateInit2(&stream, 15 + 16) != Z_OK) throw DataError(path + ": zlib initialisation failed");
  stream.next_in = const_cast<Bytef*>(compressed.data());
  stream.avail_in = static_cast<uInt>(compressed.size());
  bool stream_ended = false;
  for (;;) {
    if (produced == out.size()) out.resize(std::min<uint64_t>(out.size() * 2, cap + 1));
    stream.next_out = out.data() + produced;
    stream.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    const uInt before = stream.avail_out;
    int status = inflate(&stream, Z_NO_FLUSH);
    produced += before - stream.avail_out;
    if (!header_known && produced >= limit.header_bytes) {
      header_known = true;
      const uint64_t total = limit.total_bytes(out.data());
      discard = total == 0;
      if (!discard) cap = std::min(cap, total);
      out.resize(discard ? produced + (size_t{1} << 16)
                         : std::max<uint64_t>(produced, std::min<uint64_t>(guess, cap + 1)));
    }
    if (discard && produced > limit.header_bytes) {
      discarded += produced - limit.header_bytes;
      produced = limit.header_bytes;
      if (discarded > kMaxDecompressedBytes) {
        inflateEnd(&stream);
        throw DataError(detail::concat(path, ": decompresses to more than ", kMaxDecompressedBytes,
                                       " bytes, more than opsnn reads from one file"));
      }
    }
    if (produced > cap) {
      inflateEnd(&stream);
      if (cap == kMaxDecompressedBytes)
        throw DataError(detail::concat(path, ": decompresses to more than ", kMaxDecompressedBytes,
                                       " bytes, more than opsnn reads from one file"));
      out.resize(produced);
      result.stopped = true;  // the caller's size check reports the excess against its header
      return;
    }
    if (status == Z_STREAM_END) {
      stream_ended = true;
      if (stream.avail_in == 0) break;
      // Another gzip member follows (concatenated .gz files), or trailing garbage.
      const size_t at = compressed.size() - stream.avail_in;
      if (stream.avail_in < 2 || stream.next_in[0] != 0x1f || stream.next_in[1] != 0x8b) {
        inflateEnd(&stream);
        throw DataError(detail::concat(path, ": unexpected data after the end of the gzip stream at compressed byte ",
                                       at, " of ", compressed.size()));
      }
      inflateReset(&stream);
      stream_ended = false;
      continue;
    }
    if (status == Z_OK) continue;
    if (status == Z_BUF_ERROR && stream.avail_in == 0) break;  // input exhausted mid-stream: truncated
    if (status == Z_BUF_ERROR && stream.avail_out == 0) continue;
    const size_t at = compressed.size() - stream.avail_in;
    std::string reason = stream.msg != nullptr ? stream.msg : zError(status);
    inflateEnd(&stream);
    throw DataError(detail::concat(path, ": corrupt gzip data at compressed byte ", at, " of ", compressed.size(),
                                   " (zlib: ", reason, ") after ", produced + discarded, " decompressed bytes"));
  }
  inflateEnd(&stream);
  out.resize(produced);
  result.complete = stream_ended;
}

uint32_t big_endian_u32(const uint8_t* bytes) {
  return (static_cast<uint32_t>(bytes[0]) << 24) | (static_cast<uint32_t>(bytes[1]) << 16) |
         (static_cast<uint32_t>(bytes[2]) << 8) | static_cast<uint32_t>(bytes[3]);
}

uint32_t read_big_endian_u32(const std::vector<uint8_t>& bytes, size_t offset) {
  return big_endian_u32(bytes.data() + offset);
}

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

const char* where(const FileBytes& file) { return file.gzip ? " of the decompressed stream" : " of the file"; }

// Checks that the data holds exactly `expected` bytes (header included).
void check_total_size(const std::string& path, const FileBytes& file, uint64_t expected) {
  if (file.bytes.size() < expected || !file.complete) {
    throw DataError(detail::concat(path, ": truncated at byte ", file.bytes.size(), where(file), ", expected ",
                                   expected, " bytes"));
  }
  if (file.bytes.size() > expected) {
    throw DataError(detail::concat(path, ": unexpected extra data at byte ", expected, where(file), " (",
                                   file.stopped ? "more than " : "", file.bytes.size(), " bytes",
                                   file.stopped ? ", decompression stopped there" : "", "; the header promises ",
                                   expected, ")"));
  }
}

void check_header(const std::string& path, const FileBytes& file, size_t header_bytes, uint32_t expected_magic,
                  const char* what) {
  if (file.bytes.size() < header_bytes) {
    throw DataError(detail::concat(path, ": truncated at byte ", file.bytes.size(), where(file), ", the IDX ", what,
                                   " header needs ", header_bytes, " bytes"));
  }
  uint32_t magic = read_big_endian_u32(file.bytes, 0);
  if (magic != expected_magic) {
    throw DataError(detail::concat(path, ": wrong magic number ", hex32(magic), " at byte 0", where(file),
                                   ", expected ", hex32(expected_magic), " (IDX ", what, ")"));
  }
}

}  // namespace

FileBytes read_file_bytes(const std::string& path, const DecompressedLimit& limit) {
  return decode_file_bytes(read_raw(path), path, limit);
}

FileBytes decode_file_bytes(std::vector<uint8_t> raw, const std::string& path, const DecompressedLimit& limit) {
  FileBytes result;
  if (has_gzip_magic(raw)) {
    result.gzip = true;
    gunzip(path, raw, limit, result);
  } else if (ends_with(path, ".gz")) {
    throw DataError(detail::concat(path, ": not a gzip file (byte 0 is not the gzip magic 0x1f 0x8b)"));
  } else {
    result.bytes = std::move(raw);
  }
  return result;
}

IdxImages read_idx_images(const std::string& path) { return decode_idx_images(read_raw(path), path); }

IdxImages decode_idx_images(std::vector<uint8_t> raw, const std::string& path) {
  // The size the header promises, or 0 when it is wrong (the checks below say how).
  FileBytes file = decode_file_bytes(
      std::move(raw), path,
      {16, [](const uint8_t* header) -> uint64_t {
         uint64_t rows = big_endian_u32(header + 8), cols = big_endian_u32(header + 12);
         if (big_endian_u32(header) != kIdxImagesMagic || rows == 0 || cols == 0 || rows > 65536 || cols > 65536)
           return 0;
         return 16 + big_endian_u32(header + 4) * rows * cols;  // < 2^64
       }});
  check_header(path, file, 16, kIdxImagesMagic, "images");
  IdxImages images;
  images.count = read_big_endian_u32(file.bytes, 4);
  images.rows = read_big_endian_u32(file.bytes, 8);
  images.cols = read_big_endian_u32(file.bytes, 12);
  if (images.rows == 0 || images.cols == 0 || images.rows > 65536 || images.cols > 65536) {
    throw DataError(detail::concat(path, ": implausible image size ", images.rows, " x ", images.cols,
                                   " in the header at byte 8", where(file)));
  }
  const uint64_t expected = 16 + static_cast<uint64_t>(images.count) * images.rows * images.cols;
  check_total_size(path, file, expected);
  images.pixels.assign(file.bytes.begin() + 16, file.bytes.end());
  return images;
}

std::vector<uint8_t> read_idx_labels(const std::string& path, int num_classes) {
  return decode_idx_labels(read_raw(path), path, num_classes);
}

std::vector<uint8_t> decode_idx_labels(std::vector<uint8_t> raw, const std::string& path, int num_classes) {
  FileBytes file = decode_file_bytes(std::move(raw), path, {8, [](const uint8_t* header) -> uint64_t {
                                                              if (big_endian_u32(header) != kIdxLabelsMagic) return 0;
                                                              return 8 + uint64_t{big_endian_u32(header + 4)};
                                                            }});
  check_header(path, file, 8, kIdxLabelsMagic, "labels");
  const uint64_t count = read_big_endian_u32(file.bytes, 4);
  check_total_size(path, file, 8 + count);
  std::vector<uint8_t> labels(file.bytes.begin() + 8, file.bytes.end());
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      throw DataError(detail::concat(path, ": label ", static_cast<int>(labels[i]), " of item ", i, " at byte ", 8 + i,
                                     where(file), " is out of range [0, ", num_classes, ")"));
    }
  }
  return labels;
}

}  // namespace opsnn::data
