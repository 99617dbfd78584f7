// The training loop: one readable story from config to trained model. Setup builds datasets, model and
// optimizer (setup.cpp) and the run folder (config.yaml, train.log, metrics.jsonl, checkpoints/); each
// optimizer step runs grad_accumulation micro-batches of forward, loss, scaled backward (batches arrive on
// the device from a DeviceLoader, uploaded one ahead with data.pin_memory), then (with top-k
// sparsification) sparsifies the gradient arena and runs the fused optimizer step; evaluation, metrics,
// progress and checkpoints happen at their configured intervals. A step never straddles an epoch end.
#include "opsnn/train/trainer.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/cpu_services.h"
#include "core/cpu_variants.h"
#include "core/json_reader.h"
#include "ops/cpu/onednn.h"
#include "opsnn/autograd/node.h"
#include "opsnn/core/graph.h"
#include "opsnn/core/storage.h"
#include "opsnn/data/device_loader.h"
#include "opsnn/data/loader.h"
#include "opsnn/data/synthetic.h"
#include "opsnn/dist/data_parallel.h"
#include "opsnn/dist/dist.h"
#include "opsnn/dist/sync_batch_norm.h"
#include "opsnn/nn/module.h"
#include "opsnn/ops/ops.h"
#include "opsnn/optim/optimizer.h"
#include "opsnn/train/checkpoint.h"
#include "opsnn/train/init_from.h"
#include "opsnn/version.h"
#include "train/config_checks.h"
#include "train/progress.h"
#include "train/setup.h"

namespace opsnn::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Trainer::State {
  TrainConfig config;
  TrainerOptions options;
  fs::path run_dir;
  Device device;
  Datasets datasets;
  std::unique_ptr<data::DeviceLoader> loader;  // training batches, on `device`
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<spdlog::logger> logger;       // train.log (+ stderr)
  std::shared_ptr<spdlog::logger> file_logger;  // train.log only: periodic lines under a progress bar
  std::shared_ptr<spdlog::logger> previous_default_logger;
  std::optional<ops::Fp32Math> previous_fp32_math;  // set while train.precision tf32 has changed it
  std::optional<bool> previous_conv_deterministic;  // set while train.deterministic has changed it
  std::ofstream metrics;
  ProgressBar progress{"plain", false};
  std::optional<double> bayes_test_loss;
  // Distributed runs (mpirun or a torchrun-style launch): the world communicator and the gradient
  // averaging; only rank 0 (primary) writes the run folder and draws progress.
  std::shared_ptr<dist::Communicator> comm;
  std::unique_ptr<dist::DataParallel> data_parallel;
  bool primary = true;
  int world_size = 1;
  bool stop_agreed = false;  // every rank's stop request, reduced after each step

  int64_t step = 0;   // optimizer steps done (applied or skipped)
  int64_t epoch = 0;  // the epoch the loader is in (0-based)
  int64_t epochs_completed = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;  // of the whole run, for the schedule and the progress bar (0 = unknown)
  int64_t samples_seen = 0;
  double best_test_accuracy = 0.0;
  int64_t last_eval_step = -1, last_checkpoint_step = -1;
  fs::path last_checkpoint;
  std::vector<double> step_losses;
  std::optional<EvalResult> last_eval;
  // interval statistics for the periodic train metrics
  double interval_loss = 0.0, interval_density = 0.0;
  double interval_data_wait = 0.0;  // seconds the training thread waited in loader->next() since the last record
  double interval_comm_wait = 0.0;  // seconds of communication (Communicator::communication_seconds)
  double comm_seconds = 0.0;        // the communicator's total at the last step
  int64_t interval_steps = 0, interval_samples = 0, interval_sparsified_steps = 0;
  Clock::time_point interval_start = Clock::now();
  Clock::time_point run_start = Clock::now();
  int64_t run_start_step = 0;
  // train.cuda_graph: the captured step, the tensors it reads (a batch's inputs and targets) and writes
  // (its loss), and the full-batch steps run eagerly before capturing. Last: destroyed first.
  int64_t eager_full_steps = 0;
  Tensor graph_inputs, graph_targets, graph_loss;
  std::unique_ptr<CapturedGraph> graph;

  ~State() {
    // Library code logs through the default logger; hand it back so it does not outlive the run folder.
    if (logger && spdlog::default_logger() == logger) spdlog::set_default_logger(previous_default_logger);
    // The f32 math setting is process-wide: a tf32 run hands back what it found.
    if (previous_fp32_math) ops::set_fp32_math(*previous_fp32_math);
    if (previous_conv_deterministic) ops::set_conv_deterministic(*previous_conv_deterministic);
  }

  void write_metrics(nlohmann::json record) {
    if (!primary) return;
    record["time"] = std::chrono::duration<double>(Clock::now() - run_start).count();
    metrics << record.dump() << '\n';
    metrics.flush();
  }
  bool local_stop_requested() const { return options.stop_requested && options.stop_requested->load(); }
  // Distributed: the ranks stop together, after the step at which any of them was asked to.
  bool stop_requested() const { return comm ? stop_agreed : local_stop_requested(); }
  bool finished() const {
    bool epochs_done = config.train.epochs > 0 && epochs_completed >= config.train.epochs;
    bool steps_done = config.train.max_steps > 0 && step >= config.train.max_steps;
    return epochs_done || steps_done;
  }
};

namespace {

spdlog::level::level_enum log_level(const std::string& level) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  return parsed == spdlog::level::off && level != "off" ? spdlog::level::info : parsed;
}

Tensor class_targets(const Tensor& labels) {
  // CTR labels arrive as f32 0/1; the two-logit model trains with class indices.
  return labels.dtype() == DType::i64 ? labels : labels.to(DType::i64);
}

// train.cuda_graph: full-batch steps run eagerly before the capture (convolution searches, the
// optimizer's states and other lazily made state happen outside the graph).
constexpr int64_t kEagerStepsBeforeCapture = 2;

std::string run_name_of(const TrainConfig& config) { return config.run.name.empty() ? "run" : config.run.name; }

// The run folder's record of the GPU convolution choices (ops::save_conv_algorithms).
constexpr const char* kConvAlgorithmsFile = "conv_algorithms.json";

// train.conv_algorithms: the choices of an earlier run (this folder's with auto, or the file named) are
// used instead of timing those shapes, so the run computes with the same algorithms and repeats its bits.
// Read and checked on any device (a bad file is an error even where no GPU would use it).
void load_conv_algorithm_choices(const TrainConfig& c, const fs::path& run_dir, spdlog::logger& logger) {
  const std::string& setting = c.train.conv_algorithms;
  if (setting == "search") return;
  const fs::path path = setting == "auto" ? run_dir / kConvAlgorithmsFile : fs::path(setting);
  std::error_code error;
  if (!fs::exists(path, error)) {
    if (setting == "auto") return;
    throw DataError(detail::concat(c.source, ": key 'train.conv_algorithms': ", path.string(),
                                   " does not exist (expected auto, search or a conv_algorithms.json file)"));
  }
  const ops::ConvAlgorithmLoad load = ops::load_conv_algorithms(read_file_bytes(path), path.string());
  logger.info("convolution algorithms from {}: {} used, {} skipped (another GPU or cuDNN version, or decided already)",
              path.string(), load.applied, load.skipped);
}

