// Launchers of the fused-step kernels over a device arena (fused_step_kernels.cu), with plain-C++
// signatures for cuda_stepper.cpp. Every scalar a kernel needs comes from device memory (StepScalars,
// StepState) or from the constant StepConstants argument, so the sequence can be captured in a graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "opsnn/core/dtype.h"
#include "opsnn/optim/device_step.h"

namespace opsnn::optim::cuda {

// LAMB's work queues (see launch_lamb). Phase 1 (moments and norms) takes the tiles in arena order:
// ticket next_phase1 = tile, no table needed. Phase 2 (update) takes phase2_items in order (ticket
// next_phase2): per segment in arena order, that segment's tiles last-first, so it starts on the tiles
// phase 1 wrote most recently. Per segment: how many phase-1 tiles are done, whether its trust ratio is
// ready, and the ratio. The prologue resets the counters and flags.
struct LambPhase2Item {
  int32_t tile;
  int32_t segment;  // the tile's segment, so a readiness check needs no second lookup
};
// How blocks claim phase-2 items. EXPERIMENT: remove after measuring, keeping two_queue only
// (OPSNN_LAMB_SCHEDULER selects one when a stepper is built: two-queue, two-queue-cas or windows).
//   two_queue:     atomicAdd on next_phase2 once the head's segment is ready; an item that turns out not
//                  ready is kept aside while the block does phase-1 work;
//   two_queue_cas: atomicCAS(next_phase2, head, head + 1) on a ready head, retried on failure;
//   windows:       the previous single queue (window_items, ticket next_phase1), phase2_items unused.
enum class LambScheduler : int32_t { two_queue, two_queue_cas, windows };
struct LambQueue {
  LambScheduler scheduler = LambScheduler::two_queue;
  const LambPhase2Item* phase2_items = nullptr;  // chunk_count items (two-queue schedulers)
  const int32_t* window_items = nullptr;         // EXPERIMENT (windows): tile * 2 + phase
  int32_t window_item_count = 0;
  int32_t* next_phase1 = nullptr;
  int32_t* next_phase2 = nullptr;
  int32_t* segment_done = nullptr;
  int32_t* segment_ready = nullptr;
  float* trust = nullptr;
};

// Device pointers of one stepper (all allocated once).
struct FusedBuffers {
  DeviceArena arena;                 // arena.chunks is replaced by the device tiles below
  const ArenaChunk* chunks = nullptr;  // tiles (see kMinTileElements), never crossing a segment
  int32_t chunk_count = 0;
  int multiprocessors = 1;
  const DeviceSegment* segments = nullptr;
  int32_t segment_count = 0;
  double* chunk_sums[3] = {nullptr, nullptr, nullptr};    // per chunk: g^2 (LAMB: also r^2, p^2)
  double* segment_sums[3] = {nullptr, nullptr, nullptr};  // per segment, summed in a fixed order
  double* segment_grad_sums = nullptr;           // per segment: unscaled g^2 of the last step
  const double* sparse_sums = nullptr;           // per segment: host-computed sums of sparse segments
  LambQueue lamb;                                // LAMB only
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
// Streaming multiprocessors of a device; passes size their grids as SMs x resident blocks per SM.
int multiprocessor_count(int device);

// Pass 1: chunk_sums[0][c] = sum of g^2 over chunk c (double), inf/NaN when it holds inf/NaN.
void launch_grad_sum_of_squares(const FusedBuffers& b, cudaStream_t stream);
// segment_sums[a][s] = sum of chunk_sums[a] over segment s's chunks (fixed order), for a < arrays.
void launch_segment_sums(const FusedBuffers& b, int arrays, cudaStream_t stream);
// The tiny step. two_pass: reads segment_sums[0] (gradient statistics of this step) and decides clip and
// skip; otherwise (single pass) prepares an always-applied step whose statistics the epilogue reads.
void launch_step_prologue(const FusedBuffers& b, const StepConstants& k, bool two_pass, cudaStream_t stream);
// Adam/AdamW or SGD (k.rule) over every dense chunk; with_stats also writes chunk_sums[0] (g^2).
void launch_update(const FusedBuffers& b, const StepConstants& k, bool with_stats, cudaStream_t stream);
// LAMB in one kernel over b.lamb's queues: phase 1 (moments; chunk_sums[1] = r^2, chunk_sums[2] = p^2,
// with_stats also chunk_sums[0] = g^2), per-segment trust ratios (segment_sums[1], [2]) as soon as a
// segment's phase 1 is complete, phase 2 (parameter update). Needs the prologue's reset first.
void launch_lamb(const FusedBuffers& b, const StepConstants& k, bool with_stats, cudaStream_t stream);
// The tiny epilogue: parameter check -> monitor flags; single pass: also the gradient statistics
// (segment_sums[0] must hold this step's g^2 sums).
void launch_step_epilogue(const FusedBuffers& b, const StepConstants& k, bool single_pass, cudaStream_t stream);

}  // namespace opsnn::optim::cuda
