// The training configuration: a typed struct mirroring the YAML schema (sections run, model, data, train,
// optimizer, scheduler, monitor, logging, checkpoint), and the functions that load it from YAML with
// key-by-key validation, apply `--set key.path=value` overrides and emit it back as YAML.
// configs/reference.yaml documents every key; all problems raise opsnn::ConfigError with FILE:LINE:COL.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace opsnn::train {

struct RunConfig {
  std::string name;     // default: the config file's name without extension
  std::string out_dir;  // default: runs/<name>
  bool operator==(const RunConfig&) const = default;
};

struct ModelConfig {
  std::string arch = "small_cnn";     // mlp | small_cnn | resnet18 | resnet34 | resnet50 | ctr | dlrm
  std::string file;                   // architecture YAML (models/...) whose keys this section overrides;
                                      // stored as the absolute path found; "" = none
  int64_t num_classes = 0;            // 0 = from the dataset
  int64_t in_channels = 0;            // 0 = from the dataset
  std::string stem = "cifar";         // resnets: imagenet (7x7/2 + max-pool) | cifar (3x3/1, no pool)
  int64_t width = 0;                  // base channel count; 0 = the architecture's default
  bool zero_init_residual = false;    // zero-init the last BatchNorm of each residual block
  std::optional<bool> channels_last;  // resnets: NHWC residual stages; nullopt = auto: on for tf32/bf16/fp16 on a GPU
  std::vector<int64_t> hidden_sizes;  // mlp / ctr hidden layers; empty = the architecture's default
  int64_t embedding_dim = 16;         // ctr, dlrm: width of each field's embedding
  bool sparse_embeddings = true;      // ctr, dlrm: row-sparse embedding gradients (false = dense)
  // dlrm: rows of each categorical field in the shared table, one entry for all 26 fields or 26 entries;
  // the bottom MLP's widths (the last = embedding_dim) and the top MLP's hidden widths.
  std::vector<int64_t> hash_buckets = {262144};
  std::vector<int64_t> bottom_mlp = {512, 256, 64, 16};
  std::vector<int64_t> top_mlp = {512, 256};
  // Parameters and BatchNorm buffers taken before training from a safetensors file by PyTorch's names
  // (a torchvision export: tools/export_torchvision_resnet.py); "" = none. Ignored when the run resumes
  // from a checkpoint, which holds the weights to continue from. See opsnn/train/init_from.h.
  std::string init_from;
  bool init_strict = true;  // refuse missing, unexpected and shape-mismatched names (false: warn, load the rest)
  bool operator==(const ModelConfig&) const = default;
};

struct AugmentConfig {
  int64_t crop_padding = 0;  // random crop after zero padding by this many pixels; 0 = off
  bool flip = false;         // random horizontal flip
  bool operator==(const AugmentConfig&) const = default;
};

struct SyntheticDataConfig {  // data.dataset = synthetic
  int64_t train_size = 10000;
  int64_t test_size = 2000;
  int64_t channels = 3;
  int64_t height = 32;
  int64_t width = 32;
  int64_t num_classes = 10;
  double noise = 1.0;
  uint64_t seed = 0;
  bool operator==(const SyntheticDataConfig&) const = default;
};

struct CtrDataConfig {  // data.dataset = ctr_synthetic
  int64_t train_size = 100000;
  int64_t test_size = 20000;
  std::vector<int64_t> vocab_sizes = {1000, 1000, 100, 100, 50, 20, 10, 5};
  double weight_scale = 0.5;
  double bias = -1.0;
  double value_skew = 2.0;
  uint64_t seed = 0;
  bool operator==(const CtrDataConfig&) const = default;
};

struct CriteoDataConfig {          // data.dataset = criteo (data.root holds train.txt[.gz], maybe test.txt[.gz])
  double test_fraction = 0.1;      // without a test file: the training file's last lines held out, in (0, 1)
  int64_t max_lines = 0;           // lines read per file; 0 = all
  std::string bad_lines = "skip";  // skip (warn with FILE:LINE, count) | fail
  int64_t bad_line_messages = 10;  // bad lines reported one by one with skip
  bool operator==(const CriteoDataConfig&) const = default;
};

struct RandomResizedCropConfig {                         // data.dataset = image_folder, training split
  std::array<double, 2> scale = {0.08, 1.0};             // area fraction of the crop box
  std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0};  // aspect ratio (width / height) of the crop box
  bool operator==(const RandomResizedCropConfig&) const = default;
};

// image_folder training: torchvision's ColorJitter factors (0 = off): brightness, contrast and saturation
// scale by a factor uniform in [1 - x, 1 + x], hue shifts by a fraction uniform in [-hue, hue] of a turn.
struct ColorJitterConfig {
  double brightness = 0.0;
  double contrast = 0.0;
  double saturation = 0.0;
  double hue = 0.0;
  bool enabled() const { return brightness > 0.0 || contrast > 0.0 || saturation > 0.0 || hue > 0.0; }
  bool operator==(const ColorJitterConfig&) const = default;
};