// Writes this process's GPU convolution choices into the run folder (whole file or none: a temporary
// file renamed over the old one).
void save_conv_algorithm_choices(const fs::path& run_dir) {
  const fs::path path = run_dir / kConvAlgorithmsFile, temporary = run_dir / ".conv_algorithms.json.tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << ops::save_conv_algorithms();
    if (!file.flush()) throw DataError(detail::concat("cannot write ", temporary.string()));
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) throw DataError(detail::concat("cannot write ", path.string(), ": ", error.message()));
}

// The loader position a checkpoint saved, checked against the run it resumes (DataError naming state.json
// and the field). The trainer saves data_loader.epoch as its completed epochs or, when the step that
// ended an epoch is saved, the next one; every epoch takes at least one step.
void check_resume_position(const CheckpointData& checkpoint, int64_t batches_per_epoch) {
  JsonReader reader((checkpoint.folder / kStateFileName).string());
  const DataLoaderPosition& position = checkpoint.data_loader;
  if (position.epoch != checkpoint.epoch && position.epoch != checkpoint.epoch + 1)
    reader.fail("data_loader.epoch", "epoch ", position.epoch,
                " is neither the completed epochs (\"epoch\": ", checkpoint.epoch, ") nor the next");
  if (position.epoch > checkpoint.step)
    reader.fail("data_loader.epoch", "epoch ", position.epoch, " cannot be reached in ", checkpoint.step,
                " steps (every epoch takes at least one)");
  if (position.batch_in_epoch > batches_per_epoch)
    reader.fail("data_loader.batch_in_epoch", "batch ", position.batch_in_epoch, " is beyond the ", batches_per_epoch,
                " batches per epoch of this config (data.batch_size or the dataset changed?)");
}

// extra.best_test_accuracy (absent in checkpoints of older versions: 0).
double saved_best_accuracy(const CheckpointData& checkpoint) {
  JsonReader reader((checkpoint.folder / kStateFileName).string());
  nlohmann::json extra = parse_json_limited(checkpoint.extra_json, reader.source());
  if (!extra.is_object() || !extra.contains("best_test_accuracy")) return 0.0;
  double accuracy = reader.real(extra, "extra", "best_test_accuracy");
  if (!(accuracy >= 0.0 && accuracy <= 1.0))
    reader.fail("extra.best_test_accuracy", "expected an accuracy in [0, 1], found ",
                extra["best_test_accuracy"].dump());
  return accuracy;
}

// model.init_from on a fresh start: the file's tensors by name into the new model (init_from.h). A file
// that cannot be read, or (init_strict) does not fit, is a DataError naming the key and the file; with
// init_strict false what did not fit is logged and keeps its fresh initialisation.
void init_model_from(const TrainConfig& c, nn::Module& model, spdlog::logger& logger) {
  const fs::path path(c.model.init_from);
  const std::string key = detail::concat(c.source, ": key 'model.init_from': ");
  std::error_code error;
  if (!fs::exists(path, error))
    throw DataError(detail::concat(key, path.string(), " does not exist (expected a .safetensors file)"));
  SafetensorsContents contents;
  try {
    contents = read_safetensors(path);
  } catch (const Error& failure) {
    throw DataError(key + failure.what());
  }
  InitFromReport report;
  try {
    report = load_init_weights(model, contents.tensors, path.string(), c.model.init_strict);
  } catch (const Error& failure) {
    throw DataError(detail::concat(key, failure.what(), " (model.init_strict: false loads the tensors that fit)"));
  }
  const size_t total =
      report.loaded.size() + report.missing.size() + report.shape_mismatches.size() + report.dtype_mismatches.size();
  logger.info("model.init_from: {} of the model's {} tensors from {}{}", report.loaded.size(), total, path.string(),
              report.skipped.empty()
                  ? std::string()
                  : fmt::format(" ({} num_batches_tracked counters skipped: opsnn keeps none)", report.skipped.size()));
  if (!report.complete())
    logger.warn(
        "model.init_from (init_strict false): {}; the model's tensors not loaded keep their fresh "
        "initialisation, the file's unknown ones are not used",
        report.problems());
}

// Every rank must run the same config (file and --set options): the digests of the resolved configs are
// all-gathered and compared, so a mismatch is one clear error on every rank instead of a hang or a
// silent divergence later.
void check_same_config(dist::Communicator& comm, const TrainConfig& c) {
  const std::string digest = config_digest(emit_config(c));
  const int64_t mine = static_cast<int64_t>(std::stoull(digest.substr(digest.find(':') + 1), nullptr, 16));
  const std::vector<int64_t> digests = comm.all_gather_values(mine, "all-gather of the config digests");
  for (int r = 1; r < comm.size(); ++r)
    if (digests[static_cast<size_t>(r)] != digests[0])
      throw ConfigError(detail::concat(c.source, ": rank ", r, " runs a different config than rank 0 (resolved-config ",
                                       "digests differ): every rank must get the same config file and --set options"));
}

// The clear error for a model whose parameters, gradients and optimizer states do not fit in the memory
// of the training device (a recommender's embedding tables, typically), with what they need.
ConfigError model_too_large(const TrainConfig& c, const optim::OptimizerOptions& options, const nn::Module& model,
                            Device device, const OutOfMemoryError& error) {
  const int64_t parameters = models::count_parameters(model);
  size_t states = 0;
  if (const optim::OptimizerDescriptor* descriptor = optim::find_optimizer(c.optimizer.name))
    if (descriptor->state_names) states = descriptor->state_names(options).size();
  const std::string state_dtype = c.effective_state_dtype();
  const double state_bytes = state_dtype == "f32" ? 4.0 : 2.0;
  const double needed = static_cast<double>(parameters) * (4.0 + 4.0 + static_cast<double>(states) * state_bytes);
  return ConfigError(detail::concat(
      c.source, ": key 'model': the model's ", parameters, " parameters do not fit on ", device.str(), ": with ",
      c.optimizer.name, " (", states, " ", state_dtype, " state", states == 1 ? "" : "s",
      " per parameter) they need about ", std::lround(needed / 1e9 * 10.0) / 10.0,
      " GB for parameters, gradients and optimizer states, and ", error.what(),
      ". Make the model smaller (embedding tables: model.field_vocab_sizes or the hash buckets, model.embedding_dim) "
      "or keep the optimizer states in bf16 (optimizer.settings.state_dtype: bf16)"));
}

}  // namespace

