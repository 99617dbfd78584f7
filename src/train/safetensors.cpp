// safetensors writing (streamed, fsynced, CRC-32 computed on the way) and strict reading: every header
// field and every byte range is checked, and each problem is a DataError naming the file and place.
#include "opsnn/train/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>  // header JSON (kept out of the public header)
#include <set>

#include "core/json_reader.h"

namespace opsnn::train {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; opsnn copies raw bytes and so needs a little-endian host");

using OrderedJson = nlohmann::ordered_json;  // keeps header keys in file order (tensor order for ties)

namespace {

constexpr size_t kHeaderLengthBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f32, "F32"},   {DType::f64, "F64"}, {DType::f16, "F16"},
                                     {DType::bf16, "BF16"}, {DType::i32, "I32"}, {DType::i64, "I64"},
                                     {DType::u8, "U8"}};

std::string accepted_dtype_names() {
  std::string list;
  for (const DTypeName& entry : kDTypeNames) list += (list.empty() ? "" : ", ") + std::string(entry.name);
  return list;
}

std::string system_reason() { return std::strerror(errno); }

// a * b, or nullopt on uint64 overflow.
std::optional<uint64_t> checked_multiply(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// Calls sink(bytes, count) with the whole file in order: length, padded header, tensor data.
void emit_safetensors(const NamedTensors& tensors, const SafetensorsMetadata& metadata,
                      const std::function<void(const char*, size_t)>& sink) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson& metadata_json = header[std::string(kMetadataKey)] = OrderedJson::object();
    for (const auto& [key, value] : metadata) metadata_json[key] = value;
  }
  std::set<std::string_view> seen_names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    OPSNN_CHECK(!name.empty(), "safetensors: a tensor has an empty name");
    OPSNN_CHECK(name != kMetadataKey, "safetensors: '", kMetadataKey, "' is reserved and cannot name a tensor");
    OPSNN_CHECK(seen_names.insert(name).second, "safetensors: tensor name '", name, "' appears twice");
    OPSNN_CHECK(tensor.defined(), "safetensors: tensor '", name, "' is undefined");
    uint64_t size_bytes = tensor.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + size_bytes}}};
    offset += size_bytes;
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::type_error& error) {
    throw Error(
        detail::concat("safetensors: a tensor name or metadata string is not valid UTF-8 (", error.what(), ")"));
  }
  // Padding to a multiple of 8 keeps the data 8-byte aligned in a memory-mapped file.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  uint64_t header_length = header_text.size();
  char length_bytes[kHeaderLengthBytes];
  std::memcpy(length_bytes, &header_length, sizeof(length_bytes));
  sink(length_bytes, sizeof(length_bytes));
  sink(header_text.data(), header_text.size());
  for (const auto& [name, tensor] : tensors) {
    if (tensor.numel() == 0) continue;
    Tensor host = tensor.to(kCPU).contiguous();
    sink(static_cast<const char*>(host.data_ptr()), host.nbytes());
  }
}

// Closes a POSIX file descriptor on scope exit.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Header validation: a DataError prefixed with the source and "header field <path>".
class HeaderChecker {
 public:
  HeaderChecker(std::string_view source, uint64_t buffer_size) : source_(source), buffer_size_(buffer_size) {}

  template <typename... Parts>
  [[noreturn]] void fail(const std::string& field, Parts&&... parts) const {
    throw DataError(detail::concat(source_, ": safetensors header field ", field, ": ", std::forward<Parts>(parts)...));
  }

  uint64_t unsigned_integer(const OrderedJson& value, const std::string& field) const {
    if (!value.is_number_unsigned()) fail(field, "expected a non-negative integer, found ", value.dump());
    return value.get<uint64_t>();
  }

  const OrderedJson& member(const OrderedJson& object, const char* key, const std::string& field) const {
    auto found = object.find(key);
    if (found == object.end()) fail(field, "missing \"", key, "\"");
    return *found;
  }