struct DataConfig {
  std::string dataset = "fashion_mnist";  // fashion_mnist | synthetic | ctr_synthetic | cifar10 | cifar100 |
                                          // image_folder | criteo
  std::string root = "/usr/share/datasets/fashion-mnist";
  int64_t batch_size = 64;
  int64_t eval_batch_size = 256;
  bool shuffle = true;
  bool drop_last = false;
  bool normalize = true;
  int64_t num_workers = 1;         // loader threads; 0 = load on the training thread
  int64_t prefetch = 2;            // batches prepared ahead
  std::optional<bool> pin_memory;  // nullopt = auto: pinned batches and asynchronous uploads on a GPU
  AugmentConfig augment;
  SyntheticDataConfig synthetic;
  CtrDataConfig ctr;
  CriteoDataConfig criteo;
  // image_folder: samples are [3, image_size, image_size]
  int64_t image_size = 224;
  RandomResizedCropConfig random_resized_crop;
  bool jpeg_dct_scaling = true;       // decode JPEGs at a reduced DCT scale when the crop allows
  std::string on_bad_image = "skip";  // skip (warn, count, use the next image) | error
  // Per-channel normalisation (x - mean) / std of pixels in [0, 1] when normalize is true; empty: the
  // dataset's own statistics (Fashion-MNIST's, CIFAR's, ImageNet's for image_folder). One entry per channel.
  std::vector<double> mean;
  std::vector<double> std;
  ColorJitterConfig color_jitter;  // image_folder training only
  bool operator==(const DataConfig&) const = default;
};

struct TrainLoopConfig {
  int64_t epochs = 1;              // 0 = no epoch limit (max_steps must be set)
  int64_t max_steps = 0;           // optimizer steps; 0 = no step limit
  std::string device = "auto";     // auto (the first GPU when there is one, else cpu) | cpu | cuda | cuda:N
  std::string precision = "fp32";  // fp32 | tf32 | bf16 | fp16
  bool deterministic = true;       // GPU convolutions only from deterministic algorithms (ops::set_conv_deterministic)
  // GPU convolution choices: auto (reuse the run folder's conv_algorithms.json when there is one) |
  // search (time every shape anew) | a conv_algorithms.json to reuse (another run's, to repeat its bits)
  std::string conv_algorithms = "auto";
  uint64_t seed = 0;
  int64_t grad_accumulation = 1;  // micro-batches per optimizer step
  int64_t eval_every_steps = 0;   // 0 = evaluate at the end of each epoch only
  double label_smoothing = 0.0;
  // GPU: after two eager steps, each full batch's step (forward, loss, backward, optimizer step) replays one
  // captured CUDA graph (opsnn/core/graph.h); not with fp16, grad_accumulation > 1, several ranks, top-k or
  // row-sparse gradients
  bool cuda_graph = false;
  bool operator==(const TrainLoopConfig&) const = default;
};

struct LossScalingConfig {
  std::optional<bool> enabled;  // nullopt = auto: on exactly when train.precision is fp16
  double initial_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool operator==(const LossScalingConfig&) const = default;
};

struct SparsificationConfig {
  std::string method = "none";    // none | topk
  double density = 0.01;          // fraction of gradient elements kept after warm-up
  double initial_density = 0.25;  // density at step 0 of the warm-up
  int64_t warmup_steps = 0;       // geometric decay from initial_density to density over these steps
  bool momentum_correction = true;
  double sample_fraction = 0.01;  // share of scores sampled to estimate the top-k threshold
  bool lr_compensation = false;
  double local_clip_norm = 0.0;  // DGC's local gradient clipping before accumulation; 0 = off
  bool operator==(const SparsificationConfig&) const = default;
};

struct OptimizerSettings {
  std::optional<double> fp32_weight_decay;  // weight decay computed in fp32 from the master weights
  bool fp16_momentum = false;               // store optimizer states as fp16 (math stays fp32)
  std::string state_dtype = "f32";          // f32 | f16 | bf16
  double eps_relative = 0.0;                // eps_t = max(eps, |p| * eps_relative)
  bool amsgrad = false;
  double max_grad_norm = 0.0;  // clip the global grad norm; 0 = off
  std::array<double, 2> lamb_trust_bounds = {1e-3, 10.0};
  bool decay_bias_and_norm = false;              // apply weight decay to biases and normalisation parameters
  double initial_accumulator_value = 0.0;        // adagrad: the sum of squared gradients starts here
  std::string row_sparse_coalescing = "sorted";  // sorted (deterministic) | atomic (GPU float atomics)
  LossScalingConfig loss_scaling;
  SparsificationConfig sparsification;
  bool operator==(const OptimizerSettings&) const = default;
};