Trainer::Trainer(TrainConfig config, TrainerOptions options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.config = std::move(config);
  s.options = std::move(options);
  const TrainConfig& c = s.config;

  // The config's own rules (checked again: it may have been built in code rather than loaded) and the
  // settings this machine cannot honour are config errors, found before anything is written.
  validate_config(c);
  const TrainingDevice run_device = check_device(c, cuda_device_count());
  s.device = run_device.device;
  // The environment's CPU settings (OPSNN_CPU_KERNELS, OPSNN_HUGE_PAGES, OPSNN_CPU_ENGINE): a bad value
  // fails here, before anything is written.
  (void)opsnn::cpu::cpu_kernels();
  (void)cpu_huge_pages();
  (void)ops::onednn::policy();
  OPSNN_CHECK_AS(UsageError, !s.options.eval_only || !s.options.resume.empty(),
                 "eval_only needs the checkpoint to evaluate: TrainerOptions::resume (a path, or auto)");
  if (dist::launched_distributed()) {
    OPSNN_CHECK_AS(UsageError, !s.options.eval_only,
                   "--eval-only runs in one process: start it without mpirun or RANK/WORLD_SIZE");
    dist::InitOptions init;
    init.backend = c.distributed.backend;
    init.device = s.device.is_cuda() ? "cuda" : "cpu";
    init.timeout_seconds = c.distributed.timeout_s;
    try {
      s.comm = dist::init(init);
    } catch (const ConfigError& failure) {
      throw ConfigError(detail::concat(c.source, ": distributed: ", failure.what()));
    }
    s.world_size = s.comm->size();
    s.primary = s.comm->rank() == 0;
    // One GPU per rank, picked by the local rank (MPI ranks may share one).
    if (s.device.is_cuda())
      s.device =
          Device(DeviceType::cuda, dist::device_index_for(s.comm->world(), s.comm->backend(), cuda_device_count()));
    check_same_config(*s.comm, c);
  }

  s.run_dir = !s.options.out_dir.empty() ? fs::path(s.options.out_dir)
              : !c.run.out_dir.empty()   ? fs::path(c.run.out_dir)
                                         : fs::path("runs") / run_name_of(c);
  std::error_code error;
  std::vector<spdlog::sink_ptr> sinks;
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> file_sink;
  if (s.primary) {  // the other ranks of a distributed run write nothing into the run folder
    fs::create_directories(s.run_dir, error);
    if (error)
      throw DataError(detail::concat("cannot create the run folder ", s.run_dir.string(), ": ", error.message()));
    file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>((s.run_dir / "train.log").string(), false);
    sinks.push_back(file_sink);
  }
  if (s.options.log_to_console) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  s.logger = std::make_shared<spdlog::logger>("opsnn", sinks.begin(), sinks.end());
  s.file_logger = file_sink ? std::make_shared<spdlog::logger>("opsnn.file", file_sink)
                            : std::make_shared<spdlog::logger>("opsnn.file");
  for (const auto& logger : {s.logger, s.file_logger}) {
    logger->set_level(log_level(c.logging.level));
    logger->flush_on(spdlog::level::info);
    logger->set_pattern("[%Y-%m-%d %H:%M:%S] [%^%l%$] %v");
  }
  if (!s.primary) {  // rank 0 reports; the others only their own errors, marked with their rank
    s.logger->set_level(spdlog::level::err);
    s.logger->set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S] [rank {}] [%^%l%$] %v", s.comm->rank()));
  }
  // The library logs (optimizer warnings, the monitor) through the default logger: route them here too.
  s.previous_default_logger = spdlog::default_logger();
  spdlog::set_default_logger(s.logger);
  // An evaluation keeps the run folder's record of the config its checkpoints were trained with.
  if (s.primary && (!s.options.eval_only || !fs::exists(s.run_dir / "config.yaml", error))) {
    std::ofstream resolved(s.run_dir / "config.yaml");
    resolved << emit_config(c);
    if (!resolved) throw DataError(detail::concat("cannot write ", (s.run_dir / "config.yaml").string()));
  }

  // Data, then the config rules that need the training set and the batches the loader makes of it.
  s.datasets = make_datasets(c);
  // Beside config.yaml: what each label means, for datasets whose classes have names (image_folder).
  if (const std::vector<std::string> classes = s.datasets.train->class_names(); s.primary && !classes.empty()) {
    std::ofstream file(s.run_dir / "classes.txt", std::ios::trunc);
    for (const std::string& name : classes) file << name << '\n';
    if (!file.flush()) throw DataError(detail::concat("cannot write ", (s.run_dir / "classes.txt").string()));
  }
  check_batch_size(c, s.datasets.train->size(), s.datasets.train->name());
  data::LoaderOptions loader_options;
  loader_options.batch_size = c.data.batch_size;
  loader_options.shuffle = c.data.shuffle;
  loader_options.drop_last = c.data.drop_last;
  loader_options.seed = c.train.seed;
  loader_options.num_workers = c.data.num_workers;
  loader_options.prefetch = c.data.prefetch;
  loader_options.augment.crop_padding = c.data.augment.crop_padding;
  loader_options.augment.horizontal_flip = c.data.augment.flip;
  loader_options.pin_memory = run_device.pin_memory;
  loader_options.shard_rank = s.comm ? s.comm->rank() : 0;  // data.batch_size is per rank
  loader_options.shard_count = s.world_size;
  s.loader = std::make_unique<data::DeviceLoader>(std::make_unique<data::DataLoader>(s.datasets.train, loader_options),
                                                  s.device);

  const RunLength length = check_run_length(c, s.datasets.train->size(), s.loader->batches_per_epoch());
  s.steps_per_epoch = length.steps_per_epoch;
  s.total_steps = length.total_steps;

  // Mixed precision: activations in bf16/fp16 (master weights, BatchNorm statistics and the loss in fp32);
  // tf32: fp32 tensors, TF32 tensor cores for the GEMMs and convolutions.
  const DType compute_dtype = c.train.precision == "bf16"   ? DType::bf16
                              : c.train.precision == "fp16" ? DType::f16
                                                            : DType::f32;
  models::ModelOptions model_options = make_model_options(c, *s.datasets.train);
  model_options.channels_last = c.model.channels_last.value_or(
      models::channels_last_by_default(s.device, compute_dtype, c.train.precision == "tf32"));
  if (model_options.arch.rfind("resnet", 0) == 0)
    s.logger->info(
        "model.channels_last: {} ({})", model_options.channels_last ? "true" : "false",
        c.model.channels_last.has_value() ? "as configured" : "auto: true for tf32/bf16/fp16 on a GPU, else false");
  // The checkpoint to continue from (or evaluate), known before the model is initialised: a resumed run
  // takes its weights from the checkpoint, not from model.init_from.
  std::optional<fs::path> resume_from;
  if (s.options.resume == "auto") {
    resume_from = find_latest_checkpoint(s.run_dir);
    if (!resume_from && s.options.eval_only)
      throw DataError(detail::concat("nothing to evaluate: no checkpoint in ", (s.run_dir / "checkpoints").string()));
    if (!resume_from) s.logger->info("--resume auto: no checkpoint in {}, starting fresh", s.run_dir.string());
  } else if (!s.options.resume.empty()) {
    resume_from = fs::path(s.options.resume);
  }

  Generator init_generator(c.train.seed);
  try {
    s.model = models::build_model(model_options, init_generator);
  } catch (const OutOfMemoryError& error) {
    throw ConfigError(detail::concat(c.source, ": key 'model': building ", c.model.arch,
                                     " on the host ran out of memory (", error.what(),
                                     "); make the model smaller (e.g. its embedding tables)"));
  }
  try {
    s.model->to(s.device);
  } catch (const OutOfMemoryError& error) {
    throw model_too_large(c, make_optimizer_options(c, s.steps_per_epoch, s.total_steps), *s.model, s.device, error);
  }
  s.model->train();
  if (!c.model.init_from.empty()) {
    if (resume_from)
      s.logger->info("model.init_from {} not used: the weights come from the checkpoint {}", c.model.init_from,
                     resume_from->string());
    else
      init_model_from(c, *s.model, *s.logger);
  }
  if (compute_dtype != DType::f32) s.model->set_compute_dtype(compute_dtype);
  if (c.train.precision == "tf32") {
    s.previous_fp32_math = ops::fp32_math();
    ops::set_fp32_math(ops::Fp32Math::tf32);
  }
  if (c.train.deterministic != ops::conv_deterministic()) {  // process-wide, handed back at the end
    s.previous_conv_deterministic = ops::conv_deterministic();
    ops::set_conv_deterministic(c.train.deterministic);
  }
  load_conv_algorithm_choices(c, s.run_dir, *s.logger);
  optim::OptimizerOptions optimizer_options = make_optimizer_options(c, s.steps_per_epoch, s.total_steps);
  try {
    s.optimizer = make_checked_optimizer(c, s.model->named_parameters(), optimizer_options);
  } catch (const OutOfMemoryError& error) {
    throw model_too_large(c, optimizer_options, *s.model, s.device, error);
  }
  // Mixed precision on the GPU: the optimizer keeps the bf16/fp16 copy of the weights (written in its
  // update pass) and Conv2d/Linear compute with it instead of casting the fp32 masters every forward.
  const bool keeps_param_copy =
      s.model->compute_dtype() != DType::f32 && !s.device.is_cpu() && s.optimizer->uses_device_step();
  if (keeps_param_copy) {
    s.optimizer->enable_param_copy(s.model->compute_dtype());
    s.model->set_parameter_copies(std::make_shared<const nn::Module::ParameterCopies>(s.optimizer->param_copies()));
  }

  s.logger->info("opsnn run '{}' in {}: {} on {} ({} train / {} test samples), {} parameters, {} on {}", run_name_of(c),
                 s.run_dir.string(), c.model.arch, s.datasets.train->name(), s.datasets.train->size(),
                 s.datasets.test->size(), models::count_parameters(*s.model), c.optimizer.name, s.device.str());
  s.logger->info(
      "CPU kernels: {} (OPSNN_CPU_KERNELS=portable|avx2|avx512 chooses another); huge pages for large CPU buffers {} "
      "(OPSNN_HUGE_PAGES=0|1); fp32 CPU convolutions and matrix products on {} (OPSNN_CPU_ENGINE=eigen|onednn|auto)",
      opsnn::cpu::cpu_kernels().name, cpu_huge_pages() ? "on" : "off", ops::onednn::policy_name(ops::onednn::policy()));
  if (s.optimizer->sparse_updater() != nullptr)
    s.logger->info(
        "row-sparse embedding gradients: {} updates only the rows each batch touches",
        s.optimizer->descriptor().rule == optim::UpdateRule::sgd ? "sparse SGD" : "lazy " + c.optimizer.name);
  if (s.loader->asynchronous())
    s.logger->info(
        "training batches in pinned memory ({} reused buffers), each uploaded on a copy stream while the "
        "batch before it computes",
        s.loader->host().pinned_buffer_count());
  if (keeps_param_copy)
    s.logger->info(
        "mixed precision: the optimizer keeps the {} weights Conv2d/Linear compute with, written in its "
        "update pass beside the fp32 masters",
        dtype_name(s.model->compute_dtype()));
  if (s.optimizer->sparsifies())
    s.logger->info("top-k sparsification: density {} (from {} over {} steps), momentum correction {}",
                   c.optimizer.settings.sparsification.density, c.optimizer.settings.sparsification.initial_density,
                   c.optimizer.settings.sparsification.warmup_steps,
                   c.optimizer.settings.sparsification.momentum_correction ? "on" : "off");
  if (const auto* ctr = dynamic_cast<const data::SyntheticCtr*>(s.datasets.test.get())) {
    s.bayes_test_loss = ctr->bayes_log_loss();
    s.logger->info(
        "ctr_synthetic: Bayes-optimal test log-loss {:.5f} (the planted model; no model can do better), "
        "base-rate log-loss {:.5f}",
        *s.bayes_test_loss, ctr->base_rate_log_loss());
  }

  if (s.primary) {
    s.metrics.open(s.run_dir / "metrics.jsonl", resume_from ? std::ios::app : std::ios::trunc);
    if (!s.metrics) throw DataError(detail::concat("cannot write ", (s.run_dir / "metrics.jsonl").string()));
  }

  if (resume_from) {
    // A checkpoint that cannot be read or does not fit this config is a runtime failure (exit 1).
    CheckpointData checkpoint;
    try {
      checkpoint = load_checkpoint(*resume_from);  // verifies every file of the checkpoint
      if (!s.options.eval_only) check_resume_position(checkpoint, s.loader->batches_per_epoch());
      s.best_test_accuracy = saved_best_accuracy(checkpoint);
      nn::StateDict model_state(checkpoint.model_tensors.begin(), checkpoint.model_tensors.end());
      try {
        s.model->load_state_dict(model_state, true);
      } catch (const Error& failure) {  // a tensor of the wrong shape, dtype or name: say which file holds it
        throw DataError(detail::concat((checkpoint.folder / kModelFileName).string(), ": ", failure.what()));
      }
      if (!s.options.eval_only) {  // an evaluation needs the model only
        optim::StateDict optimizer_state(checkpoint.optimizer_tensors.begin(), checkpoint.optimizer_tensors.end());
        s.optimizer->load_state_dict(optimizer_state);
        s.loader->seek({checkpoint.data_loader.epoch, checkpoint.data_loader.batch_in_epoch});
      }
    } catch (const Error& failure) {
      throw DataError(detail::concat(s.options.eval_only ? "cannot evaluate " : "cannot resume from ",
                                     resume_from->string(), ": ", failure.what()));
    }
    s.step = checkpoint.step;
    s.epoch = checkpoint.data_loader.epoch;
    // An evaluation reports the epoch of the checkpoint's last step, as that step's own evaluation did: a
    // checkpoint at an epoch's end stands at batch 0 of the next one.
    if (s.options.eval_only && checkpoint.data_loader.batch_in_epoch == 0 && s.epoch > 0) --s.epoch;
    s.epochs_completed = checkpoint.epoch;
    s.samples_seen = checkpoint.data_loader.samples_seen;
    s.last_checkpoint_step = s.step;
    s.last_checkpoint = *resume_from;
    if (checkpoint.config_digest != config_digest(emit_config(c)))
      s.logger->warn("{} {} with a config that differs from the one it was written with",
                     s.options.eval_only ? "evaluating" : "resuming from", resume_from->string());
    if (s.options.eval_only)
      s.logger->info("evaluating the model of {} (step {}, epoch {}); nothing is trained or saved",
                     resume_from->string(), s.step, s.epoch + 1);
    else
      s.logger->info("resumed from {} at step {} (epoch {}, batch {})", resume_from->string(), s.step, s.epoch + 1,
                     checkpoint.data_loader.batch_in_epoch);
    s.optimizer->refresh_param_copy();  // the masters were just loaded
  }
  if (s.comm) {
    // After any resume (every rank loads the same checkpoint): rank 0's weights are broadcast anyway,
    // so ranks that initialised differently still start equal.
    dist::DataParallelOptions parallel;
    parallel.bucket_mb = c.distributed.bucket_mb;
    parallel.first_bucket_mb = c.distributed.first_bucket_mb;
    parallel.check_every_steps = c.distributed.check_every_steps;
    parallel.zero_stage = static_cast<int>(c.distributed.zero_stage);
    try {
      s.data_parallel = std::make_unique<dist::DataParallel>(*s.model, *s.optimizer, s.comm, parallel);
    } catch (const ConfigError& failure) {
      throw ConfigError(detail::concat(c.source, ": ", failure.what()));
    }
    const auto& buckets = s.data_parallel->buckets();
    s.logger->info(
        "distributed: {} ranks ({}, backend {}), this rank {} on {}; data.batch_size {} per rank, global batch {}; "
        "gradients averaged in {} buckets (first {:.0f} KiB) overlapped with backward",
        s.world_size, s.comm->world().launcher, dist::backend_name(s.comm->backend()), s.comm->rank(), s.device.str(),
        c.data.batch_size, c.data.batch_size * s.world_size, buckets.size(),
        buckets.empty() ? 0.0 : static_cast<double>(buckets[0].end - buckets[0].begin) * 4.0 / 1024.0);
    if (s.optimizer->sharded()) {
      const optim::ArenaShardRange shard = s.data_parallel->shard();
      s.logger->info(
          "ZeRO-1: this rank steps arena elements [{}, {}) of {} and holds {:.1f} MiB of optimizer state "
          "(unsharded: {:.1f} MiB)",
          shard.begin, shard.end, s.optimizer->arena().padded_elements(),
          static_cast<double>(s.data_parallel->state_bytes_per_rank()) / 1048576.0,
          static_cast<double>(s.optimizer->arena().state_names().size() *
                              static_cast<size_t>(s.optimizer->arena().padded_elements()) *
                              dtype_size(s.optimizer->arena().state_dtype())) /
              1048576.0);
    }
    if (c.distributed.sync_batchnorm && s.world_size > 1)
      s.logger->info("SyncBatchNorm: the training statistics of {} BatchNorm layers are taken over the global batch",
                     dist::convert_sync_batch_norm(*s.model, s.comm));
    else if (c.distributed.sync_batchnorm)
      s.logger->info("distributed.sync_batchnorm: one rank, so BatchNorm's statistics are the global batch's already");
    if (s.optimizer->sparsifies())
      s.logger->info(
          s.data_parallel->exchanges_pairs()
              ? "top-k across ranks: each rank's (index, value) pairs by all-gather, the union summed in rank order"
              : "top-k across ranks: a dense all-reduce of the sparsified gradients (density >= 1 / world size: "
                "the pairs would send more than the dense gradient)");
  }
  if (c.train.cuda_graph) {
    // What check_device and validate_config could not know: the world, and the optimizer's step.
    OPSNN_CHECK_AS(ConfigError, s.data_parallel == nullptr, c.source,
                   ": key 'train.cuda_graph': true does not go with data parallelism (its reductions run on a stream "
                   "of their own)");
    const auto& segments = s.optimizer->arena().segments();
    OPSNN_CHECK_AS(
        ConfigError,
        s.optimizer->uses_device_step() &&
            std::none_of(segments.begin(), segments.end(), [](const auto& segment) { return segment.sparse; }),
        c.source,
        ": key 'train.cuda_graph': true needs the optimizer's fused device step over dense "
        "gradients (row-sparse embedding gradients and optimizers registered from outside update on the host)");
    s.logger->info("train.cuda_graph: after {} eager steps, every full batch of {} replays one captured CUDA graph",
                   kEagerStepsBeforeCapture, c.data.batch_size);
  }
  s.progress = ProgressBar(c.logging.progress, s.options.show_progress && s.primary);
  s.run_start_step = s.step;
}

