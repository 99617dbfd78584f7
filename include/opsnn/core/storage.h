// Storage: one reference-counted block of bytes on one device, from that device's allocator, and the
// per-device primitive services (allocation, copies, fill) that backends register.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "opsnn/core/device.h"
#include "opsnn/core/dtype.h"

namespace opsnn {

// What a device backend provides to the core: memory and the few byte-level primitives that Tensor
// needs for copies, casts and gradient accumulation. The CPU one is built in; the CUDA backend
// registers its own. Arithmetic kernels live in ops/ (ops/backend.h), not here.
class DeviceServices {
 public:
  virtual ~DeviceServices() = default;
  virtual void* allocate(size_t bytes, int device_index) = 0;
  virtual void deallocate(void* pointer, size_t bytes, int device_index) = 0;
  // Copies between this device and host memory, or within this device.
  virtual void copy_to_host(void* host_destination, const void* source, size_t bytes, int device_index) = 0;
  virtual void copy_from_host(void* destination, const void* host_source, size_t bytes, int device_index) = 0;
  virtual void copy_within(void* destination, const void* source, size_t bytes, int device_index) = 0;
  // Strided gather of `dim`-dimensional data with element conversion: destination is contiguous.
  virtual void strided_copy(void* destination, DType destination_dtype, const void* source, DType source_dtype,
                            int dim, const int64_t* shape, const int64_t* source_strides, int device_index) = 0;
  // destination[i] = value for n elements of dtype.
  virtual void fill(void* destination, DType dtype, double value, int64_t count, int device_index) = 0;
  // destination[i] += alpha * source[i] for n contiguous elements of one floating dtype.
  virtual void accumulate(void* destination, const void* source, DType dtype, double alpha, int64_t count,
                          int device_index) = 0;
  // Blocks until all queued work on the device is done (no-op on the CPU).
  virtual void synchronize(int device_index) = 0;
  virtual int device_count() = 0;
};

// Registry: the CPU services are always present; others register when their backend is compiled in.
void register_device_services(DeviceType type, std::unique_ptr<DeviceServices> services);
DeviceServices& device_services(Device device);  // throws DeviceError if the backend is absent
bool device_available(Device device);
int cuda_device_count();  // 0 without a CUDA backend or GPU

class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

// CPU buffers are aligned to this many bytes (a cache line; enough for any vector load).
inline constexpr size_t kCpuAlignmentBytes = 64;

}  // namespace opsnn