  SafetensorsMetadata metadata(const OrderedJson& value) const {
    std::string field = std::string("\"") + std::string(kMetadataKey) + "\"";
    if (!value.is_object()) fail(field, "expected an object of strings, found ", value.type_name());
    SafetensorsMetadata result;
    for (const auto& [key, entry] : value.items()) {
      if (!entry.is_string()) fail(field + "[\"" + key + "\"]", "expected a string, found ", entry.dump());
      result.emplace(key, entry.get<std::string>());
    }
    return result;
  }

  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };

  Entry tensor_entry(const std::string& name, const OrderedJson& value) const {
    std::string field = "\"" + name + "\"";
    if (name.empty()) fail(field, "a tensor has an empty name");
    // The type, not the value: an array here may hold the rest of a large header.
    if (!value.is_object())
      fail(field, "expected an object with dtype, shape and data_offsets, found ", value.type_name());
    for (const auto& [key, unused] : value.items())
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        fail(field, "unexpected key \"", key, "\" (allowed: dtype, shape, data_offsets)");
    Entry entry;
    entry.name = name;

    const OrderedJson& dtype_json = member(value, "dtype", field);
    if (!dtype_json.is_string()) fail(field + ".dtype", "expected a string, found ", dtype_json.dump());
    std::optional<DType> dtype = parse_safetensors_dtype(dtype_json.get<std::string>());
    if (!dtype)
      fail(field + ".dtype", "unsupported dtype ", dtype_json.dump(), " (opsnn reads ", accepted_dtype_names(), ")");
    entry.dtype = *dtype;

    const OrderedJson& shape_json = member(value, "shape", field);
    if (!shape_json.is_array()) fail(field + ".shape", "expected an array, found ", shape_json.dump());
    // Overflow checks use max(extent, 1) so that strides of empty tensors fit in int64 too.
    uint64_t element_count = 1;
    uint64_t stride_span = 1;
    for (size_t d = 0; d < shape_json.size(); ++d) {
      uint64_t extent = unsigned_integer(shape_json[d], field + ".shape[" + std::to_string(d) + "]");
      std::optional<uint64_t> span = checked_multiply(stride_span, std::max<uint64_t>(extent, 1));
      if (!span || *span > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(field + ".shape", "shape ", shape_json.dump(), " has too many elements");
      stride_span = *span;
      element_count *= extent;
      entry.shape.push_back(static_cast<int64_t>(extent));
    }
    std::optional<uint64_t> expected_bytes = checked_multiply(element_count, dtype_size(entry.dtype));
    if (!expected_bytes) fail(field + ".shape", "shape ", shape_json.dump(), " has too many bytes");

    const OrderedJson& offsets_json = member(value, "data_offsets", field);
    if (!offsets_json.is_array() || offsets_json.size() != 2)
      fail(field + ".data_offsets", "expected [begin, end], found ", offsets_json.dump());
    entry.begin = unsigned_integer(offsets_json[0], field + ".data_offsets[0]");
    entry.end = unsigned_integer(offsets_json[1], field + ".data_offsets[1]");
    if (entry.end < entry.begin) fail(field + ".data_offsets", "end ", entry.end, " is before begin ", entry.begin);
    if (entry.end - entry.begin != *expected_bytes)
      fail(field, "shape ", shape_str(entry.shape), " of ", dtype_json.get<std::string>(), " needs ", *expected_bytes,
           " bytes but data_offsets [", entry.begin, ", ", entry.end, "] span ", entry.end - entry.begin);
    if (entry.end > buffer_size_)
      fail(field + ".data_offsets", "[", entry.begin, ", ", entry.end, "] reach past the end of the ", buffer_size_,
           "-byte data buffer (file truncated?)");
    return entry;
  }

 private:
  std::string_view source_;
  uint64_t buffer_size_;
};