Trainer::~Trainer() = default;

int64_t Trainer::step() const { return state_->step; }
int64_t Trainer::epoch() const { return state_->epoch; }
const fs::path& Trainer::run_dir() const { return state_->run_dir; }
const TrainConfig& Trainer::config() const { return state_->config; }
nn::Module& Trainer::model() { return *state_->model; }
optim::Optimizer& Trainer::optimizer() { return *state_->optimizer; }
const std::vector<double>& Trainer::step_losses() const { return state_->step_losses; }
std::optional<double> Trainer::bayes_test_loss() const { return state_->bayes_test_loss; }

EvalResult Trainer::evaluate() {
  State& s = *state_;
  autograd::NoGradGuard no_grad;
  s.model->eval();
  data::DataLoader loader(
      s.datasets.test,
      // Distributed: batches are made on demand (make_batch), no workers prefetching all.
      data::LoaderOptions::evaluation(s.config.data.eval_batch_size, s.world_size > 1 ? 0 : s.config.data.num_workers));
  EvalResult result;
  double loss_sum = 0.0;
  int64_t correct = 0, correct_top5 = 0, classes = 0;
  auto consume = [&](const data::Batch* batch) {
    Tensor logits = s.model->forward(batch->inputs.to(s.device));
    Tensor targets = class_targets(batch->labels);
    int64_t n = batch->size();
    loss_sum += ops::cross_entropy(logits, targets.to(s.device)).item() * static_cast<double>(n);
    std::vector<float> values = logits.to_vector<float>();
    std::vector<int64_t> labels = targets.to_vector<int64_t>();
    classes = logits.size(1);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = values.data() + i * classes;
      const int64_t label = labels[static_cast<size_t>(i)];
      int64_t best = 0;
      for (int64_t k = 1; k < classes; ++k)
        if (row[k] > row[best]) best = k;
      correct += best == label;
      // Top-5: fewer than 5 classes rank before the label's logit (a higher one, or an equal one at a lower
      // index: the argmax's tie rule, so every top-1 hit is a top-5 hit).
      bool in_top5 = best == label;
      if (!in_top5 && classes >= 5 && label >= 0 && label < classes && !std::isnan(row[label])) {
        int64_t ahead = 0;
        for (int64_t k = 0; k < classes && ahead < 5; ++k)
          ahead += row[k] > row[label] || (row[k] == row[label] && k < label);
        in_top5 = ahead < 5;
      }
      correct_top5 += in_top5;
    }
    result.samples += n;
  };
  if (s.world_size == 1) {
    while (std::optional<data::Batch> batch = loader.next()) consume(&*batch);
  } else {
    // Distributed: rank r evaluates batches r, r + world, ... and the counts are summed over ranks.
    for (int64_t b = s.comm->rank(); b < loader.batches_per_epoch(); b += s.world_size) {
      const data::Batch batch = loader.make_batch({0, b});
      consume(&batch);
    }
    Tensor sums =
        Tensor::from_vector<double>({loss_sum, static_cast<double>(correct), static_cast<double>(correct_top5),
                                     static_cast<double>(result.samples), static_cast<double>(classes)},
                                    {5})
            .to(s.comm->device());
    Tensor counts = Tensor::view_of(sums.storage(), 0, {4}, DType::f64);
    Tensor widest = Tensor::view_of(sums.storage(), 4, {1}, DType::f64);
    s.comm->all_reduce(counts, dist::ReduceOp::sum, "all-reduce of the evaluation counts");
    s.comm->all_reduce(widest, dist::ReduceOp::max, "all-reduce of the evaluation's class count");
    const std::vector<double> reduced = sums.to_vector<double>();
    loss_sum = reduced[0];
    correct = static_cast<int64_t>(reduced[1]);
    correct_top5 = static_cast<int64_t>(reduced[2]);
    result.samples = static_cast<int64_t>(reduced[3]);
    classes = static_cast<int64_t>(reduced[4]);
  }
  s.model->train();
  result.loss = result.samples > 0 ? loss_sum / static_cast<double>(result.samples) : 0.0;
  result.accuracy = result.samples > 0 ? static_cast<double>(correct) / static_cast<double>(result.samples) : 0.0;
  if (classes >= 5)
    result.top5_accuracy =
        result.samples > 0 ? static_cast<double>(correct_top5) / static_cast<double>(result.samples) : 0.0;
  s.last_eval = result;
  s.last_eval_step = s.step;
  s.best_test_accuracy = std::max(s.best_test_accuracy, result.accuracy);
  s.progress.clear();
  nlohmann::json record{{"event", "eval"},
                        {"step", s.step},
                        {"epoch", s.epoch + 1},
                        {"test_loss", result.loss},
                        {"test_acc", result.accuracy},
                        {"samples", result.samples}};
  if (result.top5_accuracy) record["test_acc_top5"] = *result.top5_accuracy;
  const std::string top5 =
      result.top5_accuracy ? fmt::format(" test_acc_top5 {:.2f}%", 100.0 * *result.top5_accuracy) : std::string();
  if (s.options.eval_only) {  // opsnn-train --eval-only: which checkpoint the numbers are of
    record["eval_only"] = true;
    record["checkpoint"] = s.last_checkpoint.string();
  }
  if (s.bayes_test_loss) {
    record["bayes_loss"] = *s.bayes_test_loss;
    s.logger->info(
        "eval at step {} (epoch {}): test_loss {:.5f} ({:+.2f}% from the Bayes-optimal {:.5f}), test_acc {:.2f}%",
        s.step, s.epoch + 1, result.loss, 100.0 * (result.loss / *s.bayes_test_loss - 1.0), *s.bayes_test_loss,
        100.0 * result.accuracy);
  } else {
    s.logger->info("eval at step {} (epoch {}): test_loss {:.4f} test_acc {:.2f}%{}", s.step, s.epoch + 1, result.loss,
                   100.0 * result.accuracy, top5);
  }
  s.write_metrics(record);
  return result;
}

