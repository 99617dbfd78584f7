// Top-k gradient sparsification (DGC, Lin et al., ICLR 2018): accumulate, score, pick a threshold from a
// seeded sample (exact nth_element fallback), write the sparse gradient in place. OpenMP over fixed-size
// blocks so counts, ties and the (index, value) list come out the same for any thread count.
#include "opsnn/optim/topk.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "opsnn/core/rng.h"

namespace opsnn::optim {
namespace {

// Block of elements counted and written by one task; fixed, so the output order never depends on threads.
constexpr int64_t kBlock = int64_t{1} << 16;

void check_unit_interval(double value, bool zero_allowed, bool one_allowed, const char* name) {
  bool low_ok = zero_allowed ? value >= 0.0 : value > 0.0;
  bool high_ok = one_allowed ? value <= 1.0 : value < 1.0;
  OPSNN_CHECK_AS(ConfigError, low_ok && high_ok, "top-k sparsification: ", name, " = ", value, " is outside ",
                 zero_allowed ? "[0, " : "(0, ", one_allowed ? "1]" : "1)");
}

}  // namespace

void TopKOptions::validate() const {
  check_unit_interval(density, false, true, "topk.density");
  check_unit_interval(sample_fraction, false, true, "topk.sample_fraction");
  check_unit_interval(tolerance, true, false, "topk.tolerance");
  check_unit_interval(variance_beta, true, false, "topk.variance_beta");
  check_unit_interval(momentum, true, false, "topk.momentum");
  check_unit_interval(warmup_start_density, false, true, "topk.warmup_start_density");
  OPSNN_CHECK_AS(ConfigError, min_sample_selected >= 1, "top-k sparsification: topk.min_sample_selected = ",
                 min_sample_selected, " must be at least 1");
  OPSNN_CHECK_AS(ConfigError, warmup_epochs >= 0, "top-k sparsification: topk.warmup_epochs = ", warmup_epochs,
                 " must be non-negative");
  OPSNN_CHECK_AS(ConfigError, warmup_densities.empty() || warmup_epochs == 0,
                 "top-k sparsification: set either topk.warmup_densities (a list per epoch) or topk.warmup_epochs "
                 "(exponential from topk.warmup_start_density), not both");
  for (size_t e = 0; e < warmup_densities.size(); ++e) {
    OPSNN_CHECK_AS(ConfigError, warmup_densities[e] > 0.0 && warmup_densities[e] <= 1.0,
                   "top-k sparsification: topk.warmup_densities[", e, "] = ", warmup_densities[e],
                   " is outside (0, 1]");
  }
}

double TopKOptions::density_for_epoch(int64_t epoch) const {
  OPSNN_CHECK(epoch >= 0, "top-k sparsification: epoch must be non-negative, got ", epoch);
  if (epoch < static_cast<int64_t>(warmup_densities.size())) return warmup_densities[static_cast<size_t>(epoch)];
  if (epoch < warmup_epochs) {
    double progress = static_cast<double>(epoch) / static_cast<double>(warmup_epochs);
    return warmup_start_density * std::pow(density / warmup_start_density, progress);
  }
  return density;
}

TopKSparsifier::TopKSparsifier(int64_t n, TopKOptions options) : n_(n), options_(std::move(options)) {
  options_.validate();
  OPSNN_CHECK_AS(ShapeError, n > 0, "TopKSparsifier: the gradient must hold at least one element, got ", n);
  state_.accumulator.assign(static_cast<size_t>(n), 0.0f);
  state_.variance.assign(static_cast<size_t>(n), 0.0f);
  if (options_.momentum_correction) state_.velocity.assign(static_cast<size_t>(n), 0.0f);
  const size_t blocks = static_cast<size_t>((n + kBlock - 1) / kBlock);
  block_greater_.resize(blocks);
  block_ties_.resize(blocks);
  block_first_.resize(blocks + 1);
  block_tie_allowance_.resize(blocks);
  block_sample_first_.resize(blocks + 1);
}

void TopKSparsifier::load_state(TopKState state) {
  const size_t n = static_cast<size_t>(n_);
  const size_t velocity_size = options_.momentum_correction ? n : 0;
  OPSNN_CHECK_AS(ShapeError,
                 state.accumulator.size() == n && state.variance.size() == n && state.velocity.size() == velocity_size,
                 "TopKSparsifier::load_state: buffers of ", state.accumulator.size(), " / ", state.variance.size(),
                 " / ", state.velocity.size(), " values (accumulator / variance / velocity) do not fit ", n_,
                 " elements with momentum correction ", options_.momentum_correction ? "on" : "off");
  OPSNN_CHECK(state.steps >= 0, "TopKSparsifier::load_state: negative step count ", state.steps);
  state_ = std::move(state);
}

int64_t TopKSparsifier::sample_position(uint64_t seed, int64_t step, int64_t draw, int64_t n) {
  Philox4 bits = philox4x32_10(seed, (static_cast<uint64_t>(step) << 32) + static_cast<uint64_t>(draw));
  uint64_t wide = (static_cast<uint64_t>(bits.v[0]) << 32) | bits.v[1];
  // floor(wide * n / 2^64): uniform in [0, n) without a 64-bit division.
  return static_cast<int64_t>((static_cast<unsigned __int128>(wide) * static_cast<uint64_t>(n)) >> 64);
}

int64_t TopKSparsifier::sample_size_for(double density) const {
  double wanted = std::max(std::ceil(options_.sample_fraction * static_cast<double>(n_)),
                           std::ceil(static_cast<double>(options_.min_sample_selected) / density));
  if (wanted * 2.0 >= static_cast<double>(n_)) return 0;
  return static_cast<int64_t>(wanted);
}

double TopKSparsifier::score_squared(int64_t i) const {
  const double value = state_.accumulator[static_cast<size_t>(i)];
  return value * value * static_cast<double>(state_.variance[static_cast<size_t>(i)]);
}

void TopKSparsifier::draw_sample(int64_t sample_size) {
  // Draw the positions, then group them by block so accumulate() can read each block's samples while
  // the block is still in cache (random reads over the whole arena would cost one cache miss each).
  sample_positions_.resize(static_cast<size_t>(sample_size));
  sample_scores_.resize(static_cast<size_t>(sample_size));
  const int64_t step = state_.steps;
#pragma omp parallel for schedule(static)
  for (int64_t d = 0; d < sample_size; ++d) sample_positions_[d] = sample_position(options_.seed, step, d, n_);
  std::fill(block_sample_first_.begin(), block_sample_first_.end(), 0);
  for (int64_t position : sample_positions_) ++block_sample_first_[static_cast<size_t>(position / kBlock) + 1];
  for (size_t b = 1; b < block_sample_first_.size(); ++b) block_sample_first_[b] += block_sample_first_[b - 1];
  sample_by_block_.resize(static_cast<size_t>(sample_size));
  std::vector<int64_t> cursor(block_sample_first_.begin(), block_sample_first_.end() - 1);
  for (int64_t position : sample_positions_) sample_by_block_[static_cast<size_t>(cursor[position / kBlock]++)] = position;
}

void TopKSparsifier::accumulate(const float* gradient, float grad_multiplier, float accumulator_factor,
                                bool with_sample) {
  const float beta = static_cast<float>(options_.variance_beta);
  const float one_minus_beta = 1.0f - beta;
  const float momentum = static_cast<float>(options_.momentum);
  float* accumulator = state_.accumulator.data();
  float* variance = state_.variance.data();
  float* velocity = state_.velocity.data();
  const bool momentum_correction = options_.momentum_correction;
  const int64_t blocks = static_cast<int64_t>(block_greater_.size());
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(n_, begin + kBlock);
    if (momentum_correction) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        float g = gradient[i] * grad_multiplier;
        variance[i] = beta * variance[i] + one_minus_beta * g * g;
        velocity[i] = momentum * velocity[i] + g;                            // DGC eq. 5: u = m*u + g
        accumulator[i] = accumulator[i] * accumulator_factor + velocity[i];  // v_acc += u
      }
    } else {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        float g = gradient[i] * grad_multiplier;
        variance[i] = beta * variance[i] + one_minus_beta * g * g;
        accumulator[i] = accumulator[i] * accumulator_factor + g;  // error feedback: residual += g
      }
    }
    if (with_sample) {
      for (int64_t slot = block_sample_first_[b]; slot < block_sample_first_[b + 1]; ++slot)
        sample_scores_[slot] = score_squared(sample_by_block_[slot]);
    }
  }
}

