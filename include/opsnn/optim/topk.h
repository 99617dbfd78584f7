// Top-k gradient sparsification (Lin et al. 2018, "Deep Gradient Compression", ICLR; src/optim/README.md)
// over the optimizer's flat fp32 gradient arena: importance scores, a sampled threshold with an exact
// fallback, residual accumulation (error feedback), momentum correction with momentum-factor masking, a
// density warm-up schedule and optional lr compensation. The sparse gradient is written back in place so
// the fused optimizer step runs unchanged; the selected (index, value) pairs are kept for a later exchange.
#pragma once

#include <cstdint>
#include <vector>

#include "opsnn/core/tensor.h"
#include "opsnn/optim/topk_rules.h"

namespace opsnn::optim {

struct TopKOptions {
  // Fraction of the n elements sent per step once the warm-up is over, in (0, 1].
  double density = 0.01;
  // Fraction of the scores sampled to estimate the threshold, in (0, 1]. The sample is raised to hold at
  // least min_sample_selected expected selections (a 1% sample of 1e6 values at density 0.1% would hold
  // only 10); when that makes the sample half of n or more, exact selection is cheaper and used directly.
  // With 256 expected selections the count a sampled threshold selects has a relative spread of about
  // 1/sqrt(256) = 6%, so the 20% tolerance below rarely sends a step to the exact fallback.
  double sample_fraction = 0.01;
  int64_t min_sample_selected = 256;
  // The sampled threshold is kept when it selects between (1 - tolerance)*k and (1 + tolerance)*k elements
  // (k = round(density * n)); otherwise (or when it selects nothing) selection falls back to exact top-k.
  double tolerance = 0.2;
  // Decay of the EMA of g^2 that estimates each element's gradient variance, in [0, 1).
  double variance_beta = 0.999;
  // DGC momentum correction (eq. 4 and 5): accumulate the local velocity u = momentum*u + g instead of g,
  // and zero both u and the accumulator where sent (momentum-factor masking). The optimizer must then run
  // plain SGD without its own momentum: the sent values already carry it.
  bool momentum_correction = false;
  double momentum = 0.9;  // in [0, 1); used with momentum_correction
  // Density warm-up (DGC section 3.3): epoch e < warmup_densities.size() uses warmup_densities[e];
  // otherwise, with warmup_epochs > 0, epoch e < warmup_epochs uses the exponential decay
  // warmup_start_density * (density / warmup_start_density)^(e / warmup_epochs). Later epochs use
  // `density`. DGC's schedule is the list {0.25, 0.0625, 0.015625, 0.00390625} with density 0.001.
  std::vector<double> warmup_densities;
  double warmup_start_density = 0.25;
  int64_t warmup_epochs = 0;
  // lr compensation. An element sent every T steps on average (T ~ 1 / density) carries the sum of the T
  // gradients it waited for: their mean applied with the lr enlarged T-fold, which makes up for the less
  // frequent update (the linear scaling rule for a T-fold batch, Goyal et al. 2017) and moves it as far as
  // dense SGD would have (the memory of Stich et al. 2018, "Sparsified SGD with Memory"). That is exact
  // only at a constant lr: values waiting in the accumulator were produced under earlier learning rates.
  // With this on, every step first rescales the accumulator by lr_previous / lr_current, so it always
  // holds sum_s(lr_s * g_s) / lr_current: applying a sent value at the current lr moves the parameter
  // exactly sum_s lr_s * g_s, however the schedule changed the lr meanwhile. With a constant lr the factor
  // is 1 and nothing changes (an extra 1 / density factor on top would count the waiting steps twice).
  bool lr_compensation = false;
  // Local gradient clipping (DGC section 3.3): before a step's gradient joins the accumulation, scale it
  // down to this L2 norm over the whole arena when it is larger (0: off). With data parallelism over N
  // ranks each rank clips to local_clip_norm / sqrt(N), so that the sum of the ranks' gradients keeps
  // about this norm (GradientSparsifier::set_ranks). Without it, large accumulated values at high
  // sparsity can make one step's sent update blow the network up.
  double local_clip_norm = 0.0;
  // Seed of the threshold sample; the same seed, inputs and step count give the same mask on any rank.
  uint64_t seed = 0;