fs::path Trainer::save_checkpoint() {
  State& s = *state_;
  OPSNN_CHECK_AS(UsageError, !s.options.eval_only, "save_checkpoint: this Trainer only evaluates (eval_only)");
  if (!s.primary) {                                         // the ranks hold the same state; rank 0 writes it
    if (s.optimizer->sharded()) s.optimizer->state_dict();  // ZeRO-1: the gather rank 0 writes needs every rank
    s.last_checkpoint_step = s.step;
    return {};
  }
  CheckpointData data;
  data.step = s.step;
  data.epoch = s.epochs_completed;
  data.step_state = s.optimizer->step_state();
  data.rng["init"] = RngState{s.config.train.seed, 0};  // the loader and the sparsifier derive from the seed too
  data::LoaderPosition position = s.loader->position();
  data.data_loader = {position.epoch, position.batch, s.samples_seen};
  data.config_digest = config_digest(emit_config(s.config));
  data.extra_json = nlohmann::json{{"best_test_accuracy", s.best_test_accuracy}}.dump();
  for (const auto& [name, tensor] : s.model->state_dict()) data.model_tensors.emplace_back(name, tensor);
  for (const auto& [name, tensor] : s.optimizer->state_dict()) data.optimizer_tensors.emplace_back(name, tensor);
  const int keep_last = static_cast<int>(s.config.checkpoint.keep_last);  // in int range: validate_config
  fs::path folder = train::save_checkpoint(s.run_dir, data, keep_last);
  if (s.device.is_cuda()) save_conv_algorithm_choices(s.run_dir);
  s.last_checkpoint_step = s.step;
  s.last_checkpoint = folder;
  s.progress.clear();
  s.logger->info("checkpoint saved: {}", folder.string());
  return folder;
}

