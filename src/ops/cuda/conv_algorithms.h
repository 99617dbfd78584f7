// What the convolution search of src/ops/cuda/conv_search.cpp chose for a convolution (a cuDNN algorithm on the
// convolution as given, or one of two lowerings), and the process-wide lowering policy, for the conv
// benchmark and the tests to read and steer. Plain C++: no cuDNN headers needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "opsnn/core/tensor.h"
#include "opsnn/ops/backend.h"

namespace opsnn::ops {

enum class ConvDirection : uint8_t { forward, backward_input, backward_weight };

// How a convolution runs. cudnn: cuDNN's fastest algorithm on the operands as given. Two lowerings for
// shapes where NCHW cuDNN falls back to slow legacy kernels:
//   subsampled: a 1x1 convolution with stride > 1 and no padding is the stride-1 1x1 convolution of
//     the input subsampled x[:, :, ::stride_h, ::stride_w] (the input gradient: zero except at the sampled
//     positions); cuDNN runs the stride-1 problem, one copy kernel gathers / scatters.
//   gemm: input channels not a multiple of the tensor-core granule (4 for f32 under tf32 math, 8
//     otherwise; the RGB stem), and 1x1 stride-1 convolutions: im2col into per-image column matrices
//     (rows C*R*S padded to a multiple of 8; a 1x1 stride-1 input whose C needs no padding is used as it
//     lies) and batched cuBLAS GEMMs; the weight gradient sums per-image partials in a fixed order, the
//     input gradient gathers the column gradients back (col2im). Channels-last 1x1 stride-1 convolutions
//     too: the NHWC input is an [N*H*W, C] matrix, so forward and input gradient are one GEMM each and
//     the weight gradient per-image GEMMs summed the same way.
enum class ConvLowering : uint8_t { cudnn, subsampled, gemm };

// measured: where a lowering applies, it runs only when its measured time (its copies included) beats
// cudnnFind's best for the convolution as given; always / never: force it / cuDNN alone (tests,
// benchmark comparisons). Part of the algorithm cache key, so changing it searches again per shape.
enum class ConvLoweringPolicy : uint8_t { measured, always, never };
void set_conv_lowering_policy(ConvLoweringPolicy policy);
ConvLoweringPolicy conv_lowering_policy();

// ops::set_conv_deterministic (backend.h), part of the algorithm cache key: with it (the default) cuDNN
// algorithms are chosen among those cuDNN marks deterministic; the lowerings always are. Where cuDNN
// offers none for a shape and direction, an applicable lowering runs, else the fastest algorithm (its
// choice then says deterministic = false).

// Scratch bound of the gemm lowering (column buffers plus weight-gradient partials): the batch runs in
// chunks of as many images as fit (at least one). Default 512 MiB; tests lower it to cover chunking.
void set_conv_column_budget(size_t bytes);
size_t conv_column_budget();

// The lowering that applies to a convolution of this input / weight shape and geometry in dtype under
// the current f32 math setting, or ConvLowering::cudnn when none does. For channels_last only a 1x1
// stride-1 unpadded convolution has one (gemm: plain GEMMs on the NHWC data); the others are NCHW-only.
ConvLowering applicable_lowering(const Shape& input, const Shape& weight, const Conv2dGeometry& geometry, DType dtype);

struct ConvAlgorithmChoice {
  ConvLowering lowering = ConvLowering::cudnn;  // what runs
  int algorithm =
      0;         // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t of the cuDNN call (the stride-1 one when subsampled)
  int math = 0;  // the cudnnMathType_t it was measured with
  size_t workspace_bytes = 0;
  float cudnn_ms =
      0.0f;  // cudnnFind's time of the fastest algorithm on the convolution as given; negative when not searched
  float lowered_ms = -1.0f;         // the lowering's time, its copies included; negative when not tried
  bool deterministic = true;        // whether what runs is deterministic (see set_conv_deterministic)
  bool cudnn_deterministic = true;  // whether cuDNN's best (cudnn_ms) is
};

// Forgets every decision made or loaded so far, as in a fresh process (tests).
void clear_conv_algorithm_cache();

// One line for reports, e.g. "gemm lowering (0.41 ms vs cudnn 4.30 ms)" or "algo 1 tensor-op".
std::string describe(const ConvAlgorithmChoice& choice);

// The cached choice for one convolution (input [N, C, H, W], or [N, H, W, C] with
// geometry.channels_last, weight [K, C, R, S] as the caller passes them, the current math and lowering settings), or
// nothing before the first call with that shape.
std::optional<ConvAlgorithmChoice> cached_conv_algorithm(ConvDirection direction, Device device, const Shape& input,
                                                         const Shape& weight, const Conv2dGeometry& geometry,
                                                         DType dtype);

}  // namespace opsnn::ops