void TopKSparsifier::send_everything(float* gradient) {
  float* accumulator = state_.accumulator.data();
  selected_indices_.resize(static_cast<size_t>(n_));
  selected_values_.resize(static_cast<size_t>(n_));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n_; ++i) {
    gradient[i] = accumulator[i];
    selected_indices_[i] = i;
    selected_values_[i] = accumulator[i];
    accumulator[i] = 0.0f;
  }
  if (options_.momentum_correction) std::fill(state_.velocity.begin(), state_.velocity.end(), 0.0f);
}

void TopKSparsifier::count_blocks(double threshold) {
  const float* accumulator = state_.accumulator.data();
  const float* variance = state_.variance.data();
  const int64_t blocks = static_cast<int64_t>(block_greater_.size());
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(n_, begin + kBlock);
    int64_t greater = 0, ties = 0;
#pragma omp simd reduction(+ : greater, ties)
    for (int64_t i = begin; i < end; ++i) {
      const double value = accumulator[i];
      const double s = value * value * static_cast<double>(variance[i]);  // as score_squared()
      greater += s > threshold;
      ties += s == threshold;
    }
    block_greater_[b] = greater;
    block_ties_[b] = ties;
  }
}

int64_t TopKSparsifier::plan_blocks(const Selection& selection) {
  int64_t ties_left = selection.tie_quota, total = 0;
  for (size_t b = 0; b < block_greater_.size(); ++b) {
    block_tie_allowance_[b] = std::min(ties_left, block_ties_[b]);
    ties_left -= block_tie_allowance_[b];
    block_first_[b] = total;
    total += block_greater_[b] + block_tie_allowance_[b];
  }
  block_first_[block_greater_.size()] = total;
  return total;
}

