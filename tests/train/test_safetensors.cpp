// Tests of src/train/safetensors.cpp: bit-exact round trips, the exact byte layout, and refusal of every
// kind of malformed file (truncation at each byte, corruption, each invalid header field).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "opsnn/train/safetensors.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::train;

namespace {

// A tensor whose bytes are arbitrary (NaN and subnormal bit patterns included), so comparisons are of bits.
Tensor random_bits_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor tensor = Tensor::empty(shape, dtype);
  std::mt19937 engine(seed);
  auto* bytes = static_cast<unsigned char*>(tensor.data_ptr());
  for (size_t i = 0; i < tensor.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(engine());
  return tensor;
}

std::string tensor_bytes(const Tensor& tensor) {
  Tensor host = tensor.contiguous();
  if (host.nbytes() == 0) return {};
  return std::string(static_cast<const char*>(host.data_ptr()), host.nbytes());
}

// A file image from a header text (padded here only if asked) and a data buffer.
std::string make_file(std::string header, const std::string& buffer, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t length = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &length, 8);
  return bytes + header + buffer;
}

std::string float_bytes(std::initializer_list<float> values) {
  std::string bytes;
  for (float value : values) bytes.append(reinterpret_cast<const char*>(&value), sizeof(value));
  return bytes;
}

// Runs decode and returns the DataError message ("" if it did not throw); any other exception fails.
std::string decode_error(const std::string& bytes) {
  try {
    decode_safetensors(bytes, "bad.safetensors");
  } catch (const DataError& error) {
    return error.what();
  }
  return "";
}

NamedTensors every_dtype_tensors() {
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
  const Shape shapes[] = {{}, {0}, {3}, {2, 3}, {2, 0, 4}, {1, 1, 1, 5}};
  NamedTensors tensors;
  uint32_t seed = 1;
  for (DType dtype : dtypes)
    for (const Shape& shape : shapes)
      tensors.emplace_back(std::string(dtype_name(dtype)) + "/" + shape_str(shape),
                           random_bits_tensor(shape, dtype, seed++));
  return tensors;
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype and shape is bit-exact", "[checkpoint]") {
  NamedTensors tensors = every_dtype_tensors();
  SafetensorsMetadata metadata{{"producer", "opsnn test"}, {"note", "ünïcode ✓"}};
  std::string bytes = encode_safetensors(tensors, metadata);

  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  CHECK(header_length % 8 == 0);

  SafetensorsContents contents = decode_safetensors(bytes, "memory");
  CHECK(contents.metadata == metadata);
  REQUIRE(contents.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    CHECK(contents.tensors[i].first == tensors[i].first);  // file order is write order
    const Tensor& loaded = contents.tensors[i].second;
    CHECK(loaded.dtype() == tensors[i].second.dtype());
    CHECK(loaded.shape() == tensors[i].second.shape());
    CHECK(loaded.device() == kCPU);
    CHECK(tensor_bytes(loaded) == tensor_bytes(tensors[i].second));
  }
  CHECK(contents.find("f32/[2, 3]") != nullptr);
  CHECK(contents.find("absent") == nullptr);
}

