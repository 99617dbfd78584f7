// Per-device state of the CUDA compute backend: the cuBLAS and cuDNN handles (created once per device,
// lazily, bound to the thread's current stream, with TF32 tensor-op math off so f32 results match the
// CPU), and the checks every CUDA Backend method starts with.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include "opsnn/core/half.h"
#include "opsnn/core/tensor.h"

namespace opsnn::cuda {

struct LibraryHandles {
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  void* cublas_workspace = nullptr;  // cuBLAS's workspace, ours (cublasSetWorkspace)
  size_t cublas_workspace_bytes = 0;
  cudaStream_t stream = nullptr;  // the stream both handles are bound to
};

// The handles of device `index`, bound to the thread's current stream (core/cuda/current_stream.h); the
// caller has made that device current (DeviceGuard).
LibraryHandles& handles_for(int index);

// Throws TypeError unless t is f32 (the loss and embedding kernels, which mixed precision keeps in f32).
void require_f32(const Tensor& t, const char* kernel);
// Throws TypeError unless t is f32, f16 or bf16 (the kernels with low-precision variants).
void require_floating(const Tensor& t, const char* kernel);

// Calls fn with a value of the storage type of `dtype` (float, Half or BFloat16), so one generic lambda
// launches the matching kernel instantiation; other dtypes throw TypeError naming the kernel.
template <typename Fn>
void dispatch_floating(DType dtype, const char* kernel, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::f16:
      fn(Half{});
      return;
    case DType::bf16:
      fn(BFloat16{});
      return;
    default:
      break;
  }
  throw TypeError(
      detail::concat("CUDA ", kernel, ": dtype ", dtype_name(dtype), " is not supported (supported: f32, f16, bf16)"));
}
// Throws unless t lives on a CUDA device (and on `device` when given).
void require_on(const Tensor& t, Device device, const char* kernel);
// Throws ShapeError when a dimension exceeds what a 32-bit library parameter can hold.
int checked_int(int64_t value, const char* kernel);

}  // namespace opsnn::cuda
