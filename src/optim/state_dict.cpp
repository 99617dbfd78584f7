// Optimizer::state_dict / load_state_dict: per-parameter states by "<param>.<state>" and the step-state
// scalars as 0-d tensors, so a checkpoint can store everything as named tensors (safetensors).
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "opsnn/core/error.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/optim/step_extensions.h"

namespace opsnn::optim {
namespace {

// A step-state field: its key, dtype, how to read and write it as a double (exact for these ranges), and
// the values a loaded one may take (whole numbers for the integer fields): checked before converting, so
// 1e20 cannot become INT_MIN or an infinite loss scale a float that skips every step.
struct ScalarField {
  const char* key;
  DType dtype;
  double (*get)(const StepState&);
  void (*set)(StepState&, double);
  double low, high;
};

constexpr double kMaxCount = 9007199254740992.0;  // 2^53: every integer up to here is exact in a double
constexpr double kMaxInt32 = 2147483647.0;

const ScalarField kScalarFields[] = {
    {"step_state.step", DType::i64, [](const StepState& s) { return static_cast<double>(s.step); },
     [](StepState& s, double v) { s.step = static_cast<int64_t>(v); }, 0.0, kMaxCount},
    {"step_state.skipped_steps", DType::i64, [](const StepState& s) { return static_cast<double>(s.skipped_steps); },
     [](StepState& s, double v) { s.skipped_steps = static_cast<int64_t>(v); }, 0.0, kMaxCount},
    {"step_state.lr", DType::f64, [](const StepState& s) { return s.lr; }, [](StepState& s, double v) { s.lr = v; },
     0.0, std::numeric_limits<double>::max()},
    {"step_state.beta1_power", DType::f64, [](const StepState& s) { return s.beta1_power; },
     [](StepState& s, double v) { s.beta1_power = v; }, 0.0, 1.0},
    {"step_state.beta2_power", DType::f64, [](const StepState& s) { return s.beta2_power; },
     [](StepState& s, double v) { s.beta2_power = v; }, 0.0, 1.0},
    // A normal float: a subnormal one backs off to exactly 0, an infinite one skips every step.
    {"step_state.loss_scale", DType::f32, [](const StepState& s) { return static_cast<double>(s.loss_scale); },
     [](StepState& s, double v) { s.loss_scale = static_cast<float>(v); }, std::numeric_limits<float>::min(),
     std::numeric_limits<float>::max()},
    {"step_state.growth_tracker", DType::i32, [](const StepState& s) { return static_cast<double>(s.growth_tracker); },
     [](StepState& s, double v) { s.growth_tracker = static_cast<int32_t>(v); }, 0.0, kMaxInt32},
    {"step_state.first_nonfinite_step", DType::i64,
     [](const StepState& s) { return static_cast<double>(s.first_nonfinite_step); },
     [](StepState& s, double v) { s.first_nonfinite_step = static_cast<int64_t>(v); }, -1.0, kMaxCount},
    {"step_state.first_nonfinite_segment", DType::i32,
     [](const StepState& s) { return static_cast<double>(s.first_nonfinite_segment); },
     [](StepState& s, double v) { s.first_nonfinite_segment = static_cast<int32_t>(v); }, -1.0, kMaxInt32},
};

// Whether a loaded per-parameter state may hold `source`: second moments (names ending in "_sq": Adam's
// and LAMB's v, AMSGrad's max) are never negative or NaN - a negative v made the next step move a weight
// from 1 to -1e5. Reduced on the tensor's own device (no copy of the whole state to the host).
bool valid_state_values(const std::string& state_name, const Tensor& source) {
  if (state_name.size() < 3 || state_name.compare(state_name.size() - 3, 3, "_sq") != 0 || source.numel() == 0)
    return true;
  const Tensor values = source.dtype() == DType::f32 ? source : source.to(DType::f32);
  const double below_zero = ops::sum(ops::relu(ops::scale(values, -1.0))).item();
  return below_zero == 0.0 && !std::isnan(ops::sum(values).item());
}

}  // namespace

Tensor Optimizer::whole_state(size_t index) const {
  const ParamArena& arena = *arena_;
  if (!arena.sharded()) return arena.state(index);
  Tensor whole = Tensor::zeros({arena.padded_elements()}, arena.state_dtype(), arena.device());
  const int64_t begin = arena.shard_begin(), end = arena.shard_end();
  if (end > begin) Tensor::view_of(whole.storage(), begin, {end - begin}, whole.dtype()).copy_(arena.state(index));
  exchange_->gather(whole);
  return whole;
}

StateDict Optimizer::state_dict() const {
  StateDict result;
  const ParamArena& arena = *arena_;
  for (size_t s = 0; s < arena.state_names().size(); ++s) {
    const Tensor whole = whole_state(s);
    for (const ArenaSegment& segment : arena.segments())
      result[segment.name + "." + arena.state_names()[s]] =
          Tensor::view_of(whole.storage(), whole.offset() + segment.offset, segment.shape, whole.dtype()).clone();
  }
  StepState current = state_;
  if (stepper_ && state_stale_) {  // steps were only enqueued: read the device's state
    DeviceStepReport report;
    stepper_->read(current, report);
  }
  for (const ScalarField& field : kScalarFields) result[field.key] = Tensor::scalar(field.get(current), field.dtype);
  if (sparse_updater_)
    for (auto& [key, tensor] : sparse_updater_->state_tensors()) result[key] = std::move(tensor);
  if (sparsifier_)
    for (auto& [key, tensor] : sparsifier_->state_tensors()) result[key] = std::move(tensor);
  return result;
}

void Optimizer::load_state_dict(const StateDict& full_state) {
  // The step extensions take their entries first; any other "@" entry belongs to one this optimizer lacks.
  StateDict state = full_state;
  if (sparse_updater_) sparse_updater_->load_state_tensors(state);
  if (sparsifier_) sparsifier_->load_state_tensors(state);
  for (const auto& [key, tensor] : state)
    OPSNN_CHECK_AS(DataError, key.rfind(kExtensionStatePrefix, 0) != 0, "optimizer state '", key,
                   "' belongs to a setting this optimizer does not use (sparse rows or top-k)");
  const ParamArena& arena = *arena_;
  std::set<std::string> expected;
  // Check everything before changing anything, so a bad dict leaves the optimizer as it was.
  auto lookup = [&](const std::string& key, const Shape& shape) -> const Tensor& {
    expected.insert(key);
    auto it = state.find(key);
    OPSNN_CHECK_AS(ConfigError, it != state.end(), name_, " optimizer state_dict: missing key '", key,
                   "' (expected shape ", shape_str(shape), ")");
    OPSNN_CHECK_AS(ConfigError, it->second.defined() && it->second.shape() == shape, name_,
                   " optimizer state_dict: key '", key, "' has shape ",
                   it->second.defined() ? shape_str(it->second.shape()) : std::string("(undefined)"), ", expected ",
                   shape_str(shape));
    return it->second;
  };
  // Sharded states (ZeRO-1) take the part of each tensor that lies in this rank's shard.
  std::vector<std::pair<Tensor, Tensor>> copies;
  const int64_t shard_begin = arena.shard_begin(), shard_end = arena.shard_end();
  for (size_t i = 0; i < arena.segments().size(); ++i)
    for (size_t s = 0; s < arena.state_names().size(); ++s) {
      const ArenaSegment& segment = arena.segments()[i];
      const Tensor& source = lookup(segment.name + "." + arena.state_names()[s], segment.shape);
      OPSNN_CHECK_AS(ConfigError, is_floating(source.dtype()), name_, " optimizer state_dict: key '",
                     arena.segments()[i].name, ".", arena.state_names()[s], "' has dtype ", dtype_name(source.dtype()),
                     ", expected a floating dtype");
      OPSNN_CHECK_AS(ConfigError, valid_state_values(arena.state_names()[s], source), name_,
                     " optimizer state_dict: key '", arena.segments()[i].name, ".", arena.state_names()[s],
                     "' holds negative or NaN values (a second moment is a mean of squares)");
      if (!arena.sharded()) {
        copies.emplace_back(arena.state_view(s, i), source);
        continue;
      }
      const int64_t from = std::max(segment.offset, shard_begin);
      const int64_t to = std::min(segment.offset + segment.numel, shard_end);
      if (to <= from) continue;
      const Tensor flat = source.contiguous();
      copies.emplace_back(
          Tensor::view_of(arena.state(s).storage(), from - shard_begin, {to - from}, arena.state_dtype()),
          Tensor::view_of(flat.storage(), flat.offset() + from - segment.offset, {to - from}, flat.dtype()));
    }
  StepState loaded = state_;
  for (const ScalarField& field : kScalarFields) {
    const double value = lookup(field.key, {}).item();
    const bool whole = field.dtype == DType::f32 || field.dtype == DType::f64 || std::floor(value) == value;
    OPSNN_CHECK_AS(ConfigError, value >= field.low && value <= field.high && whole, name_,
                   " optimizer state_dict: key '", field.key, "' = ", value, " must be ",
                   field.dtype == DType::f32 || field.dtype == DType::f64 ? "a number" : "an integer", " in [",
                   field.low, ", ", field.high, "]");
    field.set(loaded, value);
  }
  std::string state_names;
  for (const std::string& state_name : arena.state_names())
    state_names += (state_names.empty() ? "" : ", ") + state_name;
  for (const auto& [key, tensor] : state)
    OPSNN_CHECK_AS(ConfigError, expected.count(key) != 0, name_, " optimizer state_dict: unexpected key '", key,
                   "' (this optimizer keeps per parameter: ", state_names.empty() ? "nothing" : state_names,
                   "; is the dict from another optimizer or model?)");
  OPSNN_CHECK_AS(ConfigError,
                 loaded.step >= 0 && loaded.loss_scale > 0.0f && loaded.beta1_power >= 0.0 &&
                     loaded.beta1_power <= 1.0 && loaded.beta2_power >= 0.0 && loaded.beta2_power <= 1.0,
                 name_, " optimizer state_dict: inconsistent step state (step ", loaded.step, ", loss_scale ",
                 loaded.loss_scale, ", beta powers ", loaded.beta1_power, ", ", loaded.beta2_power, ")");
  for (auto& [destination, source] : copies) destination.copy_(source);
  state_ = loaded;
  state_stale_ = false;
  if (stepper_) stepper_->write_state(state_);
}

}  // namespace opsnn::optim