bool TopKSparsifier::try_sampled_selection(double density, int64_t k, Selection& selection) {
  const int64_t sample_size = static_cast<int64_t>(sample_scores_.size());
  // The sample's own k-th largest, k scaled to the sample: an estimate of the population's threshold.
  const int64_t sample_k = std::clamp<int64_t>(std::llround(density * static_cast<double>(sample_size)), 1, sample_size);
  std::nth_element(sample_scores_.begin(), sample_scores_.begin() + (sample_k - 1), sample_scores_.end(),
                   std::greater<double>());
  const double threshold = sample_scores_[static_cast<size_t>(sample_k - 1)];
  if (!(threshold > 0.0)) return false;  // the sample saw mostly zero scores: it cannot place the threshold
  count_blocks(threshold);
  selection = {threshold, std::numeric_limits<int64_t>::max()};
  const int64_t count = plan_blocks(selection);
  const double tolerance = options_.tolerance * static_cast<double>(k);
  return count > 0 && std::fabs(static_cast<double>(count - k)) <= tolerance;
}

TopKSparsifier::Selection TopKSparsifier::exact_selection(int64_t k) {
  scratch_scores_.resize(static_cast<size_t>(n_));
  const float* accumulator = state_.accumulator.data();
  const float* variance = state_.variance.data();
  double* scores = scratch_scores_.data();
  int64_t positive = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : positive)
  for (int64_t i = 0; i < n_; ++i) {
    const double value = accumulator[i];
    double s = value * value * static_cast<double>(variance[i]);  // as score_squared()
    s = s > 0.0 ? s : 0.0;  // NaN (non-finite input) counts as 0 so nth_element sees a strict order
    scores[i] = s;
    positive += s > 0.0;
  }
  Selection selection;
  if (positive <= k) {  // fewer candidates than k: send every non-zero score
    selection = {0.0, 0};
  } else {
    std::nth_element(scratch_scores_.begin(), scratch_scores_.begin() + (k - 1), scratch_scores_.end(),
                     std::greater<double>());
    selection.threshold = scratch_scores_[static_cast<size_t>(k - 1)];
  }
  count_blocks(selection.threshold);
  if (selection.threshold > 0.0) {
    int64_t greater = 0;
    for (int64_t count : block_greater_) greater += count;
    selection.tie_quota = k - greater;  // ties at the k-th score: the lowest indices fill the quota
  }
  plan_blocks(selection);
  return selection;
}

