// The CUDA DeviceServices: stream-ordered allocation from each device's default memory pool (with a
// release threshold so freed memory is reused, not returned to the driver), copies and the primitive
// kernels of device_kernels.cu, page-locked host memory, copy streams (copy_stream.cpp) and graph capture
// (capture.cpp). All work but a copy stream's goes to the thread's current stream (current_stream.h): the
// legacy default stream of the current device, or a capture's stream.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "core/cuda/capture.h"
#include "core/cuda/copy_stream.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"
#include "core/cuda/device_guard.h"
#include "core/cuda/device_kernels.h"
#include "opsnn/core/storage.h"

namespace opsnn {
namespace {

using cuda::DeviceGuard;

class CudaServices final : public DeviceServices {
 public:
  // The devices are counted on first use, not at registration (which may run during static initialisation,
  // before a program has set CUDA_VISIBLE_DEVICES or forked).
  CudaServices() = default;

  void* allocate(size_t bytes, int index) override {
    DeviceGuard guard(index);
    configure_pool(index);
    void* pointer = nullptr;
    cudaError_t status = cudaMallocAsync(&pointer, bytes, cuda::current_stream());
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw OutOfMemoryError(detail::concat("out of GPU memory on cuda:", index, " allocating ", bytes, " bytes (",
                                            cudaGetErrorString(status), ")"));
    }
    if (cuda::GraphCapture* capture = cuda::active_capture()) capture->allocated(pointer);
    return pointer;
  }
  // During a capture, a buffer allocated before it is kept by the graph instead (its kernels read it).
  void deallocate(void* pointer, size_t, int index) override {
    DeviceGuard guard(index);
    if (cuda::GraphCapture* capture = cuda::active_capture(); capture != nullptr && !capture->release(pointer)) return;
    if (cuda::disowned(pointer)) return;  // a failed capture's, gone with its graph
    // Cannot fail for a buffer of ours, except one freed while a failed capture unwinds (its stream is
    // invalidated; the graph and its allocations are discarded after): the error is cleared so that no later
    // launch check reports it.
    if (cudaFreeAsync(pointer, cuda::current_stream()) != cudaSuccess) cudaGetLastError();
  }
  void copy_to_host(void* host_destination, const void* source, size_t bytes, int index) override {
    DeviceGuard guard(index);
    OPSNN_CUDA_CHECK(cudaMemcpy(host_destination, source, bytes, cudaMemcpyDeviceToHost));
  }
  void copy_from_host(void* destination, const void* host_source, size_t bytes, int index) override {
    DeviceGuard guard(index);
    OPSNN_CUDA_CHECK(cudaMemcpy(destination, host_source, bytes, cudaMemcpyHostToDevice));
  }
  void copy_within(void* destination, const void* source, size_t bytes, int index) override {
    DeviceGuard guard(index);
    OPSNN_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, cuda::current_stream()));
  }
  void strided_copy(void* destination, DType destination_dtype, const void* source, DType source_dtype, int dim,
                    const int64_t* shape, const int64_t* source_strides, int index) override {
    OPSNN_CHECK(dim <= cuda::kMaxDims, "strided copy of a ", dim, "-dimensional tensor on the GPU (at most ",
                cuda::kMaxDims, ")");
    DeviceGuard guard(index);
    cuda::launch_strided_copy(destination, destination_dtype, source, source_dtype, dim, shape, source_strides,
                              cuda::current_stream());
    OPSNN_CUDA_CHECK(cudaGetLastError());
  }
  void fill(void* destination, DType dtype, double value, int64_t count, int index) override {
    DeviceGuard guard(index);
    cuda::launch_fill(destination, dtype, value, count, cuda::current_stream());
    OPSNN_CUDA_CHECK(cudaGetLastError());
  }
  void accumulate(void* destination, const void* source, DType dtype, double alpha, int64_t count, int index) override {
    OPSNN_CHECK_AS(TypeError, is_floating(dtype), "gradient accumulation needs a floating dtype, got ",
                   dtype_name(dtype));
    DeviceGuard guard(index);
    cuda::launch_accumulate(destination, source, dtype, alpha, count, cuda::current_stream());
    OPSNN_CUDA_CHECK(cudaGetLastError());
  }
  bool accumulate_converted(void* destination, DType destination_dtype, const void* source, DType source_dtype,
                            int64_t count, int index) override {
    DeviceGuard guard(index);
    if (!cuda::launch_accumulate_converted(destination, destination_dtype, source, source_dtype, count,
                                           cuda::current_stream()))
      return false;
    OPSNN_CUDA_CHECK(cudaGetLastError());
    return true;
  }
  void synchronize(int index) override {
    DeviceGuard guard(index);
    OPSNN_CUDA_CHECK(cudaDeviceSynchronize());
  }
  int device_count() override {
    std::call_once(counted_, [this] {
      int count = 0;
      if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // no driver or no GPU: report zero devices
        count = 0;
      }
      pool_configured_.assign(static_cast<size_t>(count), false);
      count_ = count;
    });
    return count_;
  }
  void* allocate_pinned_host(size_t bytes) override {
    // Portable: pinned for every device, not only the one current on the allocating thread.
    void* pointer = nullptr;
    cudaError_t status = cudaHostAlloc(&pointer, bytes, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw Error(
          detail::concat("cannot page-lock ", bytes, " bytes of host memory (", cudaGetErrorString(status), ")"));
    }
    return pointer;
  }
  void deallocate_pinned_host(void* pointer) override { cudaFreeHost(pointer); }
  bool is_page_locked(const void* host_pointer) override {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, host_pointer) != cudaSuccess) {
      cudaGetLastError();  // before CUDA 11, pageable memory was an error rather than "unregistered"
      return false;
    }
    return attributes.type == cudaMemoryTypeHost;
  }
  std::unique_ptr<CopyStream> make_copy_stream(int index) override { return cuda::make_copy_stream(index); }
  std::unique_ptr<CapturedGraph> capture_graph(const std::function<void()>& work, int index) override {
    configure_pool(index);
    return cuda::capture_graph(index, work);
  }

 private:
  void configure_pool(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pool_configured_[static_cast<size_t>(index)]) return;
    cudaMemPool_t pool;
    OPSNN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, index));
    uint64_t keep_all = std::numeric_limits<uint64_t>::max();
    OPSNN_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
    pool_configured_[static_cast<size_t>(index)] = true;
  }

  std::once_flag counted_;
  int count_ = 0;
  std::mutex mutex_;
  std::vector<bool> pool_configured_;
};

}  // namespace

std::unique_ptr<DeviceServices> make_cuda_services() { return std::make_unique<CudaServices>(); }

}  // namespace opsnn