  // Throws ConfigError naming the first bad setting and its accepted range.
  void validate() const;
  // The density used during `epoch` (0-based).
  double density_for_epoch(int64_t epoch) const;
};

// What one sparsify() call did.
struct TopKStepReport {
  double target_density = 0.0;         // density_for_epoch(epoch)
  int64_t target_count = 0;            // k = round(target_density * n), at least 1
  int64_t selected_count = 0;          // elements sent this step
  double achieved_density = 0.0;       // selected_count / n
  float threshold = 0.0f;              // scores >= threshold were sent (ties at exact selection: lowest indices)
  int64_t sample_size = 0;             // scores sampled (0 when selection went straight to exact)
  bool exact_selection = false;        // the sampled threshold was off (or not tried) and exact top-k was used
  float accumulator_lr_factor = 1.0f;  // lr compensation factor applied to the accumulator this step
};

// The sparsifier's state (save it with the optimizer's state to resume bit-identically).
struct TopKState {
  std::vector<float> accumulator;  // residual of unsent values (g_acc), or the velocity sum v_acc with
                                   // momentum correction
  std::vector<float> velocity;     // u, momentum correction only (empty otherwise)
  std::vector<float> variance;     // EMA of g^2 (no bias correction: it scales every score alike)
  int64_t steps = 0;               // sparsify() calls so far; selects the threshold sample
  float previous_lr = 0.0f;        // lr of the last step (lr compensation), 0 before the first
};

// One device type's top-k kernels (the sparsifier dispatches on its device through this table, no
// #ifdef). n-sized arrays are device pointers; the small results the host selection logic needs
// (sample scores, per-block counts) come back in host arrays.
struct TopKKernels {
  // topk_accumulate_element over [0, n); velocity is null without momentum correction.
  void (*accumulate)(const float* gradient, float* accumulator, float* variance, float* velocity, int64_t n,
                     const TopKAccumulateScalars& scalars) = nullptr;
  // scores[d] = topk_score_squared at topk_sample_position(seed, step, d, n), d < sample_size (host array).
  void (*sample_scores)(uint64_t seed, int64_t step, int64_t n, int64_t sample_size, const float* accumulator,
                        const float* variance, double* scores) = nullptr;
  // Per block of kTopKBlock elements: squared scores > threshold and == threshold (host arrays).
  void (*count_blocks)(const float* accumulator, const float* variance, int64_t n, double threshold,
                       int64_t* block_greater, int64_t* block_ties) = nullptr;
  // With NaN scores counted as 0: the k-th and (k+1)-th largest squared scores (1 <= k < n).
  void (*kth_largest)(const float* accumulator, const float* variance, int64_t n, int64_t k, double* kth,
                      double* next) = nullptr;
  // Index of the tie (squared score == threshold) of 0-based rank `rank` in [begin, end); it exists.
  int64_t (*tie_position)(const float* accumulator, const float* variance, int64_t begin, int64_t end, double threshold,
                          int64_t rank) = nullptr;
  // Selected: score^2 > threshold, or == threshold at an index < tie_cutoff. Writes the sparse gradient,
  // clears accumulator (and velocity) where selected, and the pairs of block b from block_first[b] (host
  // array of blocks + 1 entries) in index order.
  void (*write_selected)(float* gradient, float* accumulator, const float* variance, float* velocity, int64_t n,
                         double threshold, int64_t tie_cutoff, const int64_t* block_first, int64_t* selected_indices,
                         float* selected_values) = nullptr;
  // Density 1: gradient = accumulator, all pairs, accumulator (and velocity) = 0.
  void (*send_everything)(float* gradient, float* accumulator, float* velocity, int64_t n, int64_t* selected_indices,
                          float* selected_values) = nullptr;
};

void register_topk_kernels(DeviceType type, const TopKKernels& kernels);
// The kernels of device's type; DeviceError naming the device when none are registered.
const TopKKernels& topk_kernels(Device device);

class TopKSparsifier {
 public:
  // n: elements of the gradient arena. Validates the options. With a CUDA `device` the state buffers and
  // the selected pairs live there and sparsify() takes gradients on that device; the selection is the
  // CPU's, element for element (same sample, same scores in double, same tie rule).
  TopKSparsifier(int64_t n, TopKOptions options, Device device = kCPU);

  // One step on the gradient arena `gradient` (n fp32 values, overwritten by the sparse gradient).
  // Per element i, with g = gradient[i] * grad_multiplier (pass 1/loss_scale times a clip factor, or 1):
  //   variance_i = beta * variance_i + (1 - beta) * g^2
  //   momentum correction: u_i = momentum * u_i + g;  acc_i = acc_i * f + u_i
  //   otherwise:                                      acc_i = acc_i * f + g
  //   (f = lr_previous / lr with lr compensation, else 1)
  //   score_i = |acc_i| * sqrt(variance_i)     -- the value that would be sent, weighted by its typical size
  //   (ranked as score_i^2 = acc_i^2 * variance_i in double: the same order)
  // The k = round(density_for_epoch(epoch) * n) highest scores are selected (scores of 0 never are;
  // density 1 sends everything). Selected: gradient[i] = acc_i, then acc_i = 0 (and u_i = 0: momentum-
  // factor masking). Not selected: gradient[i] = 0 and acc_i is kept for later steps (error feedback).
  // Call it only for steps that are applied (after the non-finite check), with lr > 0 when lr
  // compensation is on. The mask depends only on the inputs, the state and the seed, not on threads.
  // `gradient` is a host array (CPU sparsifier only).
  TopKStepReport sparsify(float* gradient, int64_t epoch, float grad_multiplier = 1.0f, float lr = 0.0f);
  // The same on an f32 contiguous tensor of n elements on the sparsifier's device.
  TopKStepReport sparsify(const Tensor& gradient, int64_t epoch, float grad_multiplier = 1.0f, float lr = 0.0f);