void TopKSparsifier::write_selected(float* gradient, const Selection& selection) {
  const int64_t blocks = static_cast<int64_t>(block_greater_.size());
  const int64_t total = block_first_[static_cast<size_t>(blocks)];
  selected_indices_.resize(static_cast<size_t>(total));
  selected_values_.resize(static_cast<size_t>(total));
  float* accumulator = state_.accumulator.data();
  const float* variance = state_.variance.data();
  float* velocity = options_.momentum_correction ? state_.velocity.data() : nullptr;
  const double threshold = selection.threshold;
  // Branch-free masking of a block where every tie is selected (inclusive) or none is.
  auto mask_block = [&](int64_t begin, int64_t end, bool inclusive) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float value = accumulator[i];
      const double s = static_cast<double>(value) * value * static_cast<double>(variance[i]);  // score_squared()
      const bool selected = inclusive ? s >= threshold : s > threshold;
      gradient[i] = selected ? value : 0.0f;
      accumulator[i] = selected ? 0.0f : value;
    }
    if (velocity) {
      // Momentum-factor masking (DGC section 3.2): a sent value is never 0 (its score is > 0), so the
      // written gradient marks the selected elements.
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) velocity[i] = gradient[i] != 0.0f ? 0.0f : velocity[i];
    }
  };
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(n_, begin + kBlock);
    const int64_t allowance = block_tie_allowance_[b];
    if (allowance == 0 || allowance == block_ties_[b]) {
      mask_block(begin, end, allowance > 0);
    } else {
      // The one block where the tie quota runs out: ties are taken in index order.
      int64_t ties_left = allowance;
      for (int64_t i = begin; i < end; ++i) {
        const double s = score_squared(i);
        const bool selected = s > threshold || (s == threshold && ties_left-- > 0);
        gradient[i] = selected ? accumulator[i] : 0.0f;
        if (selected) {
          accumulator[i] = 0.0f;
          if (velocity) velocity[i] = 0.0f;
        }
      }
    }
    // Collect the pairs: the written gradient is non-zero exactly at the selected elements. Most groups
    // of 16 hold none at low density, and one vector test skips them.
    int64_t slot = block_first_[b];
    for (int64_t group = begin; group < end; group += 16) {
      const int64_t group_end = std::min(end, group + 16);
      int any_selected = 0;
#pragma omp simd reduction(| : any_selected)
      for (int64_t i = group; i < group_end; ++i) any_selected |= gradient[i] != 0.0f;
      if (!any_selected) continue;
      for (int64_t i = group; i < group_end; ++i) {
        if (gradient[i] != 0.0f) {
          selected_indices_[slot] = i;
          selected_values_[slot] = gradient[i];
          ++slot;
        }
      }
    }
  }
}

TopKStepReport TopKSparsifier::sparsify(float* gradient, int64_t epoch, float grad_multiplier, float lr) {
  OPSNN_CHECK(gradient != nullptr, "TopKSparsifier::sparsify: null gradient");
  TopKStepReport report;
  const double density = options_.density_for_epoch(epoch);
  const int64_t k = std::clamp<int64_t>(std::llround(density * static_cast<double>(n_)), 1, n_);
  report.target_density = density;
  report.target_count = k;
  if (options_.lr_compensation) {
    OPSNN_CHECK_AS(ConfigError, lr > 0.0f, "TopKSparsifier::sparsify: lr compensation needs the step's lr > 0, got ",
                   lr);
    report.accumulator_lr_factor = state_.previous_lr > 0.0f ? state_.previous_lr / lr : 1.0f;
    state_.previous_lr = lr;
  }

  report.sample_size = k == n_ ? 0 : sample_size_for(density);
  if (report.sample_size > 0) draw_sample(report.sample_size);
  accumulate(gradient, grad_multiplier, report.accumulator_lr_factor, report.sample_size > 0);
  if (k == n_) {
    send_everything(gradient);
    report.exact_selection = true;
  } else {
    Selection selection;
    if (report.sample_size == 0 || !try_sampled_selection(density, k, selection)) {
      report.exact_selection = true;
      selection = exact_selection(k);
    }
    report.threshold = static_cast<float>(std::sqrt(selection.threshold));
    write_selected(gradient, selection);
  }
  ++state_.steps;
  report.selected_count = static_cast<int64_t>(selected_indices_.size());
  report.achieved_density = static_cast<double>(report.selected_count) / static_cast<double>(n_);
  return report;
}

TopKStepReport TopKSparsifier::sparsify(const Tensor& gradient, int64_t epoch, float grad_multiplier, float lr) {
  OPSNN_CHECK_AS(DeviceError, gradient.device() == kCPU, "TopKSparsifier::sparsify: the gradient must be on the CPU, got ",
                 gradient.str());
  OPSNN_CHECK_AS(TypeError, gradient.dtype() == DType::f32, "TopKSparsifier::sparsify: the gradient must be f32, got ",
                 gradient.str());
  OPSNN_CHECK_AS(ShapeError, gradient.is_contiguous() && gradient.numel() == n_, "TopKSparsifier::sparsify: the gradient ",
                 gradient.str(), " must be contiguous with ", n_, " elements");
  return sparsify(gradient.data<float>(), epoch, grad_multiplier, lr);
}

}  // namespace opsnn::optim