double Trainer::train_steps(int64_t count) {
  State& s = *state_;
  OPSNN_CHECK_AS(UsageError, !s.options.eval_only, "train_steps: this Trainer only evaluates (eval_only)");
  const TrainConfig& c = s.config;
  // train.cuda_graph: replays the captured step on `batch` (capturing it first, once enough full batches
  // ran eagerly), its optimizer step enqueued; false for a batch it cannot take (a short last batch) and
  // before the capture: the caller then steps eagerly.
  auto replay_graph_step = [&](const data::Batch& batch) {
    if (batch.size() != c.data.batch_size) return false;
    if (!s.graph && s.eager_full_steps < kEagerStepsBeforeCapture) {
      ++s.eager_full_steps;
      return false;
    }
    const Tensor targets = class_targets(batch.labels);
    if (!s.graph) {
      s.graph_inputs = batch.inputs.clone();
      s.graph_targets = targets.clone();
      s.graph_loss = Tensor::zeros({}, DType::f32, s.device);
      try {
        s.graph = capture_graph(s.device, [&] {
          s.optimizer->zero_grad();
          Tensor loss = ops::cross_entropy(s.model->forward(s.graph_inputs), s.graph_targets, c.train.label_smoothing);
          loss.backward();
          s.optimizer->step_async();
          s.graph_loss.copy_(loss);
        });
      } catch (const UsageError& failure) {
        throw ConfigError(detail::concat(c.source, ": key 'train.cuda_graph': this model's training step cannot be ",
                                         "captured: ", failure.what()));
      }
      s.logger->info("train.cuda_graph: the step captured at step {}", s.step + 1);
    } else {
      s.graph_inputs.copy_(batch.inputs);
      s.graph_targets.copy_(targets);
    }
    s.graph->replay();
    return true;
  };
  double loss_total = 0.0;
  int64_t steps_run = 0;
  while (steps_run < count && !s.finished() && !s.stop_requested()) {
    // One optimizer step over up to grad_accumulation micro-batches; an epoch end cuts the step short.
    double step_loss = 0.0;
    int64_t micro_batches = 0, step_samples = 0;
    bool epoch_ended = false, replayed = false;
    while (micro_batches < c.train.grad_accumulation) {
      const Clock::time_point wait_start = Clock::now();
      std::optional<data::Batch> batch = s.loader->next();
      s.interval_data_wait += std::chrono::duration<double>(Clock::now() - wait_start).count();
      if (!batch) {
        epoch_ended = true;
        break;
      }
      if (c.train.cuda_graph && replay_graph_step(*batch)) {  // grad_accumulation is 1: the whole step
        step_loss += s.graph_loss.item();
        step_samples += batch->size();
        ++micro_batches;
        replayed = true;
        continue;
      }
      Tensor logits = s.model->forward(batch->inputs);
      Tensor loss = ops::cross_entropy(logits, class_targets(batch->labels), c.train.label_smoothing);
      Tensor objective =
          c.train.grad_accumulation > 1 ? ops::scale(loss, 1.0 / static_cast<double>(c.train.grad_accumulation)) : loss;
      Tensor scaled = s.optimizer->scale_loss(objective);
      // Distributed: gradients are averaged over ranks during the backward of the last micro-batch.
      if (s.data_parallel)
        s.data_parallel->backward(scaled, micro_batches + 1 == c.train.grad_accumulation);
      else
        scaled.backward();
      step_loss += loss.item();
      step_samples += batch->size();
      ++micro_batches;
    }

    if (micro_batches > 0) {
      optim::StepState step_state;
      try {
        step_state = replayed          ? s.optimizer->complete_step()
                     : s.data_parallel ? s.data_parallel->step()
                                       : s.optimizer->step();
      } catch (const RuntimeFailure& failure) {  // the monitor stopped the run (on_nonfinite: stop)
        s.progress.clear();
        s.write_metrics({{"event", "warn"}, {"step", s.step + 1}, {"epoch", s.epoch + 1}, {"message", failure.what()}});
        throw;
      }
      s.optimizer->zero_grad();
      if (s.data_parallel) {
        const double communicated = s.comm->communication_seconds();
        s.interval_comm_wait += communicated - s.comm_seconds;
        s.comm_seconds = communicated;
        step_samples *= s.world_size;    // the global batch (ranks' shares differ by at most one sample)
        if (s.options.stop_requested) {  // stop together: any rank's request, reduced
          Tensor flag = Tensor::full({1}, s.local_stop_requested() ? 1.0 : 0.0, DType::i32, s.comm->device());
          s.comm->all_reduce(flag, dist::ReduceOp::max, "agreement on stopping");
          s.stop_agreed = flag.to_vector<int32_t>()[0] != 0;
        }
      }
      ++s.step;
      ++steps_run;
      step_loss /= static_cast<double>(micro_batches);
      loss_total += step_loss;
      s.step_losses.push_back(step_loss);
      s.samples_seen += step_samples;
      s.interval_loss += step_loss;
      s.interval_steps += 1;
      s.interval_samples += step_samples;
      if (const std::optional<optim::TopKStepReport>& sparsified = s.optimizer->last_sparsification()) {
        s.interval_density += sparsified->achieved_density;
        s.interval_sparsified_steps += 1;
      }

      if (step_state.monitor_flags & optim::kStepSkipped)
        s.write_metrics({{"event", "skip"},
                         {"step", s.step},
                         {"epoch", s.epoch + 1},
                         {"loss_scale", step_state.loss_scale},
                         {"reason", "non-finite gradients"}});
      if (step_state.monitor_flags & optim::kGradNormAboveThreshold)
        s.write_metrics({{"event", "warn"},
                         {"step", s.step},
                         {"epoch", s.epoch + 1},
                         {"grad_norm", step_state.grad_norm},
                         {"message", "gradient norm above monitor.grad_norm_threshold"}});
      if (step_state.monitor_flags & optim::kNonFiniteParam)
        s.write_metrics(
            {{"event", "warn"}, {"step", s.step}, {"epoch", s.epoch + 1}, {"message", "a parameter became inf/NaN"}});

      double elapsed = std::chrono::duration<double>(Clock::now() - s.interval_start).count();
      double samples_per_second = elapsed > 0 ? static_cast<double>(s.interval_samples) / elapsed : 0.0;
      double run_elapsed = std::chrono::duration<double>(Clock::now() - s.run_start).count();
      int64_t steps_this_run = s.step - s.run_start_step;
      double eta = s.total_steps > 0 && steps_this_run > 0
                       ? run_elapsed / static_cast<double>(steps_this_run) * static_cast<double>(s.total_steps - s.step)
                       : -1.0;
      s.progress.update(
          {s.epoch + 1, c.train.epochs, s.step, s.total_steps, step_loss, step_state.lr, samples_per_second, eta});
      bool log_now = c.logging.every_steps > 0 && s.step % c.logging.every_steps == 0;
      if (log_now || s.step == 1) {
        double mean_loss = s.interval_loss / static_cast<double>(s.interval_steps);
        nlohmann::json record{{"event", "train"},
                              {"step", s.step},
                              {"epoch", s.epoch + 1},
                              {"loss", mean_loss},
                              {"lr", step_state.lr},
                              {"grad_norm", step_state.grad_norm},
                              {"loss_scale", step_state.loss_scale},
                              {"samples_per_s", samples_per_second},
                              // Time each step waited for its batches: the input pipeline is the bottleneck
                              // when this approaches the step time (elapsed / steps).
                              {"data_wait_ms", 1e3 * s.interval_data_wait / static_cast<double>(s.interval_steps)},
                              {"step_ms", 1e3 * elapsed / static_cast<double>(s.interval_steps)}};
        if (s.interval_sparsified_steps > 0)
          record["density"] = s.interval_density / static_cast<double>(s.interval_sparsified_steps);
        if (s.data_parallel) {  // communication per step: NCCL's time on its stream, MPI's wait on the host
          record["world_size"] = s.world_size;
          record["comm_ms"] = 1e3 * s.interval_comm_wait / static_cast<double>(s.interval_steps);
          if (s.optimizer->sparsifies()) {  // the last step's volume beside what a dense all-reduce sends
            record["exchanged_bytes"] = s.data_parallel->last_exchange().sent_bytes;
            record["dense_bytes"] = s.data_parallel->last_exchange().dense_bytes;
          }
        }
        s.write_metrics(record);
        // Under a progress bar the periodic line goes to train.log only; the bar shows the same numbers.
        auto& logger = s.progress.active() ? s.file_logger : s.logger;
        logger->info("epoch {} step {}/{} loss {:.4f} lr {:.3e} grad_norm {:.3g} scale {:g} {:.0f} samples/s ETA {}{}",
                     s.epoch + 1, s.step, s.total_steps, mean_loss, step_state.lr, step_state.grad_norm,
                     step_state.loss_scale, samples_per_second, format_duration(eta),
                     record.contains("density") ? fmt::format(" density {:.4f}", record["density"].get<double>()) : "");
        s.interval_loss = s.interval_density = s.interval_data_wait = s.interval_comm_wait = 0.0;
        s.interval_steps = s.interval_samples = s.interval_sparsified_steps = 0;
        s.interval_start = Clock::now();
      }
      if (c.train.eval_every_steps > 0 && s.step % c.train.eval_every_steps == 0) evaluate();
      if (c.checkpoint.enabled && c.checkpoint.every_steps > 0 && s.step % c.checkpoint.every_steps == 0)
        save_checkpoint();
    }

    if (epoch_ended) {
      ++s.epochs_completed;
      s.progress.clear();
      s.logger->info("epoch {} done at step {}", s.epoch + 1, s.step);
      if (c.train.eval_every_steps == 0) evaluate();
      s.epoch = s.loader->position().epoch;  // batch 0 of the next epoch
      if (c.checkpoint.enabled && c.checkpoint.every_epochs > 0 && s.epochs_completed % c.checkpoint.every_epochs == 0)
        save_checkpoint();
    }
  }
  return steps_run > 0 ? loss_total / static_cast<double>(steps_run) : 0.0;
}