TEST_CASE("safetensors writes non-contiguous tensors contiguously", "[checkpoint]") {
  Tensor matrix = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor transposed = matrix.transpose(0, 1);
  SafetensorsContents contents = decode_safetensors(encode_safetensors({{"t", transposed}}), "memory");
  CHECK(contents.tensors[0].second.shape() == Shape{3, 2});
  CHECK(contents.tensors[0].second.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("safetensors encoding matches the format byte for byte", "[checkpoint]") {
  Tensor x = Tensor::from_vector<float>({1.0f, -2.5f}, {2});
  Tensor n = Tensor::from_vector<int64_t>({7}, {});
  std::string bytes = encode_safetensors({{"x", x}, {"n", n}}, {{"k", "v"}});
  std::string expected_header = R"({"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("n":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  int64_t seven = 7;
  std::string expected =
      make_file(expected_header, float_bytes({1.0f, -2.5f}) + std::string(reinterpret_cast<const char*>(&seven), 8));
  CHECK(bytes == expected);
  CHECK(bytes.size() % 8 == 0);
}

TEST_CASE("a hand-written safetensors file parses as expected", "[checkpoint]") {
  // Header keys out of data order, unpadded header, metadata last: all allowed by the format.
  std::string header = R"({"b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},)"
                       R"( "a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
                       R"( "e":{"dtype":"BF16","shape":[0,3],"data_offsets":[16,16]},)"
                       R"( "h":{"dtype":"F16","shape":[],"data_offsets":[16,18]},)"
                       R"( "__metadata__":{"format":"pt"}})";
  int32_t ints[2] = {7, -1};
  uint16_t half_one = 0x3c00;  // 1.0 in IEEE half
  std::string buffer = float_bytes({1.0f, -2.5f}) + std::string(reinterpret_cast<const char*>(ints), 8) +
                       std::string(reinterpret_cast<const char*>(&half_one), 2);
  SafetensorsContents contents = decode_safetensors(make_file(header, buffer, /*pad=*/false), "hand");
  REQUIRE(contents.tensors.size() == 4);
  CHECK(contents.tensors[0].first == "a");
  CHECK(contents.tensors[1].first == "b");
  CHECK(contents.tensors[2].first == "e");
  CHECK(contents.tensors[3].first == "h");
  CHECK(contents.tensors[0].second.shape() == Shape{1, 2});
  CHECK(contents.tensors[0].second.to_vector<float>() == std::vector<float>{1.0f, -2.5f});
  CHECK(contents.tensors[1].second.dtype() == DType::i32);
  CHECK(contents.tensors[1].second.to_vector<int32_t>() == std::vector<int32_t>{7, -1});
  CHECK(contents.tensors[2].second.dtype() == DType::bf16);
  CHECK(contents.tensors[2].second.shape() == Shape{0, 3});
  CHECK(contents.tensors[3].second.dtype() == DType::f16);
  CHECK(contents.tensors[3].second.item() == 1.0);
  CHECK(contents.metadata == SafetensorsMetadata{{"format", "pt"}});
}

TEST_CASE("safetensors file write reports the size and CRC-32 of what it wrote", "[checkpoint]") {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("opsnn-safetensors-" + std::to_string(::getpid()) + ".safetensors");
  NamedTensors tensors = every_dtype_tensors();
  FileDigest digest = write_safetensors(path, tensors, {{"a", "b"}});
  std::string on_disk = read_file_bytes(path);
  CHECK(on_disk == encode_safetensors(tensors, {{"a", "b"}}));
  CHECK(digest.size_bytes == on_disk.size());
  CHECK(digest.crc32 == crc32_of(on_disk));
  CHECK(read_safetensors(path).tensors.size() == tensors.size());
  std::filesystem::remove(path);
  CHECK(crc32_of("123456789") == 0xCBF43926u);  // the standard CRC-32 check value
  CHECK_THROWS_AS(read_safetensors(path), DataError);
}

TEST_CASE("safetensors writer rejects bad names", "[checkpoint]") {
  Tensor t = Tensor::zeros({2});
  CHECK_THROWS_WITH(encode_safetensors({{"w", t}, {"w", t}}), Catch::Contains("'w' appears twice"));
  CHECK_THROWS_WITH(encode_safetensors({{"__metadata__", t}}), Catch::Contains("reserved"));
  CHECK_THROWS_WITH(encode_safetensors({{"", t}}), Catch::Contains("empty name"));
  CHECK_THROWS_WITH(encode_safetensors({{"u", Tensor()}}), Catch::Contains("'u' is undefined"));
  CHECK_THROWS_WITH(encode_safetensors({{"bad\xff", t}}), Catch::Contains("UTF-8"));
}

TEST_CASE("safetensors reader refuses each malformed header with a precise message", "[checkpoint]") {
  std::string eight = float_bytes({1.0f, 2.0f});
  auto one = [](const std::string& entry) { return R"({"t":)" + entry + "}"; };
  struct Case {
    std::string bytes, message;
  };
  const Case cases[] = {
      {std::string("\x10\0\0", 3), "too short"},
      {make_file("{}", "").substr(0, 9), "exceeds the 1 bytes"},
      {make_file(R"({"t":{"dtype":"F32",)", ""), "not valid JSON near file byte offset"},
      {make_file("[1, 2]", ""), "is a JSON array, expected an object"},
      {make_file("{\"t\xff\":1}", ""), "not valid JSON"},
      {make_file(one(R"({"shape":[2],"data_offsets":[0,8]})"), eight), "missing \"dtype\""},
      {make_file(one(R"({"dtype":"F32","data_offsets":[0,8]})"), eight), "missing \"shape\""},
      {make_file(one(R"({"dtype":"F32","shape":[2]})"), eight), "missing \"data_offsets\""},
      {make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})"), eight), "unexpected key \"x\""},
      {make_file(one(R"({"dtype":"BOOL","shape":[8],"data_offsets":[0,8]})"), eight), "unsupported dtype \"BOOL\""},
      {make_file(one(R"({"dtype":5,"shape":[2],"data_offsets":[0,8]})"), eight), "\"t\".dtype: expected a string"},
      {make_file(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), eight), "\"t\".shape[0]"},
      {make_file(one(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), eight), "non-negative integer"},
      {make_file(one(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), eight), "\"t\".shape: expected an array"},
      {make_file(one(R"({"dtype":"F32","shape":[1e400],"data_offsets":[0,8]})"), eight), "is not valid JSON"},
      {make_file(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"), eight),
       "too many elements"},
      {make_file(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), eight),
       "needs 12 bytes but data_offsets [0, 8] span 8"},
      {make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), eight), "end 0 is before begin 8"},
      {make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,9]})"), eight), "expected [begin, end]"},
      {make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})"), eight), "reach past the end"},
      {make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), eight + "xy"), "2 trailing bytes"},
      {make_file(one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), eight), "belong to no tensor"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 eight),
       "\"a\" and \"b\" overlap"},
      {make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 eight),
       "the key \"a\" twice"},
      {make_file(R"({"__metadata__":{"k":1}})", ""), "expected a string, found 1"},
      {make_file(R"({"__metadata__":[]})", ""), "expected an object of strings"},
      {make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"dtype":"F32"})"), eight),
       "the key \"dtype\" twice"},
      {make_file(R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight), "empty name"},
  };
  for (const Case& c : cases) {
    INFO("expected message part: " << c.message);
    std::string message = decode_error(c.bytes);
    CHECK_THAT(message, Catch::Contains(c.message));
    CHECK_THAT(message, Catch::StartsWith("bad.safetensors: "));
  }
  // Nesting deep enough to overflow the stack of a recursive walk (dump() for a message) stops at parse.
  const std::string deep = "{\"t\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK_THAT(decode_error(make_file(deep, "")),
             Catch::Equals("bad.safetensors: safetensors header: nested deeper than 64 levels"));
  // Bytes that are not printable ASCII are escaped, never copied raw into the message.
  std::string binary = decode_error(make_file("{\"t\xff\x01\":1}", ""));
  CHECK(std::all_of(binary.begin(), binary.end(), [](char c) { return c >= 0x20 && c < 0x7f; }));

  // The valid counterpart of the cases above parses, so the refusals are about the named fault.
  CHECK(decode_error(make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), eight)).empty());
  CHECK(decode_error(make_file("{}", "")).empty());
}