struct OptimizerConfig {
  std::string name = "adam";  // a built-in optimizer (include/opsnn/optim/builtin_list.h)
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  OptimizerSettings settings;
  bool operator==(const OptimizerConfig&) const = default;
};

struct SchedulerConfig {
  std::string name = "constant";  // constant | warmup_cosine | step | linear
  int64_t warmup_steps = 0;
  double warmup_epochs = 0.0;  // alternative to warmup_steps (converted with the steps per epoch)
  double min_lr = 0.0;
  int64_t step_size = 1000;  // step: multiply the lr by gamma every step_size steps
  double gamma = 0.1;
  bool operator==(const SchedulerConfig&) const = default;
};

struct MonitorConfig {
  double grad_norm_threshold = 1e6;
  std::string on_nonfinite = "skip";  // warn | skip | stop
  bool operator==(const MonitorConfig&) const = default;
};

struct LoggingConfig {
  int64_t every_steps = 50;
  std::string progress = "auto";  // auto | bar | plain
  std::string level = "info";     // debug | info | warn
  bool operator==(const LoggingConfig&) const = default;
};

struct CheckpointConfig {
  bool enabled = true;       // also saves at the end of training
  int64_t every_steps = 0;   // 0 = off
  int64_t every_epochs = 1;  // 0 = off
  int64_t keep_last = 3;     // 0 = keep all
  bool operator==(const CheckpointConfig&) const = default;
};

// Data-parallel training (src/dist/README.md): used when the process was started by mpirun or a
// torchrun-style launcher (RANK/WORLD_SIZE); a single process ignores it.
struct DistributedConfig {
  std::string backend = "auto";   // auto (nccl on GPUs, mpi on the CPU) | nccl | mpi
  double bucket_mb = 25.0;        // gradient bucket size in MiB
  double first_bucket_mb = 1.0;   // the first bucket (gradients of the last layers, ready first)
  double timeout_s = 600.0;       // a collective not done by then ends the job (dead or stuck rank)
  int64_t check_every_steps = 0;  // debug: all-gather a hash of weights and state every this many steps
  int64_t zero_stage = 0;         // 1: ZeRO-1, optimizer states sharded over the ranks
  bool sync_batchnorm = false;    // BatchNorm statistics over the global batch (SyncBatchNorm)
  bool operator==(const DistributedConfig&) const = default;
};

struct TrainConfig {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainLoopConfig train;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  MonitorConfig monitor;
  LoggingConfig logging;
  CheckpointConfig checkpoint;
  DistributedConfig distributed;
  // Where it came from (a path, or "<embedded quickstart.yaml>"); not part of the YAML.
  std::string source;

  bool operator==(const TrainConfig& other) const;  // compares the YAML-visible fields only

  // Resolved views of settings that several keys influence.
  double effective_weight_decay() const;      // settings.fp32_weight_decay when given, else weight_decay
  std::string effective_state_dtype() const;  // "f16" when fp16_momentum, else settings.state_dtype
  bool loss_scaling_enabled() const;          // settings.loss_scaling.enabled, auto = precision fp16
};

// Loads FILE, applies each "key.path=value" of `set_overrides` (values parsed as YAML) and validates.
// Throws ConfigError ("FILE:LINE:COL: key 'a.b': ...") on any problem, including a missing file.
TrainConfig load_config(const std::string& path, const std::vector<std::string>& set_overrides = {});
// The same from YAML text; `source_name` is used in messages and for the default run name.
TrainConfig load_config_text(const std::string& yaml_text, const std::string& source_name,
                             const std::vector<std::string>& set_overrides = {});
// The embedded default (configs/quickstart.yaml compiled into the library), used without --config.
TrainConfig load_default_config(const std::vector<std::string>& set_overrides = {});
const std::string& default_config_yaml();

// The rules a config must keep that need nothing but the config: train.max_steps >= 0 and
// checkpoint.keep_last in [0, INT_MAX] (save_checkpoint counts in int). The loaders run it (their key
// bounds are tighter still), and so does the Trainer, which may be handed a config built in code.
// Throws ConfigError "SOURCE: key 'a.b': ..." naming config.source.
void validate_config(const TrainConfig& config);

// The resolved config as YAML (every key, schema order); load_config_text(emit_config(c)) == c.
std::string emit_config(const TrainConfig& config);

// Every leaf key of the schema as a dotted path ("optimizer.settings.loss_scaling.initial_scale").
std::vector<std::string> config_key_paths();

// The names the config accepts. One place to change when the registries take over this check.
const std::vector<std::string>& known_model_names();
const std::vector<std::string>& known_optimizer_names();
const std::vector<std::string>& known_dataset_names();

}  // namespace opsnn::train
