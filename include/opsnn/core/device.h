// Where a tensor lives: the CPU or one CUDA device, written "cpu", "cuda" or "cuda:N".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace opsnn {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType device_type, int device_index = 0) : type(device_type), index(device_index) {}

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  // Spelled out (not "= default") so the header also compiles as C++17 under nvcc.
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
  std::string str() const;

  // Parses "cpu", "cuda", "cuda:N" (N >= 0); throws opsnn::Error naming the text otherwise.
  static Device parse(std::string_view text);
};

inline constexpr Device kCPU{DeviceType::cpu, 0};

}  // namespace opsnn
