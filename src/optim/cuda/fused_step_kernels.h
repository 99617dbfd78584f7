// Launchers of the fused-step kernels over a device arena (fused_step_kernels.cu), with plain-C++
// signatures for cuda_stepper.cpp. Every scalar a kernel needs comes from device memory (StepScalars,
// StepState) or from the constant StepConstants argument, so the sequence can be captured in a graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "opsnn/core/dtype.h"
#include "opsnn/optim/device_step.h"

namespace opsnn::optim::cuda {

// LAMB's work queue (see launch_lamb): items[t] = tile * 2 + phase (0: moments and norms, 1: update),
// taken in ticket order; per segment, how many phase-1 tiles are done, whether its trust ratio is ready
// and the ratio. The prologue resets the counters.
struct LambQueue {
  const int32_t* items = nullptr;
  int32_t item_count = 0;
  int32_t* next_item = nullptr;
  int32_t* segment_done = nullptr;
  int32_t* segment_ready = nullptr;
  float* trust = nullptr;
};

// Device pointers of one stepper (all allocated once).
struct FusedBuffers {
  DeviceArena arena;                   // arena.chunks is replaced by the device tiles below
  const ArenaChunk* chunks = nullptr;  // tiles (see kMinTileElements), never crossing a segment
  int32_t chunk_count = 0;
  int multiprocessors = 1;
  const DeviceSegment* segments = nullptr;
  int32_t segment_count = 0;
  double* chunk_sums[3] = {nullptr, nullptr, nullptr};    // per chunk: g^2 (LAMB: also r^2, p^2)
  double* segment_sums[3] = {nullptr, nullptr, nullptr};  // per segment, summed in a fixed order
  double* segment_grad_sums = nullptr;                    // per segment: unscaled g^2 of the last step
  const double* sparse_sums = nullptr;                    // per segment: host-computed sums of sparse segments
  const DeviceSparseStats* sparse_stats = nullptr;        // or per segment: where the device left them
  LambQueue lamb;                                         // LAMB only
  StepState* state = nullptr;
  StepScalars* scalars = nullptr;
  DeviceStepReport* report = nullptr;
};

// Elements per work item of the passes: the stepper splits the arena's chunks into tiles of 2048 (one
// 8-wide vector per thread of a block) up to 16384 elements, doubling while an arena would still give
// more than 128 tiles per SM: small arenas get many tiles to share evenly among the blocks of a
// grid-stride pass, large ones fewer per-tile reductions.
inline constexpr int64_t kMinTileElements = 2048;
inline constexpr int64_t kMaxTileElements = 16384;
// LAMB's tiles start larger: each is two work items with a ticket, a segment count and (phase 2) a
// readiness check, overhead that 2048-element items (one vector per thread) do not amortise (4096:
// 0.27 ms for ResNet-50 shapes on an H200, vs 0.29 with 2048 and 0.30 with 16384).
inline constexpr int64_t kMinLambTileElements = 4096;
// Pass 1: chunk_sums[0][c] = sum of g^2 over chunk c (double), inf/NaN when it holds inf/NaN.
void launch_grad_sum_of_squares(const FusedBuffers& b, cudaStream_t stream);
// segment_sums[a][s] = sum of chunk_sums[a] over segment s's chunks (fixed order), for a < arrays.
void launch_segment_sums(const FusedBuffers& b, int arrays, cudaStream_t stream);
// The tiny step. two_pass: reads segment_sums[0] (gradient statistics of this step) and decides clip and
// skip; otherwise (single pass) prepares an always-applied step whose statistics the epilogue reads.
void launch_step_prologue(const FusedBuffers& b, const StepConstants& k, bool two_pass, cudaStream_t stream);
// Adam/AdamW or SGD (k.rule) over every dense chunk; with_stats also writes chunk_sums[0] (g^2).
void launch_update(const FusedBuffers& b, const StepConstants& k, bool with_stats, cudaStream_t stream);
// LAMB in one kernel over b.lamb's items: phase 1 (moments; chunk_sums[1] = r^2, chunk_sums[2] = p^2,
// with_stats also chunk_sums[0] = g^2), per-segment trust ratios (segment_sums[1], [2]) as soon as a
// segment's phase 1 is complete, phase 2 (parameter update). Needs the prologue's reset first.
void launch_lamb(const FusedBuffers& b, const StepConstants& k, bool with_stats, cudaStream_t stream);
// Sharded LAMB (between its two launches): every segment's trust ratio from segment_sums[1] (r^2) and
// segment_sums[2] (p^2), which hold the sums over the ranks; marks each ready.
void launch_lamb_trust_ratios(const FusedBuffers& b, const StepConstants& k, cudaStream_t stream);
// The tiny epilogue: parameter check -> monitor flags; single pass: also the gradient statistics
// (segment_sums[0] must hold this step's g^2 sums).
void launch_step_epilogue(const FusedBuffers& b, const StepConstants& k, bool single_pass, cudaStream_t stream);

}  // namespace opsnn::optim::cuda
