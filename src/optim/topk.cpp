// Top-k gradient sparsification (DGC, Lin et al., ICLR 2018): accumulate, score, pick a threshold from a
// seeded sample (exact nth_element fallback), write the sparse gradient in place. OpenMP over fixed-size
// blocks so counts, ties and the (index, value) list come out the same for any thread count.
#include "opsnn/optim/topk.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <utility>

#include "opsnn/core/rng.h"
#include "optim/device_table.h"

namespace opsnn::optim {
namespace {

// Block of elements counted and written by one task; fixed, so the output order never depends on threads.
constexpr int64_t kBlock = kTopKBlock;

DeviceTable<TopKKernels>& topk_table() {
  static DeviceTable<TopKKernels> table;
  return table;
}

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
  OPSNN_CHECK_AS(ConfigError, local_clip_norm >= 0.0 && std::isfinite(local_clip_norm),
                 "top-k sparsification: topk.local_clip_norm = ", local_clip_norm,
                 " must be a finite number >= 0 (0 = off)");
  OPSNN_CHECK_AS(ConfigError, min_sample_selected >= 1,
                 "top-k sparsification: topk.min_sample_selected = ", min_sample_selected, " must be at least 1");
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

void register_topk_kernels(DeviceType type, const TopKKernels& kernels) { topk_table().set(type, kernels); }

const TopKKernels& topk_kernels(Device device) {
  const TopKKernels* kernels = topk_table().find(device.type);
  OPSNN_CHECK_AS(DeviceError, kernels != nullptr, "no top-k sparsification kernels for ", device.str(),
                 " in this build; keep the gradients on the cpu");
  return *kernels;
}

TopKSparsifier::TopKSparsifier(int64_t n, TopKOptions options, Device device)
    : n_(n), options_(std::move(options)), device_(device) {
  options_.validate();
  OPSNN_CHECK_AS(ShapeError, n > 0, "TopKSparsifier: the gradient must hold at least one element, got ", n);
  if (device_.is_cpu()) {
    state_.accumulator.assign(static_cast<size_t>(n), 0.0f);
    state_.variance.assign(static_cast<size_t>(n), 0.0f);
    if (options_.momentum_correction) state_.velocity.assign(static_cast<size_t>(n), 0.0f);
  } else {
    topk_kernels(device_);  // fails early where the device has no kernels
    device_accumulator_ = Tensor::zeros({n}, DType::f32, device_);
    device_variance_ = Tensor::zeros({n}, DType::f32, device_);
    if (options_.momentum_correction) device_velocity_ = Tensor::zeros({n}, DType::f32, device_);
  }
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
  if (!device_.is_cpu()) {
    device_accumulator_.copy_(Tensor::from_vector(state_.accumulator, {n_}));
    device_variance_.copy_(Tensor::from_vector(state_.variance, {n_}));
    if (options_.momentum_correction) device_velocity_.copy_(Tensor::from_vector(state_.velocity, {n_}));
  }
}

const TopKState& TopKSparsifier::state() const {
  if (!device_.is_cpu()) {
    state_.accumulator = device_accumulator_.to_vector<float>();
    state_.variance = device_variance_.to_vector<float>();
    state_.velocity = options_.momentum_correction ? device_velocity_.to_vector<float>() : std::vector<float>();
  }
  return state_;
}

const std::vector<int64_t>& TopKSparsifier::selected_indices() const {
  if (!host_pairs_current_) {
    selected_indices_ = selected_indices_tensor().to_vector<int64_t>();
    selected_values_ = selected_values_tensor().to_vector<float>();
    host_pairs_current_ = true;
  }
  return selected_indices_;
}

const std::vector<float>& TopKSparsifier::selected_values() const {
  selected_indices();
  return selected_values_;
}

Tensor TopKSparsifier::selected_indices_tensor() const {
  if (device_.is_cpu()) return Tensor::from_vector(selected_indices_, {static_cast<int64_t>(selected_indices_.size())});
  if (selected_count_ == 0) return Tensor::empty({0}, DType::i64, device_);
  return device_selected_indices_.slice(0, 0, selected_count_);
}

Tensor TopKSparsifier::selected_values_tensor() const {
  if (device_.is_cpu()) return Tensor::from_vector(selected_values_, {static_cast<int64_t>(selected_values_.size())});
  if (selected_count_ == 0) return Tensor::empty({0}, DType::f32, device_);
  return device_selected_values_.slice(0, 0, selected_count_);
}

int64_t TopKSparsifier::sample_position(uint64_t seed, int64_t step, int64_t draw, int64_t n) {
  return topk_sample_position(seed, step, draw, n);
}

int64_t TopKSparsifier::sample_size_for(double density) const {
  double wanted = std::max(std::ceil(options_.sample_fraction * static_cast<double>(n_)),
                           std::ceil(static_cast<double>(options_.min_sample_selected) / density));
  if (wanted * 2.0 >= static_cast<double>(n_)) return 0;
  return static_cast<int64_t>(wanted);
}

double TopKSparsifier::score_squared(int64_t i) const {
  return topk_score_squared(state_.accumulator[static_cast<size_t>(i)], state_.variance[static_cast<size_t>(i)]);
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
  for (int64_t position : sample_positions_)
    sample_by_block_[static_cast<size_t>(cursor[position / kBlock]++)] = position;
}

void TopKSparsifier::accumulate(const float* gradient, float grad_multiplier, float accumulator_factor,
                                bool with_sample) {
  const TopKAccumulateScalars scalars = accumulate_scalars(grad_multiplier, accumulator_factor);
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
      for (int64_t i = begin; i < end; ++i)
        topk_accumulate_element(gradient[i], variance[i], velocity[i], accumulator[i], scalars);
    } else {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) topk_accumulate_element(gradient[i], variance[i], accumulator[i], scalars);
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
  if (!device_.is_cpu()) {
    topk_kernels(device_).count_blocks(device_accumulator_.data<float>(), device_variance_.data<float>(), n_, threshold,
                                       block_greater_.data(), block_ties_.data());
    return;
  }
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
  const int64_t sample_k =
      std::clamp<int64_t>(std::llround(density * static_cast<double>(sample_size)), 1, sample_size);
  // NaN scores (non-finite inputs) count as 0, as in exact_selection(): with NaN, std::greater is no strict
  // weak order, and nth_element's answer would depend on the order of the sample, which the CPU (grouped
  // by block) and the CUDA sparsifier (draw order) do not share.
  for (double& score : sample_scores_) score = score > 0.0 ? score : 0.0;
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
  if (!device_.is_cpu()) {
    // The same selection as below: k < n here, and more than k positive scores exactly when the (k+1)-th
    // largest is positive.
    double kth = 0.0, next = 0.0;
    topk_kernels(device_).kth_largest(device_accumulator_.data<float>(), device_variance_.data<float>(), n_, k, &kth,
                                      &next);
    Selection selection{next > 0.0 ? kth : 0.0, 0};
    count_blocks(selection.threshold);
    if (selection.threshold > 0.0) {
      int64_t greater = 0;
      for (int64_t count : block_greater_) greater += count;
      selection.tie_quota = k - greater;
    }
    plan_blocks(selection);
    return selection;
  }
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
  OPSNN_CHECK_AS(DeviceError, device_.is_cpu(), "TopKSparsifier::sparsify: this sparsifier lives on ", device_.str(),
                 "; pass the gradient as a tensor on that device");
  TopKStepReport report = begin_step(epoch, lr);
  const double density = report.target_density;
  const int64_t k = report.target_count;
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
  OPSNN_CHECK_AS(DeviceError, gradient.device() == device_, "TopKSparsifier::sparsify: the gradient must be on ",
                 device_.str(), " with the sparsifier's state, got ", gradient.str());
  OPSNN_CHECK_AS(TypeError, gradient.dtype() == DType::f32, "TopKSparsifier::sparsify: the gradient must be f32, got ",
                 gradient.str());
  OPSNN_CHECK_AS(ShapeError, gradient.is_contiguous() && gradient.numel() == n_,
                 "TopKSparsifier::sparsify: the gradient ", gradient.str(), " must be contiguous with ", n_,
                 " elements");
  if (!device_.is_cpu()) return sparsify_on_device(gradient.data<float>(), epoch, grad_multiplier, lr);
  return sparsify(gradient.data<float>(), epoch, grad_multiplier, lr);
}

TopKStepReport TopKSparsifier::begin_step(int64_t epoch, float lr) {
  TopKStepReport report;
  const double density = options_.density_for_epoch(epoch);
  report.target_density = density;
  report.target_count = std::clamp<int64_t>(std::llround(density * static_cast<double>(n_)), 1, n_);
  if (options_.lr_compensation) {
    OPSNN_CHECK_AS(ConfigError, lr > 0.0f, "TopKSparsifier::sparsify: lr compensation needs the step's lr > 0, got ",
                   lr);
    report.accumulator_lr_factor = state_.previous_lr > 0.0f ? state_.previous_lr / lr : 1.0f;
    state_.previous_lr = lr;
  }
  return report;
}

TopKAccumulateScalars TopKSparsifier::accumulate_scalars(float grad_multiplier, float accumulator_factor) const {
  TopKAccumulateScalars scalars;
  scalars.beta = static_cast<float>(options_.variance_beta);
  scalars.one_minus_beta = 1.0f - scalars.beta;
  scalars.momentum = static_cast<float>(options_.momentum);
  scalars.accumulator_factor = accumulator_factor;
  scalars.grad_multiplier = grad_multiplier;
  return scalars;
}

void TopKSparsifier::ensure_device_pairs(int64_t count) {
  if (device_selected_indices_.defined() && device_selected_indices_.numel() >= count) return;
  device_selected_indices_ = Tensor::empty({count}, DType::i64, device_);
  device_selected_values_ = Tensor::empty({count}, DType::f32, device_);
}

int64_t TopKSparsifier::tie_cutoff(double threshold) {
  // Allowances are granted greedily in block order, so the selected ties are a prefix in index order: the
  // first block not granted all its ties holds the cut.
  for (size_t b = 0; b < block_ties_.size(); ++b) {
    if (block_tie_allowance_[b] == block_ties_[b]) continue;
    const int64_t begin = static_cast<int64_t>(b) * kBlock, end = std::min(n_, begin + kBlock);
    if (block_tie_allowance_[b] == 0) return begin;
    return topk_kernels(device_).tie_position(device_accumulator_.data<float>(), device_variance_.data<float>(), begin,
                                              end, threshold, block_tie_allowance_[b] - 1) +
           1;
  }
  return n_;
}

// The CPU's sparsify() step for step, with the n-sized passes on the device: the same sample, counts, plan
// and tie rule, so the same selection.
TopKStepReport TopKSparsifier::sparsify_on_device(float* gradient, int64_t epoch, float grad_multiplier, float lr) {
  const TopKKernels& kernels = topk_kernels(device_);
  TopKStepReport report = begin_step(epoch, lr);
  const double density = report.target_density;
  const int64_t k = report.target_count;
  float* accumulator = device_accumulator_.data<float>();
  float* variance = device_variance_.data<float>();
  float* velocity = options_.momentum_correction ? device_velocity_.data<float>() : nullptr;
  kernels.accumulate(gradient, accumulator, variance, velocity, n_,
                     accumulate_scalars(grad_multiplier, report.accumulator_lr_factor));
  if (k == n_) {
    ensure_device_pairs(n_);
    kernels.send_everything(gradient, accumulator, velocity, n_, device_selected_indices_.data<int64_t>(),
                            device_selected_values_.data<float>());
    report.exact_selection = true;
    selected_count_ = n_;
  } else {
    report.sample_size = sample_size_for(density);
    Selection selection;
    bool sampled = false;
    if (report.sample_size > 0) {
      sample_scores_.resize(static_cast<size_t>(report.sample_size));
      kernels.sample_scores(options_.seed, state_.steps, n_, report.sample_size, accumulator, variance,
                            sample_scores_.data());
      sampled = try_sampled_selection(density, k, selection);
    }
    if (!sampled) {
      report.exact_selection = true;
      selection = exact_selection(k);
    }
    report.threshold = static_cast<float>(std::sqrt(selection.threshold));
    selected_count_ = block_first_.back();
    ensure_device_pairs(std::max<int64_t>(selected_count_, 1));
    kernels.write_selected(gradient, accumulator, variance, velocity, n_, selection.threshold,
                           tie_cutoff(selection.threshold), block_first_.data(),
                           device_selected_indices_.data<int64_t>(), device_selected_values_.data<float>());
  }
  host_pairs_current_ = false;
  ++state_.steps;
  report.selected_count = selected_count_;
  report.achieved_density = static_cast<double>(report.selected_count) / static_cast<double>(n_);
  return report;
}

}  // namespace opsnn::optim
