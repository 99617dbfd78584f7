// Storage: one reference-counted block of bytes on one device, from that device's allocator, and the
// per-device primitive services (allocation, copies, fill, asynchronous uploads) that backends register.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "opsnn/core/device.h"
#include "opsnn/core/dtype.h"
#include "opsnn/core/graph.h"

namespace opsnn {

// Host memory kinds: ordinary pageable memory, or page-locked (pinned) memory that a GPU reads by DMA,
// so host-to-device copies from it can run asynchronously. Pinning is costly: reuse pinned buffers.
enum class HostMemory { pageable, pinned };

// A point in a device's queued work (a CUDA event): host threads can wait for it, and the compute queue
// (the legacy default stream, where every kernel runs) can be made to wait for it without the host blocking.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual void wait() = 0;               // blocks the calling thread until the work before the event is done
  virtual void make_compute_wait() = 0;  // compute work queued from now on starts after the event
};

// A queue of host-to-device copies beside the compute queue, so uploads overlap compute. Its copies are
// ordered among themselves only; ordering against compute is explicit, in both directions.
class CopyStream {
 public:
  virtual ~CopyStream() = default;  // waits for the copies queued on it
  // Copies queued from now on start after the compute work queued so far: e.g. after the allocation of
  // their destinations, which the stream-ordered device allocator orders on the compute queue only.
  virtual void wait_for_compute() = 0;
  // Queues a copy of `bytes` from host memory (pinned, for the copy to be asynchronous) to device memory;
  // returns at once. The source must stay untouched until record()'s event after this copy has passed.
  virtual void copy_from_host(void* destination, const void* host_source, size_t bytes) = 0;
  // An event after every copy queued so far.
  virtual std::shared_ptr<DeviceEvent> record() = 0;
};

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
  virtual void strided_copy(void* destination, DType destination_dtype, const void* source, DType source_dtype, int dim,
                            const int64_t* shape, const int64_t* source_strides, int device_index) = 0;
  // destination[i] = value for n elements of dtype.
  virtual void fill(void* destination, DType dtype, double value, int64_t count, int device_index) = 0;
  // destination[i] += alpha * source[i] for n contiguous elements of one floating dtype.
  virtual void accumulate(void* destination, const void* source, DType dtype, double alpha, int64_t count,
                          int device_index) = 0;
  // destination[i] += source[i] converted to the destination's dtype, for n contiguous elements, in one pass
  // and with the bits of converting first; false (nothing done) where this device has no such kernel for
  // the pair, and the caller converts first.
  virtual bool accumulate_converted(void* destination, DType destination_dtype, const void* source, DType source_dtype,
                                    int64_t count, int device_index) {
    (void)destination, (void)destination_dtype, (void)source, (void)source_dtype, (void)count, (void)device_index;
    return false;
  }
  // Blocks until all queued work on the device is done (no-op on the CPU).
  virtual void synchronize(int device_index) = 0;
  virtual int device_count() = 0;
  // Page-locked host memory usable by every device of this backend. Only GPU backends have it: the
  // defaults throw DeviceError.
  virtual void* allocate_pinned_host(size_t bytes);
  virtual void deallocate_pinned_host(void* pointer);
  // Whether the driver knows `host_pointer` as page-locked memory (false by default).
  virtual bool is_page_locked(const void* host_pointer) { return false; }
  // A new copy stream to device `device_index`, or nullptr where copies cannot overlap compute (the CPU).
  virtual std::unique_ptr<CopyStream> make_copy_stream(int device_index) { return nullptr; }
  // capture_graph (opsnn/core/graph.h) on device `device_index`; the default throws DeviceError.
  virtual std::unique_ptr<CapturedGraph> capture_graph(const std::function<void()>& work, int device_index);
};

// Registry: the CPU services are always present; others register when their backend is compiled in.
// The CPU's services are built in; other device types are registered by the composition root
// (opsnn::register_builtins), which then marks the built-ins registered.
void register_device_services(DeviceType type, std::unique_ptr<DeviceServices> services);
void mark_builtins_registered();
bool builtins_registered();
DeviceServices& device_services(Device device);  // throws DeviceError if the backend is absent
bool device_available(Device device);
int cuda_device_count();  // 0 without a CUDA backend or GPU
// Whether HostMemory::pinned can be allocated (a GPU backend with at least one device is present).
bool pinned_memory_available();
// Asks the GPU backend's driver (not a Storage flag) whether host memory is page-locked; false without one.
bool is_page_locked(const void* host_pointer);

class Storage {
 public:
  // `memory` applies to CPU storage: HostMemory::pinned comes from the GPU backend (DeviceError without
  // one, see pinned_memory_available()).
  Storage(size_t bytes, Device device, HostMemory memory = HostMemory::pageable);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool pinned() const { return memory_ == HostMemory::pinned; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  HostMemory memory_ = HostMemory::pageable;
};

// CPU buffers are aligned to this many bytes (a cache line; enough for any vector load).
inline constexpr size_t kCpuAlignmentBytes = 64;

}  // namespace opsnn
