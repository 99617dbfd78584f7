// The fused-step kernels over a flat parameter arena (src/optim/README.md), with plain-C++
// signatures over raw arrays so the CPU implementation (src/optim/cpu/) and a CUDA one share this
// interface; each device registers its table and the optimizer dispatches on the parameters' device.
// Work is split into chunks that never cross a segment (tensor); every reduction writes one partial per
// chunk, which the caller sums in chunk order, so results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "opsnn/core/device.h"
#include "opsnn/core/dtype.h"
#include "opsnn/optim/builtin_list.h"
#include "opsnn/optim/rules.h"

namespace opsnn::optim {

// The device step's update rules: the three with kernels of their own, then one per element-wise rule of
// builtin_list.h (which the generic passes run).
#define OPSNN_RULE_ENUMERATOR(name, Rule) name,
enum class UpdateRule : int32_t { sgd = 0, adam = 1, lamb = 2, OPSNN_ELEMENTWISE_RULES(OPSNN_RULE_ENUMERATOR) };
#undef OPSNN_RULE_ENUMERATOR

inline constexpr int kMaxOptimizerStates = 3;  // Adam with amsgrad: exp_avg, exp_avg_sq, max_exp_avg_sq

// Elements [begin, end) of the arena, all inside segment `segment`.
struct ArenaChunk {
  int64_t begin = 0;
  int64_t end = 0;
  int32_t segment = 0;
};

// Per-segment values of one step: the group's scheduled lr, its weight decay (0 when off), LAMB's ratio.
struct SegmentStepScalars {
  float lr = 0.0f;
  float weight_decay = 0.0f;
  float trust_ratio = 1.0f;
};

// Raw pointers into the arena (on its device) and the chunks a dense pass covers.
struct ArenaView {
  float* params = nullptr;
  float* grads = nullptr;
  void* states[kMaxOptimizerStates] = {nullptr, nullptr, nullptr};
  DType state_dtype = DType::f32;
  const ArenaChunk* chunks = nullptr;
  int64_t chunk_count = 0;
};

// Each kernel writes one value per chunk. A "param check" is the sum of p_new * 0: 0 when every updated
// parameter of the chunk is finite, NaN otherwise (one add per element, no branch in the SIMD loop).
// chunk_grad_sums, when not null, gets what grad_sum_of_squares would write (the same bits) from the update
// pass itself: the single-pass step, for steps whose update does not depend on the gradient norm.
struct FusedStepKernels {
  // chunk_sums[c] = sum of g^2 over chunk c (double accumulation); inf/NaN when the chunk holds inf/NaN.
  void (*grad_sum_of_squares)(const ArenaView& arena, double* chunk_sums) = nullptr;
  // chunk_checks[c] = 0 when every gradient of chunk c is finite, NaN otherwise (sum of g * 0).
  void (*grad_finite_check)(const ArenaView& arena, float* chunk_checks) = nullptr;
  // Adam/AdamW: states[0] exp_avg, states[1] exp_avg_sq, states[2] max_exp_avg_sq (amsgrad).
  void (*adam_update)(const ArenaView& arena, const AdamScalars& base, const SegmentStepScalars* segments,
                      float grad_multiplier, float* chunk_param_check, double* chunk_grad_sums) = nullptr;
  // SGD: states[0] the momentum buffer (unused without momentum).
  void (*sgd_update)(const ArenaView& arena, const SgdScalars& base, const SegmentStepScalars* segments,
                     float grad_multiplier, float* chunk_param_check, double* chunk_grad_sums) = nullptr;
  // LAMB phase 1: moments updated; per chunk the sums of r^2 and p^2 for the per-segment trust ratios.
  void (*lamb_phase1)(const ArenaView& arena, const AdamScalars& base, const SegmentStepScalars* segments,
                      float grad_multiplier, double* chunk_update_sum_squares, double* chunk_param_sum_squares,
                      double* chunk_grad_sums) = nullptr;
  // LAMB phase 2: p -= lr * trust * r, r recomputed from the moments.
  void (*lamb_phase2)(const ArenaView& arena, const AdamScalars& base, const SegmentStepScalars* segments,
                      float* chunk_param_check) = nullptr;
  // An element-wise rule of builtin_list.h (rule names it): states[0..Rule::kStates) in the rule's order.
  void (*elementwise_update)(const ArenaView& arena, UpdateRule rule, const AdamScalars& base,
                             const SegmentStepScalars* segments, float grad_multiplier, float* chunk_param_check,
                             double* chunk_grad_sums) = nullptr;
};

void register_fused_step_kernels(DeviceType type, const FusedStepKernels& kernels);
// The kernels of device's type; DeviceError naming the device when none are registered.
const FusedStepKernels& fused_step_kernels(Device device);

// The CPU table (src/optim/cpu/), registered by default.
const FusedStepKernels& cpu_fused_step_kernels();

}  // namespace opsnn::optim