// Parses the header text, rejecting duplicate keys in any object (nlohmann would keep the last one).
OrderedJson parse_header_json(std::string_view header_text, std::string_view source) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate_key;
  auto track_keys = [&](int, nlohmann::json::parse_event_t event, OrderedJson& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) open_objects.emplace_back();
    if (event == Event::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == Event::key && !open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second &&
        duplicate_key.empty())
      duplicate_key = parsed.get<std::string>();
    return true;
  };
  OrderedJson header;
  try {
    header = OrderedJson::parse(header_text.begin(), header_text.end(),
                                depth_limited<OrderedJson>(detail::concat(source, ": safetensors header"), track_keys));
  } catch (const nlohmann::json::parse_error& error) {
    // error.byte counts from 1 within the header; the header starts after the 8-byte length.
    std::string reason = error.what();
    size_t prefix_end = reason.find("] ");
    if (prefix_end != std::string::npos) reason = reason.substr(prefix_end + 2);
    reason = printable(reason, Printable::ascii);
    throw DataError(detail::concat(source, ": safetensors header is not valid JSON near file byte offset ",
                                   kHeaderLengthBytes + (error.byte > 0 ? error.byte - 1 : 0), ": ", reason));
  } catch (const nlohmann::json::exception& error) {  // a number too large for a double, say
    throw DataError(detail::concat(source, ": safetensors header at file byte offset ", kHeaderLengthBytes,
                                   " is not valid JSON: ", error.what()));
  }
  if (!duplicate_key.empty())
    throw DataError(detail::concat(source, ": safetensors header has the key \"", duplicate_key, "\" twice"));
  if (!header.is_object())
    throw DataError(detail::concat(source, ": safetensors header at file byte offset ", kHeaderLengthBytes,
                                   " is a JSON ", header.type_name(), ", expected an object"));
  return header;
}

}  // namespace

const Tensor* SafetensorsContents::find(std::string_view name) const {
  for (const auto& [tensor_name, tensor] : tensors)
    if (tensor_name == name) return &tensor;
  return nullptr;
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& entry : kDTypeNames)
    if (entry.dtype == dtype) return entry.name;
  throw TypeError(detail::concat("safetensors: no format name for dtype ", dtype_name(dtype)));
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const DTypeName& entry : kDTypeNames)
    if (entry.name == name) return entry.dtype;
  return std::nullopt;
}

