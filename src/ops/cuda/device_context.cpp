// Lazily created cuBLAS and cuDNN handles per CUDA device, and the argument checks shared by the CUDA
// Backend methods.
#include "ops/cuda/device_context.h"

#include <climits>
#include <memory>
#include <mutex>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/current_stream.h"

namespace opsnn::cuda {
namespace {

struct HandleRegistry {
  std::mutex mutex;
  std::vector<std::unique_ptr<LibraryHandles>> by_device;
};

// Binds both handles to `stream`; cuBLAS's workspace is given again, as cublasSetStream resets it.
void bind(LibraryHandles& library, cudaStream_t stream) {
  OPSNN_CUBLAS_CHECK(cublasSetStream(library.cublas, stream));
  OPSNN_CUBLAS_CHECK(cublasSetWorkspace(library.cublas, library.cublas_workspace, library.cublas_workspace_bytes));
  OPSNN_CUDNN_CHECK(cudnnSetStream(library.cudnn, stream));
  library.stream = stream;
}

HandleRegistry& registry() {
  // Never destroyed: handles outlive every static tensor, and destroying them after the CUDA runtime
  // has shut down at exit would fail.
  static HandleRegistry* instance = new HandleRegistry();
  return *instance;
}

}  // namespace

LibraryHandles& handles_for(int index) {
  HandleRegistry& handles = registry();
  std::lock_guard<std::mutex> lock(handles.mutex);
  if (handles.by_device.size() <= static_cast<size_t>(index)) handles.by_device.resize(static_cast<size_t>(index) + 1);
  std::unique_ptr<LibraryHandles>& slot = handles.by_device[static_cast<size_t>(index)];
  if (!slot) {
    auto created = std::make_unique<LibraryHandles>();
    OPSNN_CUBLAS_CHECK(cublasCreate(&created->cublas));
    // cuBLAS's own workspace pool may allocate inside a graph capture; a buffer of the size cuBLAS
    // recommends (32 MiB from Hopper on, 4 MiB before) is given instead (bind). Never freed, like the
    // handles.
    int major = 0;
    OPSNN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
    created->cublas_workspace_bytes = (major >= 9 ? size_t{32} : size_t{4}) << 20;
    OPSNN_CUDA_CHECK(cudaMalloc(&created->cublas_workspace, created->cublas_workspace_bytes));
    // Default math: no TF32 tensor ops for f32 GEMMs through cublasSgemm, so they keep full f32 products
    // and match the CPU to rounding; the tf32 setting asks for TF32 per call (gemm.cpp).
    OPSNN_CUBLAS_CHECK(cublasSetMathMode(created->cublas, CUBLAS_DEFAULT_MATH));
    OPSNN_CUBLAS_CHECK(cublasSetPointerMode(created->cublas, CUBLAS_POINTER_MODE_HOST));
    OPSNN_CUDNN_CHECK(cudnnCreate(&created->cudnn));
    bind(*created, current_stream());
    slot = std::move(created);
  }
  if (slot->stream != current_stream()) bind(*slot, current_stream());  // a capture began or ended here
  return *slot;
}

void require_f32(const Tensor& t, const char* kernel) {
  OPSNN_CHECK_AS(TypeError, t.dtype() == DType::f32, "CUDA ", kernel, ": dtype ", dtype_name(t.dtype()),
                 " is not supported (supported: f32; mixed precision computes this in f32)");
}

void require_floating(const Tensor& t, const char* kernel) {
  const DType dtype = t.dtype();
  OPSNN_CHECK_AS(TypeError, dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, "CUDA ", kernel,
                 ": dtype ", dtype_name(dtype), " is not supported (supported: f32, f16, bf16)");
}

void require_on(const Tensor& t, Device device, const char* kernel) {
  OPSNN_CHECK_AS(DeviceError, t.device() == device, "CUDA ", kernel, ": operand ", t.str(), " is not on ",
                 device.str());
}

int checked_int(int64_t value, const char* kernel) {
  OPSNN_CHECK_AS(ShapeError, value >= 0 && value <= INT_MAX, "CUDA ", kernel, ": size ", value,
                 " exceeds the 32-bit limit of cuBLAS/cuDNN");
  return static_cast<int>(value);
}

}  // namespace opsnn::cuda