  // The pairs sent by the last step, in ascending index order (for the distributed exchange); on a CUDA
  // sparsifier these copy the device pairs to the host on first use after a step.
  const std::vector<int64_t>& selected_indices() const;
  const std::vector<float>& selected_values() const;
  // The same pairs where they live (i64 and f32 [selected count]), without a copy; CPU: host tensors.
  Tensor selected_indices_tensor() const;
  Tensor selected_values_tensor() const;

  int64_t size() const { return n_; }
  Device device() const { return device_; }
  const TopKOptions& options() const { return options_; }
  // On a CUDA sparsifier this copies the device buffers to the host (a checkpoint, a test).
  // sparsify() calls so far (what state().steps holds), without copying a device's buffers to the host.
  int64_t steps() const { return state_.steps; }
  const TopKState& state() const;
  // Restores a saved state (checkpoint resume); throws ShapeError when its buffers do not fit n and the
  // momentum-correction setting.
  void load_state(TopKState state);

  // Position of sample draw `draw` of step `step` in [0, n): the 64 bits x of Philox(seed, step * 2^32 + draw)
  // mapped to floor(x * n / 2^64).
  static int64_t sample_position(uint64_t seed, int64_t step, int64_t draw, int64_t n);
  // Sample size used for a target density (0 when selection is exact without sampling).
  int64_t sample_size_for(double density) const;

 private:
  // Selected: score > threshold, or score == threshold for the first tie_quota such elements in index
  // order. threshold >= 0 always, so a zero score is never selected.
  struct Selection {
    double threshold = 0.0;  // on score^2
    int64_t tie_quota = 0;
  };
  // Draws this step's sample positions and groups them by block (sample_by_block_, block_sample_first_).
  void draw_sample(int64_t sample_size);
  // Updates variance, velocity and accumulator; with_sample: also scores the sampled positions.
  void accumulate(const float* gradient, float grad_multiplier, float accumulator_factor, bool with_sample);
  void send_everything(float* gradient);
  // Per block of kBlock elements: how many squared scores are > threshold and == threshold.
  void count_blocks(double threshold);
  // From the block counts: each block's first output slot and tie allowance; returns the selected total.
  int64_t plan_blocks(const Selection& selection);
  bool try_sampled_selection(double density, int64_t k, Selection& selection);
  Selection exact_selection(int64_t k);
  void write_selected(float* gradient, const Selection& selection);
  // score^2 = acc^2 * variance in double: the same order as the score, without a sqrt in the loops (a
  // vectorised sqrtf needs -fno-math-errno) and without fp32 overflow or underflow of the square.
  double score_squared(int64_t i) const;

  // Density, k and the lr compensation of a step (advances previous_lr).
  TopKStepReport begin_step(int64_t epoch, float lr);
  TopKAccumulateScalars accumulate_scalars(float grad_multiplier, float accumulator_factor) const;
  TopKStepReport sparsify_on_device(float* gradient, int64_t epoch, float grad_multiplier, float lr);
  // Ties at indices below this are selected (device selection): from the block tie allowances.
  int64_t tie_cutoff(double threshold);
  void ensure_device_pairs(int64_t count);

  int64_t n_;
  TopKOptions options_;
  Device device_;
  mutable TopKState state_;  // on a CUDA sparsifier the buffers are a host copy made by state()
  mutable std::vector<int64_t> selected_indices_;
  mutable std::vector<float> selected_values_;
  // CUDA sparsifier: the state buffers and the last step's pairs (capacity >= selected_count_).
  Tensor device_accumulator_, device_variance_, device_velocity_;
  Tensor device_selected_indices_, device_selected_values_;
  int64_t selected_count_ = 0;
  mutable bool host_pairs_current_ = true;
  std::vector<double> scratch_scores_, sample_scores_;
  std::vector<int64_t> sample_positions_, sample_by_block_, block_sample_first_;
  std::vector<int64_t> block_greater_, block_ties_, block_first_, block_tie_allowance_;
};

}  // namespace opsnn::optim
