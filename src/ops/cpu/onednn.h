// fp32 convolutions and matrix products on the CPU through oneDNN (Intel's deep-learning primitives
// library, the one PyTorch's CPU path uses), in the plain layouts the CPU backend keeps (NCHW activations,
// OIHW weights, row-major matrices). Which engine runs an op - oneDNN or Eigen (conv.cpp's im2col path and
// gemm.cpp), the reference the tests compare against - follows OPSNN_CPU_ENGINE (src/ops/cpu/README.md).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

#include "opsnn/ops/backend.h"

namespace opsnn::ops::onednn {

// Built with oneDNN (OPSNN_WITH_ONEDNN).
bool built();

// OPSNN_CPU_ENGINE: eigen keeps every op on Eigen; onednn (the default when built with oneDNN) sends every
// fp32 convolution and matrix product oneDNN runs there; auto times both engines on the first call of each
// shape in the process and keeps the faster (the fastest, but two processes may choose differently, so
// results need not repeat bit for bit across runs). Read once; a bad value is a ConfigError naming it.
enum class Policy : int { eigen, onednn, timed };
Policy policy();
// The OPSNN_CPU_ENGINE value that selects a policy ("eigen", "onednn", "auto").
const char* policy_name(Policy policy);
// Replaces the policy for the rest of the process (tests and benchmarks compare the engines); onednn and
// timed need a build with oneDNN (UsageError otherwise).
void set_policy(Policy policy);

// An op's shape as a key of the auto policy's choices (the first value names the op).
using ShapeKey = std::array<int64_t, 15>;
// Policy::timed: the engine chosen for a shape (1 oneDNN, 0 Eigen, -1 not chosen yet).
int chosen(const ShapeKey& key);
void choose(const ShapeKey& key, bool onednn);

// Runs with_eigen() or with_onednn() (both writing the whole output) as policy() and the choice for `key`
// say; auto times both on a shape's first call (the second run of each, after any set-up) and leaves the
// chosen engine's result.
template <typename Eigen, typename OneDnn>
void run_on_engine(const ShapeKey& key, Eigen&& with_eigen, OneDnn&& with_onednn) {
  const Policy engine = policy();
  if (engine == Policy::eigen) return with_eigen();
  if (engine == Policy::onednn) return with_onednn();
  const int choice = chosen(key);
  if (choice >= 0) return choice == 1 ? with_onednn() : with_eigen();
  auto seconds = [](auto&& run) {
    run();
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double eigen_seconds = seconds(with_eigen);
  const double onednn_seconds = seconds(with_onednn);
  choose(key, onednn_seconds < eigen_seconds);
  if (!(onednn_seconds < eigen_seconds)) with_eigen();
}

// ---- convolutions ----
struct ConvDims {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0, out_h = 0, out_w = 0;
  Conv2dGeometry geometry;
};
enum class Direction : int { forward = 0, backward_data = 1, backward_weights = 2 };
ShapeKey conv_key(const ConvDims& dims, Direction direction);

// Whether oneDNN has more than its reference implementation for this convolution in every direction
// (and padding that gives the output size exactly); Eigen runs the others.
bool conv_supported(const ConvDims& dims);
// y = conv(x, w) + b (b may be null).
void conv_forward(const ConvDims& dims, const float* x, const float* w, const float* b, float* y);
// dx = the input gradient of dy.
void conv_backward_data(const ConvDims& dims, const float* dy, const float* w, float* dx);
// dw = the weight gradient (dy against x).
void conv_backward_weights(const ConvDims& dims, const float* dy, const float* x, float* dw);

// ---- matrix products ----
// out (m x n, row stride ldo) = alpha * op(a) * op(b) + beta * out, row-major, op transposing when asked.
void sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* out, int64_t ldo);

}  // namespace opsnn::ops::onednn
