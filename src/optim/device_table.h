// A per-device-type table of kernels (plain structs of function pointers, or a factory), filled at
// startup by each backend and read by the optimizer code that dispatches on a tensor's device - the
// dispatch without #ifdef for the fused step, sparse rows, top-k and steppers (see src/optim/README.md).
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <utility>

#include "opsnn/core/device.h"

namespace opsnn::optim {

template <typename Table>
class DeviceTable {
 public:
  DeviceTable() = default;
  DeviceTable(DeviceType type, Table table) { set(type, std::move(table)); }

  void set(DeviceType type, Table table) {
    std::lock_guard lock(mutex_);
    tables_.at(static_cast<size_t>(type)) = std::move(table);
    present_.at(static_cast<size_t>(type)) = true;
  }
  // The table registered for `type`, or null. Tables are registered once at startup and never removed,
  // so the pointer stays valid.
  const Table* find(DeviceType type) {
    std::lock_guard lock(mutex_);
    return present_.at(static_cast<size_t>(type)) ? &tables_.at(static_cast<size_t>(type)) : nullptr;
  }

 private:
  std::mutex mutex_;
  std::array<Table, 2> tables_{};
  std::array<bool, 2> present_{};
};

}  // namespace opsnn::optim