TrainSummary Trainer::fit() {
  State& s = *state_;
  OPSNN_CHECK_AS(UsageError, !s.options.eval_only, "fit: this Trainer only evaluates (eval_only); call evaluate()");
  const TrainConfig& c = s.config;
  s.run_start = Clock::now();
  s.interval_start = s.run_start;
  s.run_start_step = s.step;
  int64_t samples_before = s.samples_seen;
  TrainSummary summary;
  double last_loss = 0.0;
  while (!s.finished() && !s.stop_requested()) {
    int64_t before = s.step, epochs_before = s.epochs_completed;
    double loss = train_steps(1);
    if (s.step > before)
      last_loss = loss;
    else if (s.epochs_completed == epochs_before)
      break;  // nothing left to do (an empty loader)
  }
  summary.interrupted = !s.finished() && s.stop_requested();
  s.progress.finish();
  // A run that stops inside an epoch (max_steps) still ends with an evaluation of its final weights.
  if (!summary.interrupted && s.last_eval_step != s.step) evaluate();
  if ((c.checkpoint.enabled || summary.interrupted) && s.last_checkpoint_step != s.step)
    save_checkpoint();  // which writes the convolution choices too
  else if (s.device.is_cuda() && s.primary)
    save_conv_algorithm_choices(s.run_dir);
  summary.last_checkpoint = s.last_checkpoint.string();
  summary.steps = s.step;
  summary.epochs_completed = s.epochs_completed;
  summary.final_train_loss = last_loss;
  summary.final_eval = s.last_eval;
  summary.best_test_accuracy = s.best_test_accuracy;
  summary.bayes_test_loss = s.bayes_test_loss;
  summary.wall_seconds = std::chrono::duration<double>(Clock::now() - s.run_start).count();
  summary.samples_per_second =
      summary.wall_seconds > 0 ? static_cast<double>(s.samples_seen - samples_before) / summary.wall_seconds : 0.0;
  s.logger->info("{}: {} steps, {} epochs in {} ({:.0f} samples/s); final test_acc {}, best {:.2f}%{}",
                 summary.interrupted ? "interrupted" : "done", summary.steps, summary.epochs_completed,
                 format_duration(summary.wall_seconds), summary.samples_per_second,
                 summary.final_eval ? fmt::format("{:.2f}%", 100.0 * summary.final_eval->accuracy) : std::string("n/a"),
                 100.0 * summary.best_test_accuracy,
                 summary.last_checkpoint.empty() ? "" : "; checkpoint " + summary.last_checkpoint);
  nlohmann::json record{{"event", "summary"},
                        {"step", s.step},
                        {"epoch", s.epochs_completed},
                        {"wall_s", summary.wall_seconds},
                        {"samples_per_s", summary.samples_per_second},
                        {"best_test_acc", summary.best_test_accuracy},
                        {"interrupted", summary.interrupted}};
  if (summary.final_eval) {
    record["final_test_acc"] = summary.final_eval->accuracy;
    record["final_test_loss"] = summary.final_eval->loss;
  }
  if (summary.bayes_test_loss) record["bayes_loss"] = *summary.bayes_test_loss;
  // What a results table needs beside the numbers (opsnn-experiment): which config (the digest its
  // checkpoints carry), the settings runs are compared by, and the code that ran. No peak memory: the
  // library does not track it.
  const optim::StepState& final_state = s.optimizer->sync_state();
  const SparsificationConfig& sparsification = c.optimizer.settings.sparsification;
  record["final_train_loss"] = last_loss;
  record["steps_per_epoch"] = s.steps_per_epoch;
  record["config_hash"] = config_digest(emit_config(c));
  record["optimizer"] = c.optimizer.name;
  record["precision"] = c.train.precision;
  record["topk_density"] = sparsification.method == "topk" ? nlohmann::json(sparsification.density) : nlohmann::json();
  record["seed"] = c.train.seed;
  record["skipped_steps"] = final_state.skipped_steps;
  record["final_loss_scale"] = final_state.loss_scale;
  record["opsnn_version"] = opsnn::version();
  record["git_revision"] = opsnn::git_revision();
  s.write_metrics(record);
  return summary;
}

}  // namespace opsnn::train
