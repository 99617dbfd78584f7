// Mapping a TrainConfig onto datasets, model options and optimizer options (see setup.h).
#include "train/setup.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "opsnn/core/error.h"
#include "opsnn/optim/descriptor.h"

namespace opsnn::train {

namespace {

const std::vector<RowModel>& row_models() {
  static const std::vector<RowModel> models{{"ctr", "ctr_synthetic"}, {"dlrm", "criteo"}};
  return models;
}

}  // namespace

const RowModel* row_model_of_arch(const std::string& arch) {
  for (const RowModel& model : row_models())
    if (arch == model.arch) return &model;
  return nullptr;
}

const RowModel* row_model_of_dataset(const std::string& dataset) {
  for (const RowModel& model : row_models())
    if (dataset == model.dataset) return &model;
  return nullptr;
}

std::string row_model_pairs() {
  std::string text;
  for (const RowModel& model : row_models())
    text +=
        std::string(text.empty() ? "" : ", ") + model.arch + (text.empty() ? " goes with " : " with ") + model.dataset;
  return text;
}

Datasets make_datasets(const TrainConfig& config) {
  const DataConfig& data = config.data;
  data::DatasetOptions options;
  options.name = data.dataset;
  options.root = data.root;
  options.normalize = data.normalize;
  options.synthetic.channels = data.synthetic.channels;
  options.synthetic.height = data.synthetic.height;
  options.synthetic.width = data.synthetic.width;
  options.synthetic.num_classes = data.synthetic.num_classes;
  options.synthetic.noise = data.synthetic.noise;
  options.synthetic.seed = data.synthetic.seed;
  options.synthetic.size = data.synthetic.train_size;
  options.synthetic_test_size = data.synthetic.test_size;
  options.ctr.vocab_sizes = data.ctr.vocab_sizes;
  options.ctr.weight_scale = data.ctr.weight_scale;
  options.ctr.bias = data.ctr.bias;
  options.ctr.value_skew = data.ctr.value_skew;
  options.ctr.seed = data.ctr.seed;
  options.ctr.size = data.ctr.train_size;
  options.ctr_test_size = data.ctr.test_size;
  options.image_folder.image_size = data.image_size;
  options.image_folder.crop_scale = data.random_resized_crop.scale;
  options.image_folder.crop_ratio = data.random_resized_crop.ratio;
  options.image_folder.jpeg_dct_scaling = data.jpeg_dct_scaling;
  options.mean = data.mean;
  options.std = data.std;
  options.image_folder.color_jitter = {data.color_jitter.brightness, data.color_jitter.contrast,
                                       data.color_jitter.saturation, data.color_jitter.hue};
  options.image_folder.on_bad_image =
      data.on_bad_image == "error" ? data::BadImagePolicy::error : data::BadImagePolicy::skip;
  options.criteo.test_fraction = data.criteo.test_fraction;
  options.criteo.max_lines = data.criteo.max_lines;
  options.criteo.bad_lines = data.criteo.bad_lines == "fail" ? data::BadLinePolicy::fail : data::BadLinePolicy::skip;
  options.criteo.bad_line_messages = data.criteo.bad_line_messages;
  try {
    return data::build_datasets(options);
  } catch (const ConfigError& error) {  // the registry knows no file: say which config asked
    throw ConfigError(detail::concat(config.source, ": key 'data.dataset': ", error.what()));
  }
}

models::ModelOptions make_model_options(const TrainConfig& config, const data::Dataset& dataset) {
  const ModelConfig& model = config.model;
  models::ModelOptions options;
  options.arch = model.arch;
  const bool row_model = row_model_of_arch(model.arch) != nullptr;
  if (row_model != !dataset.is_image())
    throw ConfigError(detail::concat(config.source, ": key 'model.arch': model '", model.arch, "' cannot train on ",
                                     dataset.name(), " (", dataset.is_image() ? "images" : "feature rows", "); ",
                                     row_model_pairs(), ", image models with image datasets"));
  // Fewer outputs than the dataset has classes would only fail at the first loss, on a label out of range.
  if (model.num_classes > 0 && model.num_classes < dataset.num_classes())
    throw ConfigError(detail::concat(config.source, ": key 'model.num_classes': ", model.num_classes,
                                     " is fewer than the ", dataset.num_classes(), " classes of ", dataset.name(),
                                     " (its labels go up to ", dataset.num_classes() - 1,
                                     "); use 0 to take the dataset's count"));
  options.num_classes = model.num_classes > 0 ? model.num_classes : dataset.num_classes();
  if (dataset.is_image()) {
    Shape sample = dataset.sample_shape();
    options.in_channels = model.in_channels > 0 ? model.in_channels : sample[0];
    if (sample[1] != sample[2] && (model.arch == "mlp" || model.arch == "small_cnn"))
      throw ConfigError(detail::concat(config.source, ": key 'model.arch': ", model.arch, " needs square images, got ",
                                       sample[1], "x", sample[2]));
    options.image_size = sample[1];
    if (options.in_channels != sample[0])
      throw ConfigError(detail::concat(config.source, ": key 'model.in_channels': ", options.in_channels,
                                       " does not match the dataset's ", sample[0], " channels"));
  } else {
    options.field_vocab_sizes = config.data.ctr.vocab_sizes;  // ctr's fields (dlrm hashes instead)
    options.hidden = {64, 32};                                // ctr's MLP
  }
  if (!model.hidden_sizes.empty()) options.hidden = model.hidden_sizes;
  options.stem = model.stem;
  options.width = model.width;
  options.zero_init_residual = model.zero_init_residual;
  options.embedding_dim = model.embedding_dim;
  options.sparse_embeddings = model.sparse_embeddings;
  options.hash_buckets = model.hash_buckets;
  options.bottom_mlp = model.bottom_mlp;
  options.top_mlp = model.top_mlp;
  return options;
}

static optim::ScheduleKind schedule_kind(const std::string& name) {
  if (name == "constant") return optim::ScheduleKind::constant;
  if (name == "warmup_cosine") return optim::ScheduleKind::warmup_cosine;
  if (name == "step") return optim::ScheduleKind::step_decay;
  if (name == "linear") return optim::ScheduleKind::linear_decay;
  throw ConfigError("key 'scheduler.name': unknown schedule '" + name +
                    "' (accepted: constant, warmup_cosine, step, linear)");
}

optim::OptimizerOptions make_optimizer_options(const TrainConfig& config, int64_t steps_per_epoch,
                                               int64_t total_steps) {
  const OptimizerConfig& o = config.optimizer;
  const OptimizerSettings& s = o.settings;
  // DGC momentum correction accumulates the velocity inside the top-k sparsifier (step_extensions.h); the
  // optimizer then applies the sparse velocity as plain SGD, or momentum would be applied twice.
  bool momentum_in_sparsifier = s.sparsification.method == "topk" && s.sparsification.momentum_correction;
  optim::OptimizerOptions options(o.lr);
  options.betas({o.betas[0], o.betas[1]})
      .eps(o.eps)
      .eps_relative(s.eps_relative)
      .amsgrad(s.amsgrad)
      .momentum(momentum_in_sparsifier ? 0.0 : o.momentum)
      .dampening(o.dampening)
      .nesterov(o.nesterov)
      .trust_clamp_lower(s.lamb_trust_bounds[0])
      .trust_clamp_upper(s.lamb_trust_bounds[1])
      .state_dtype(parse_dtype(config.effective_state_dtype()))
      .max_grad_norm(s.max_grad_norm)
      .decay_1d_params(s.decay_bias_and_norm)
      .initial_accumulator_value(s.initial_accumulator_value)
      .row_sparse_atomics(s.row_sparse_coalescing == "atomic");
  options.weight_decay(o.weight_decay);
  if (s.fp32_weight_decay) options.fp32_weight_decay(*s.fp32_weight_decay);

  optim::ScheduleParams schedule;
  schedule.kind = schedule_kind(config.scheduler.name);
  schedule.base_lr = o.lr;
  schedule.min_lr = config.scheduler.min_lr;
  // The checks the optimizer would make on the schedule are made here first, so the message names the
  // config file and the keys the user wrote rather than the optimizer's own schedule.* fields.
  schedule.warmup_steps = config.scheduler.warmup_steps;
  const char* warmup_key = "scheduler.warmup_steps";
  if (schedule.warmup_steps == 0 && config.scheduler.warmup_epochs > 0) {
    warmup_key = "scheduler.warmup_epochs";
    const double steps = std::round(config.scheduler.warmup_epochs * static_cast<double>(steps_per_epoch));
    if (!(steps < 9.2e18))  // llround would overflow
      throw ConfigError(
          detail::concat(config.source, ": key 'scheduler.warmup_epochs': ", config.scheduler.warmup_epochs,
                         " epochs of ", steps_per_epoch, " steps each is more steps than a 64-bit count holds"));
    schedule.warmup_steps = static_cast<long long>(steps);
  }
  const bool ends_at_last_step =
      schedule.kind == optim::ScheduleKind::warmup_cosine || schedule.kind == optim::ScheduleKind::linear_decay;
  if (ends_at_last_step && total_steps <= schedule.warmup_steps)
    throw ConfigError(detail::concat(config.source, ": key '", warmup_key, "': the warm-up (", schedule.warmup_steps,
                                     " steps) must end before the run does (", total_steps,
                                     " steps from train.epochs and train.max_steps) for scheduler.name ",
                                     config.scheduler.name));
  schedule.total_steps = total_steps;
  schedule.step_size = config.scheduler.step_size;
  schedule.gamma = config.scheduler.gamma;
  options.schedule(schedule);

  optim::LossScalingOptions scaling;
  scaling.enabled(config.loss_scaling_enabled())
      .initial_scale(s.loss_scaling.initial_scale)
      .growth_factor(s.loss_scaling.growth_factor)
      .backoff_factor(s.loss_scaling.backoff_factor)
      .growth_interval(s.loss_scaling.growth_interval);
  options.loss_scaling(scaling);

  optim::MonitorOptions monitor;
  monitor.grad_norm_warn_threshold(config.monitor.grad_norm_threshold)
      .on_nonfinite(optim::parse_nonfinite_action(config.monitor.on_nonfinite));
  options.monitor(monitor);
  if (s.sparsification.method == "topk") options.sparsification(make_topk_options(config));
  return options;
}

optim::TopKOptions make_topk_options(const TrainConfig& config) {
  const SparsificationConfig& settings = config.optimizer.settings.sparsification;
  OPSNN_CHECK_AS(ConfigError, !config.loss_scaling_enabled(), config.source,
                 ": key 'optimizer.settings.sparsification.method': topk works on unscaled gradients and cannot be "
                 "combined with loss scaling (optimizer.settings.loss_scaling.enabled / train.precision fp16)");
  if (settings.momentum_correction) {
    const optim::OptimizerDescriptor* descriptor = optim::find_optimizer(config.optimizer.name);
    OPSNN_CHECK_AS(ConfigError,
                   descriptor != nullptr && descriptor->has_momentum_option && config.optimizer.momentum > 0.0 &&
                       !config.optimizer.nesterov,
                   config.source,
                   ": key 'optimizer.settings.sparsification.momentum_correction': DGC momentum correction moves SGD's "
                   "momentum into the sparsifier, so it needs optimizer.name sgd with momentum > 0 and nesterov "
                   "false (got ",
                   config.optimizer.name, ", momentum ", config.optimizer.momentum,
                   "); set momentum_correction: false for other optimizers");
  }
  optim::TopKOptions options;
  options.density = settings.density;
  options.sample_fraction = settings.sample_fraction;
  options.momentum_correction = settings.momentum_correction;
  options.momentum = settings.momentum_correction ? config.optimizer.momentum : 0.0;
  options.lr_compensation = settings.lr_compensation;
  options.local_clip_norm = settings.local_clip_norm;
  options.seed = config.train.seed;
  // The sparsifier's warm-up counts "epochs"; the optimizer feeds it applied steps, so its exponential
  // warm-up runs over sparsification.warmup_steps steps.
  options.warmup_epochs = settings.warmup_steps;
  options.warmup_start_density = std::max(settings.initial_density, settings.density);
  return options;
}

}  // namespace opsnn::train