uint32_t crc32_of(std::string_view bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* data = reinterpret_cast<const Bytef*>(bytes.data());
  size_t remaining = bytes.size();
  while (remaining > 0) {  // zlib takes 32-bit lengths
    uInt chunk = static_cast<uInt>(std::min<size_t>(remaining, 1u << 30));
    crc = ::crc32(crc, data, chunk);
    data += chunk;
    remaining -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string encode_safetensors(const NamedTensors& tensors, const SafetensorsMetadata& metadata) {
  std::string bytes;
  emit_safetensors(tensors, metadata, [&](const char* data, size_t count) { bytes.append(data, count); });
  return bytes;
}

FileDigest write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                             const SafetensorsMetadata& metadata) {
  FileDescriptor file{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  OPSNN_CHECK(file.fd >= 0, "cannot create ", path.string(), ": ", system_reason());
  FileDigest digest;
  try {
    emit_safetensors(tensors, metadata, [&](const char* data, size_t count) {
      digest.crc32 = static_cast<uint32_t>(::crc32_z(digest.crc32, reinterpret_cast<const Bytef*>(data), count));
      digest.size_bytes += count;
      while (count > 0) {
        ssize_t written = ::write(file.fd, data, count);
        if (written < 0 && errno == EINTR) continue;
        OPSNN_CHECK(written > 0, "cannot write ", path.string(), ": ", system_reason());
        data += written;
        count -= static_cast<size_t>(written);
      }
    });
    OPSNN_CHECK(::fsync(file.fd) == 0, "cannot flush ", path.string(), " to disk: ", system_reason());
    int fd = file.fd;
    file.fd = -1;
    OPSNN_CHECK(::close(fd) == 0, "cannot close ", path.string(), ": ", system_reason());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);  // no half-written file left behind
    throw;
  }
  return digest;
}

std::string read_file_bytes(const std::filesystem::path& path) {
  // O_NONBLOCK: a blocking open() of a FIFO waits for a writer forever, before fstat could refuse it.
  // For the regular files accepted below the flag changes nothing.
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  OPSNN_CHECK_AS(DataError, file.fd >= 0, "cannot open ", path.string(), ": ", system_reason());
  struct stat info {};
  OPSNN_CHECK_AS(DataError, ::fstat(file.fd, &info) == 0, "cannot stat ", path.string(), ": ", system_reason());
  OPSNN_CHECK_AS(DataError, S_ISREG(info.st_mode), path.string(), " is not a regular file");
  const int flags = ::fcntl(file.fd, F_GETFL);
  OPSNN_CHECK_AS(DataError, flags >= 0 && ::fcntl(file.fd, F_SETFL, flags & ~O_NONBLOCK) == 0, "cannot read ",
                 path.string(), ": ", system_reason());
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t filled = 0;
  while (filled < bytes.size()) {
    ssize_t got = ::read(file.fd, bytes.data() + filled, bytes.size() - filled);
    if (got < 0 && errno == EINTR) continue;
    OPSNN_CHECK_AS(DataError, got >= 0, "cannot read ", path.string(), ": ", system_reason());
    if (got == 0) break;  // the file shrank while reading
    filled += static_cast<size_t>(got);
  }
  bytes.resize(filled);
  return bytes;
}

SafetensorsContents decode_safetensors(std::string_view bytes, std::string_view source) {
  if (bytes.size() < kHeaderLengthBytes)
    throw DataError(detail::concat(source, ": ", bytes.size(),
                                   " bytes is too short for a safetensors file (the header length alone is 8 bytes)"));
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), sizeof(header_length));
  uint64_t after_length = bytes.size() - kHeaderLengthBytes;
  if (header_length > after_length)
    throw DataError(detail::concat(source, ": safetensors header length ", header_length,
                                   " (file byte offset 0) exceeds the ", after_length,
                                   " bytes that follow it (file truncated or not safetensors)"));
  std::string_view header_text = bytes.substr(kHeaderLengthBytes, header_length);
  std::string_view buffer = bytes.substr(kHeaderLengthBytes + header_length);
  uint64_t buffer_start = kHeaderLengthBytes + header_length;

  OrderedJson header = parse_header_json(header_text, source);
  HeaderChecker checker(source, buffer.size());
  SafetensorsContents contents;
  std::vector<HeaderChecker::Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      contents.metadata = checker.metadata(value);
    } else {
      entries.push_back(checker.tensor_entry(key, value));
    }
  }

  // The data must tile the buffer exactly: sorted by offset, each tensor starts where the last ended.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t expected_begin = 0;
  const HeaderChecker::Entry* previous = nullptr;
  for (const auto& entry : entries) {
    if (entry.begin < expected_begin)
      throw DataError(detail::concat(source, ": safetensors tensors \"", previous->name, "\" and \"", entry.name,
                                     "\" overlap at file byte offset ", buffer_start + entry.begin));
    if (entry.begin > expected_begin)
      throw DataError(detail::concat(source, ": safetensors data bytes at file offsets [",
                                     buffer_start + expected_begin, ", ", buffer_start + entry.begin,
                                     ") belong to no tensor (before \"", entry.name, "\")"));
    expected_begin = entry.end;
    previous = &entry;
  }
  if (expected_begin != buffer.size())
    throw DataError(detail::concat(source, ": safetensors file has ", buffer.size() - expected_begin,
                                   " trailing bytes after the last tensor, from file byte offset ",
                                   buffer_start + expected_begin));

  for (const auto& entry : entries) {
    Tensor tensor = Tensor::empty(entry.shape, entry.dtype, kCPU);
    if (entry.end > entry.begin) std::memcpy(tensor.data_ptr(), buffer.data() + entry.begin, entry.end - entry.begin);
    contents.tensors.emplace_back(entry.name, std::move(tensor));
  }
  return contents;
}

SafetensorsContents read_safetensors(const std::filesystem::path& path) {
  return decode_safetensors(read_file_bytes(path), path.string());
}

}  // namespace opsnn::train
