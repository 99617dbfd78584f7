// What the cuDNN algorithm search of src/ops/cuda/conv.cpp chose for a convolution, and the setting of
// its channel padding (few-channel inputs such as an RGB stem zero-padded to the tensor-core granule),
// for the conv benchmark and the tests to read and steer. Plain C++: no cuDNN headers needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "opsnn/core/tensor.h"
#include "opsnn/ops/backend.h"

namespace opsnn::ops {

enum class ConvDirection : uint8_t { forward, backward_input, backward_weight };

// Whether a convolution whose input channels are not a multiple of the tensor-core granule (4 for f32
// under tf32 math, 8 for f16/bf16; strict f32 never pads) may run on channel-padded copies. measured:
// only when cudnnFind's time for the padded operands plus the measured pad/crop copies beats the plain
// convolution's; always / never: force one variant (tests, benchmark comparisons). Process-wide, and
// part of the algorithm cache key, so changing it triggers a fresh search per shape.
enum class ConvChannelPadding : uint8_t { measured, always, never };
void set_conv_channel_padding(ConvChannelPadding padding);
ConvChannelPadding conv_channel_padding();

struct ConvAlgorithmChoice {
  int algorithm = 0;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t of the variant that runs
  int math = 0;       // the cudnnMathType_t it was measured with
  size_t workspace_bytes = 0;
  int64_t padded_channels = 0;  // input channels the chosen variant runs with; 0 for the plain convolution
  float plain_ms = 0.0f;        // cudnnFind's time of the fastest plain algorithm
  float padded_ms = -1.0f;      // same with padding, pad/crop copies included; negative when not tried
};

// One line for reports, e.g. "algo 1 tensor-op on 4 ch (padded 0.41 ms vs plain 4.30 ms)".
std::string describe(const ConvAlgorithmChoice& choice);

// The cached choice for one convolution (input [N, C, H, W], weight [K, C, R, S] as the caller passes
// them, the current math and padding settings), or nothing before the first call with that shape.
std::optional<ConvAlgorithmChoice> cached_conv_algorithm(ConvDirection direction, Device device, const Shape& input,
                                                         const Shape& weight, const Conv2dGeometry& geometry,
                                                         DType dtype);

}  // namespace opsnn::ops
