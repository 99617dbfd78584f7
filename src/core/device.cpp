// Device names and parsing, and dtype name parsing.
#include "opsnn/core/device.h"

#include <charconv>

#include "opsnn/core/dtype.h"
#include "opsnn/core/error.h"

namespace opsnn {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(std::string_view text) {
  if (text == "cpu") return Device(DeviceType::cpu, 0);
  if (text == "cuda") return Device(DeviceType::cuda, 0);
  if (text.starts_with("cuda:")) {
    std::string_view number = text.substr(5);
    int index = -1;
    auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), index);
    if (error == std::errc() && end == number.data() + number.size() && index >= 0 && !number.empty())
      return Device(DeviceType::cuda, index);
    if (error == std::errc::result_out_of_range)
      throw DeviceError(detail::concat("device index out of range in '", text, "' (accepted: cpu, cuda, cuda:N)"));
  }
  throw DeviceError(detail::concat("unknown device '", text, "' (accepted: cpu, cuda, cuda:N)"));
}

DType parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view text;
    DType dtype;
  };
  static constexpr Alias aliases[] = {{"f32", DType::f32},   {"float32", DType::f32}, {"fp32", DType::f32},
                                      {"f64", DType::f64},   {"float64", DType::f64}, {"fp64", DType::f64},
                                      {"f16", DType::f16},   {"float16", DType::f16}, {"fp16", DType::f16},
                                      {"half", DType::f16},  {"bf16", DType::bf16},   {"bfloat16", DType::bf16},
                                      {"i32", DType::i32},   {"int32", DType::i32},   {"i64", DType::i64},
                                      {"int64", DType::i64}, {"u8", DType::u8},       {"uint8", DType::u8}};
  for (const Alias& alias : aliases)
    if (alias.text == name) return alias.dtype;
  throw TypeError(detail::concat("unknown dtype '", name, "' (accepted: f32, f64, f16, bf16, i32, i64, u8)"));
}

}  // namespace opsnn