TEST_CASE("safetensors truncated at every byte is refused", "[checkpoint]") {
  NamedTensors tensors{{"w", Tensor::from_vector<float>({1, 2, 3}, {3})},
                       {"s", Tensor::from_vector<int64_t>({5}, {})},
                       {"e", Tensor::empty({0}, DType::f16)},
                       {"b", Tensor::from_vector<uint8_t>({9}, {1})}};
  std::string bytes = encode_safetensors(tensors, {{"k", "v"}});
  for (size_t length = 0; length < bytes.size(); ++length) {
    INFO("truncated to " << length << " of " << bytes.size() << " bytes");
    CHECK_THROWS_AS(decode_safetensors(std::string_view(bytes).substr(0, length), "truncated"), DataError);
  }
  CHECK_NOTHROW(decode_safetensors(bytes, "complete"));
}

TEST_CASE("safetensors with random single-byte corruptions never crashes", "[checkpoint]") {
  NamedTensors tensors{{"weight", Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})},
                       {"count", Tensor::from_vector<int64_t>({5}, {})}};
  std::string bytes = encode_safetensors(tensors, {{"k", "v"}});
  uint64_t header_end = 0;
  std::memcpy(&header_end, bytes.data(), 8);
  header_end += 8;
  std::mt19937 engine(1234);
  int refused_in_header = 0, header_trials = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string corrupt = bytes;
    size_t position = engine() % corrupt.size();
    corrupt[position] = static_cast<char>(corrupt[position] ^ static_cast<char>(1 + engine() % 255));
    bool in_header = position < header_end;
    header_trials += in_header;
    try {
      SafetensorsContents contents = decode_safetensors(corrupt, "corrupt");
      // Data bytes carry no checksum at this level (the checkpoint's CRC covers them): still parses.
      if (!in_header) CHECK(contents.tensors.size() == 2);
    } catch (const DataError&) {
      refused_in_header += in_header;
      CHECK(in_header);  // a data-byte change cannot make the header invalid
    }
  }
  // Most header corruptions break the JSON or a field; the rest (a name letter, a digit swap that keeps
  // the byte count, a space turned into a tab) give another valid file.
  CHECK(refused_in_header > header_trials * 6 / 10);
}

TEST_CASE("safetensors sample for the PyTorch loader check", "[checkpoint]") {
  // Writes a file with every dtype and its expected contents for tools/check_safetensors.py, which loads
  // it with safetensors.torch.load_file on a machine with PyTorch (see that script's header).
  std::filesystem::path folder = std::filesystem::path(OPSNN_BINARY_DIR) / "safetensors-sample";
  std::filesystem::create_directories(folder);
  NamedTensors tensors = every_dtype_tensors();
  tensors.emplace_back("values/f32", Tensor::from_vector<float>({0.5f, -1.25f, 3.0f, 1e-8f}, {2, 2}));
  SafetensorsMetadata metadata{{"producer", "opsnn test"}};
  write_safetensors(folder / "sample.safetensors", tensors, metadata);
  nlohmann::ordered_json expected{{"metadata", metadata}, {"tensors", nlohmann::ordered_json::object()}};
  for (const auto& [name, tensor] : tensors)
    expected["tensors"][name] = {{"dtype", safetensors_dtype_name(tensor.dtype())},
                                 {"shape", tensor.shape()},
                                 {"crc32", crc32_of(tensor_bytes(tensor))}};
  std::ofstream(folder / "sample.expected.json") << expected.dump(2) << "\n";
  CHECK(read_safetensors(folder / "sample.safetensors").tensors.size() == tensors.size());
}
