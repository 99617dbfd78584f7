// Loading a TrainConfig: parse YAML (yaml-cpp), apply --set overrides to the tree, walk it key by key
// against the schema (unknown keys get a did-you-mean), then check the rules that span several keys and
// validate_config's (config_checks.cpp).
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "opsnn/core/error.h"
#include "opsnn/data/criteo.h"
#include "opsnn/optim/descriptor.h"
#include "opsnn/train/config.h"
#include "train/config_schema.h"
#include "train/setup.h"

namespace opsnn::train {
namespace {

using detail::fail;
using detail::Origin;

constexpr const char* kEmbeddedSource = "<embedded quickstart.yaml>";

// Names people reach for from other frameworks, mapped to ours (used for suggestions only).
const std::map<std::string, std::string>& common_aliases() {
  static const std::map<std::string, std::string> aliases{
      {"learning_rate", "lr"},
      {"wd", "weight_decay"},
      {"beta1", "betas"},
      {"beta2", "betas"},
      {"epsilon", "eps"},
      {"type", "name"},
      {"model", "arch"},
      {"architecture", "arch"},
      {"lr_min", "min_lr"},
      {"eta_min", "min_lr"},
      {"warmup", "warmup_steps"},
      {"steps", "max_steps"},
      {"batch", "batch_size"},
      {"workers", "num_workers"},
      {"clip_grad_norm", "max_grad_norm"},
      {"grad_clip", "max_grad_norm"},
      {"accumulation_steps", "grad_accumulation"},
      {"dataset_root", "root"},
      {"data_dir", "root"},
      {"path", "root"},
  };
  return aliases;
}

std::string join_path(const std::string& section, const std::string& name) {
  return section.empty() ? name : section + "." + name;
}

std::string unknown_key_message(const std::string& section, const std::string& name) {
  const std::string path = printable(join_path(section, name));
  const std::vector<std::string>& siblings = detail::section_children(section);
  std::string suggestion = detail::closest_match(name, siblings);
  if (suggestion.empty()) {
    auto alias = common_aliases().find(name);
    if (alias != common_aliases().end() &&
        std::find(siblings.begin(), siblings.end(), alias->second) != siblings.end()) {
      suggestion = alias->second;
    }
  }
  if (!suggestion.empty()) return "unknown key '" + path + "' (did you mean '" + join_path(section, suggestion) + "'?)";
  // The same name in another section: a key put in the wrong place.
  for (const std::string& candidate : config_key_paths()) {
    const size_t dot = candidate.rfind('.');
    if (candidate.substr(dot + 1) == name) return "unknown key '" + path + "' (did you mean '" + candidate + "'?)";
  }
  std::string known;
  for (const std::string& sibling : siblings) known += (known.empty() ? "" : ", ") + sibling;
  return "unknown key '" + path + "'; the keys of " + (section.empty() ? "the top level" : "'" + section + "'") +
         " are: " + known;
}

// yaml-cpp 0.7 (Debian 12's) never returns from a document in which a ',' stands where a block node
// begins (",", "- a\n,", "--- ,"): its parser loops, emitting events and taking memory until none is
// left. So every text is first parsed into an event counter that stops once there are more events than
// a text of its size can produce (a legitimate document gives at most about two per character: "[[]]"
// is four events in four characters), and only then loaded for real.
class EventBudget : public YAML::EventHandler {
 public:
  explicit EventBudget(size_t text_bytes) : remaining_(4 * text_bytes + 16) {}
  void OnDocumentStart(const YAML::Mark& mark) override { spend(mark); }
  void OnDocumentEnd() override { spend(); }
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { spend(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { spend(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    spend(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    spend(mark);
  }
  void OnSequenceEnd() override { spend(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    spend(mark);
  }
  void OnMapEnd() override { spend(); }

 private:
  void spend(const YAML::Mark& mark = YAML::Mark::null_mark()) {
    if (!mark.is_null()) last_mark_ = mark;
    if (remaining_-- == 0)
      throw YAML::ParserException(last_mark_, "unexpected ',' (a flow-collection separator outside [ ] or { })");
  }
  size_t remaining_;
  YAML::Mark last_mark_ = YAML::Mark::null_mark();
};

// YAML::LoadAll, refusing (YAML::ParserException) the input yaml-cpp would loop on.
std::vector<YAML::Node> load_all_documents(const std::string& text) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  EventBudget budget(text.size());
  while (parser.HandleNextDocument(budget)) {
  }
  return YAML::LoadAll(text);
}

class ConfigReader {
 public:
  explicit ConfigReader(std::string source) : file_origin_{std::move(source), 0, 0} {}

  YAML::Node parse(const std::string& text) const {
    try {
      // All documents are parsed so that a second one is refused rather than silently ignored (YAML::Load
      // reads the first only): a config is one mapping.
      std::vector<YAML::Node> documents = load_all_documents(text);
      if (documents.size() > 1) {
        Origin origin = detail::origin_of(documents[1], file_origin_);
        throw ConfigError(origin.text() +
                          ": a second YAML document (after '---'); a config file holds one mapping of "
                          "sections, so merge the documents or split them into separate files");
      }
      return documents.empty() ? YAML::Node() : documents[0];
    } catch (const YAML::Exception& error) {
      Origin origin = file_origin_;
      origin.line = error.mark.is_null() ? 0 : error.mark.line;
      origin.column = error.mark.is_null() ? 0 : error.mark.column;
      throw ConfigError(origin.text() + ": malformed YAML: " + printable(error.msg));
    }
  }

  // Applies one "key.path=value" to the tree; `where` names it in messages ("" = the --set argument).
  void apply_override(YAML::Node& root, const std::string& argument, const std::string& where = "") {
    const Origin origin{where.empty() ? "--set " + argument : where};
    const size_t equals = argument.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw ConfigError(origin.source + ": expected key.path=value, e.g. --set optimizer.lr=0.01");
    }
    const std::string path = argument.substr(0, equals);
    const std::string value_text = argument.substr(equals + 1);
    // Validate the path component by component so the error names the first unknown part.
    std::string section;
    size_t start = 0;
    std::vector<std::string> components;
    for (;;) {
      const size_t dot = path.find('.', start);
      const std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const std::vector<std::string>& children = detail::section_children(section);
      if (name.empty() || std::find(children.begin(), children.end(), name) == children.end()) {
        throw ConfigError(origin.text() + ": " + unknown_key_message(section, name));
      }
      if (dot != std::string::npos && !detail::is_section(join_path(section, name))) {
        throw ConfigError(origin.text() + ": unknown key '" + path + "' ('" + join_path(section, name) +
                          "' is a single value, not a section)");
      }
      components.push_back(name);
      section = join_path(section, name);
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    YAML::Node value;
    try {
      const std::vector<YAML::Node> documents = load_all_documents(value_text);
      if (documents.size() > 1)
        throw ConfigError(origin.text() + ": key '" + path + "': the value holds more than one YAML document");
      if (!documents.empty()) value = documents[0];
    } catch (const YAML::Exception& error) {
      throw ConfigError(origin.text() + ": key '" + path + "': malformed value: " + printable(error.msg));
    }
    // An empty file gets its first section here; a file whose top level is a list or a scalar is refused
    // as read() refuses it without --set, not replaced by a mapping of the overrides alone.
    // "--set optimizer=" would replace the file's whole optimizer section by nothing, i.e. the defaults.
    if (detail::is_section(path) && (value.IsNull() || (value.IsMap() && value.size() == 0)))
      throw ConfigError(origin.text() + ": key '" + path +
                        "' is a section: setting it to an empty value would drop "
                        "all its keys; set single keys (--set " +
                        path + ".KEY=VALUE) or give a mapping");
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap()) throw_not_a_mapping(root);
    YAML::Node current = root;
    std::string walked;
    for (size_t i = 0; i + 1 < components.size(); ++i) {
      walked = join_path(walked, components[i]);
      YAML::Node child = current[components[i]];
      if (!child.IsDefined() || child.IsNull()) {
        child = YAML::Node(YAML::NodeType::Map);
      } else if (!child.IsMap()) {
        fail(detail::origin_of(child, file_origin_), walked,
             "expected a section (a mapping), got " + detail::describe(child));
      }
      current.reset(child);  // rebind the handle; assignment would overwrite the map entry
    }
    current[components.back()] = value;
    // A later --set of a section replaces what earlier ones put beneath it.
    for (auto it = override_origins_.begin(); it != override_origins_.end();) {
      it = it->first.rfind(path + ".", 0) == 0 ? override_origins_.erase(it) : std::next(it);
    }
    override_origins_[path] = origin;
  }

  void read(const YAML::Node& root, TrainConfig& config) {
    if (!root.IsDefined() || root.IsNull()) return;  // an empty file: all defaults
    if (!root.IsMap()) throw_not_a_mapping(root);
    walk(root, "", config);
  }

  [[noreturn]] void throw_not_a_mapping(const YAML::Node& root) const {
    throw ConfigError(detail::origin_of(root, file_origin_).text() +
                      ": expected a mapping of sections (run, model, data, train, ...), got " + detail::describe(root));
  }

  // Where the value of `path` came from: an override covering it, or its place in the file.
  Origin origin_for(const std::string& path, const YAML::Node& node) const {
    std::string prefix = path;
    for (;;) {
      auto found = override_origins_.find(prefix);
      if (found != override_origins_.end()) return found->second;
      const size_t dot = prefix.rfind('.');
      if (dot == std::string::npos) break;
      prefix = prefix.substr(0, dot);
    }
    return detail::origin_of(node, file_origin_);
  }

  // The origin of a key that was set, else of the first set key among `fallbacks`, else the file.
  Origin origin_of_key(const std::string& path, std::initializer_list<const char*> fallbacks = {}) const {
    auto found = leaf_origins_.find(path);
    if (found != leaf_origins_.end()) return found->second;
    for (const char* fallback : fallbacks) {
      found = leaf_origins_.find(fallback);
      if (found != leaf_origins_.end()) return found->second;
    }
    return Origin{file_origin_.source};
  }
  bool was_set(const std::string& path) const { return leaf_origins_.count(path) != 0; }

  // Reads a model architecture file: the keys of the model section, except `file` itself.
  void read_model_file(const YAML::Node& root, TrainConfig& config) {
    if (!root.IsDefined() || root.IsNull()) return;
    if (!root.IsMap()) {
      throw ConfigError(detail::origin_of(root, file_origin_).text() +
                        ": expected a mapping of model keys (arch, width, ...), got " + detail::describe(root));
    }
    excluded_keys_ = {"model.file"};
    walk(root, "model", config);
  }

  const std::map<std::string, Origin>& leaf_origins() const { return leaf_origins_; }
  void inherit_leaf_origins(const std::map<std::string, Origin>& origins) { leaf_origins_ = origins; }

 private:
  void walk(const YAML::Node& map, const std::string& section, TrainConfig& config) {
    std::map<std::string, Origin> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key = it->first;  // copies: the iterator hands out a temporary pair
      const YAML::Node value = it->second;
      const Origin key_origin = origin_for(section, key);
      if (!key.IsScalar()) {
        throw ConfigError(key_origin.text() + ": keys must be plain names, got " + detail::describe(key) +
                          (section.empty() ? "" : " in '" + section + "'"));
      }
      const std::string name = key.Scalar();
      const std::string path = join_path(section, name);
      if (auto previous = seen.find(name); previous != seen.end()) {
        throw ConfigError(key_origin.text() + ": duplicate key '" + path + "' (first set at " +
                          previous->second.text() + ")");
      }
      seen.emplace(name, key_origin);
      const std::vector<std::string>& children = detail::section_children(section);
      if (std::find(children.begin(), children.end(), name) == children.end()) {
        throw ConfigError(origin_for(path, key).text() + ": " + unknown_key_message(section, name));
      }
      if (excluded_keys_.count(path) != 0) {
        throw ConfigError(origin_for(path, key).text() + ": key '" + path + "' is not allowed here");
      }
      // An empty value is reported at its key (its own mark points past the end of the line).
      const Origin value_origin = value.IsNull() ? origin_for(path, key) : origin_for(path, value);
      if (detail::is_section(path)) {
        if (value.IsNull()) continue;  // "monitor:" with nothing under it keeps the defaults
        if (!value.IsMap()) {
          std::string keys;
          for (const std::string& child : detail::section_children(path)) keys += (keys.empty() ? "" : ", ") + child;
          fail(value_origin, path, "expected a section (a mapping of " + keys + "), got " + detail::describe(value));
        }
        walk(value, path, config);
        continue;
      }
      for (const detail::KeySpec& spec : detail::schema()) {
        if (spec.path == path) {
          spec.read(value, value_origin, config);
          leaf_origins_[path] = value_origin;
          break;
        }
      }
    }
  }

  Origin file_origin_;
  std::set<std::string> excluded_keys_;
  std::map<std::string, Origin> override_origins_;  // dotted path -> the --set that supplied it
  std::map<std::string, Origin> leaf_origins_;      // every key read, for cross-key messages
};

std::string format(double value) { return detail::format_number(value); }

// Rules that involve more than one key.
void check_consistency(const TrainConfig& config, const ConfigReader& reader) {
  auto require = [&](bool condition, const std::string& path, std::initializer_list<const char*> fallbacks,
                     const std::string& message) {
    if (!condition) fail(reader.origin_of_key(path, fallbacks), path, message);
  };
  require(config.train.epochs > 0 || config.train.max_steps > 0, "train.epochs", {"train.max_steps"},
          "train.epochs and train.max_steps are both 0; set at least one limit");
  const OptimizerConfig& optimizer = config.optimizer;
  const optim::OptimizerDescriptor* descriptor = optim::find_optimizer(optimizer.name);
  require(!optimizer.nesterov || (descriptor != nullptr && descriptor->has_momentum_option), "optimizer.nesterov",
          {"optimizer.name"}, "nesterov applies to sgd only (optimizer.name is " + optimizer.name + ")");
  require(!optimizer.nesterov || (optimizer.momentum > 0.0 && optimizer.dampening == 0.0), "optimizer.nesterov",
          {"optimizer.momentum"}, "Nesterov momentum needs optimizer.momentum > 0 and optimizer.dampening = 0");
  const OptimizerSettings& settings = optimizer.settings;
  require(!settings.fp16_momentum || settings.state_dtype != "bf16", "optimizer.settings.state_dtype",
          {"optimizer.settings.fp16_momentum"}, "bf16 conflicts with fp16_momentum: true (which stores states as f16)");
  require(!settings.fp32_weight_decay || optimizer.weight_decay == 0.0 ||
              optimizer.weight_decay == *settings.fp32_weight_decay,
          "optimizer.weight_decay", {"optimizer.settings.fp32_weight_decay"},
          "conflicts with optimizer.settings.fp32_weight_decay (" +
              (settings.fp32_weight_decay ? format(*settings.fp32_weight_decay) : std::string()) + "); set only one");
  require(settings.lamb_trust_bounds[0] < settings.lamb_trust_bounds[1], "optimizer.settings.lamb_trust_bounds", {},
          "the lower bound must be below the upper bound");
  require(settings.sparsification.initial_density >= settings.sparsification.density,
          "optimizer.settings.sparsification.initial_density", {"optimizer.settings.sparsification.density"},
          "must be >= density (" + format(settings.sparsification.density) + "): the warm-up starts dense");
  const SchedulerConfig& scheduler = config.scheduler;
  require(scheduler.warmup_steps == 0 || scheduler.warmup_epochs == 0.0, "scheduler.warmup_epochs",
          {"scheduler.warmup_steps"}, "set scheduler.warmup_steps or scheduler.warmup_epochs, not both");
  require(scheduler.min_lr <= optimizer.lr, "scheduler.min_lr", {"optimizer.lr"},
          "must not exceed optimizer.lr (" + format(optimizer.lr) + ")");
  // Models of feature rows (ctr, dlrm) each read one dataset; image models read images.
  const RowModel* row_model = row_model_of_arch(config.model.arch);
  const RowModel* rows_for = row_model_of_dataset(config.data.dataset);
  if (row_model != nullptr)
    require(config.data.dataset == row_model->dataset, "model.arch", {"data.dataset"},
            "model '" + config.model.arch + "' needs data.dataset " + row_model->dataset + " (it is " +
                config.data.dataset + ")" +
                (rows_for != nullptr ? "; " + config.data.dataset + " goes with model '" + rows_for->arch + "'" : ""));
  else
    require(rows_for == nullptr, "model.arch", {"data.dataset"},
            "model '" + config.model.arch + "' needs an image dataset (data.dataset is " + config.data.dataset +
                ", which goes with model '" + (rows_for != nullptr ? rows_for->arch : "") + "')");
  require(rows_for == nullptr || (config.data.augment.crop_padding == 0 && !config.data.augment.flip),
          "data.augment.crop_padding", {"data.augment.flip"},
          "crop/flip augmentation applies to image datasets, not " + config.data.dataset);
  const DataConfig& data = config.data;
  require(data.mean.size() == data.std.size(), "data.std", {"data.mean"},
          "has " + std::to_string(data.std.size()) + " entries and data.mean " + std::to_string(data.mean.size()) +
              "; give both, one per channel, or neither (the dataset's own statistics)");
  const bool generated = data.dataset == "synthetic" || data.dataset == "ctr_synthetic";
  const bool unnormalised = generated || rows_for != nullptr;
  const size_t channels = data.dataset == "fashion_mnist" ? 1 : 3;
  require(data.mean.empty() || (!unnormalised && data.mean.size() == channels), "data.mean", {"data.dataset"},
          unnormalised ? "applies to datasets with normalisation statistics, not to " +
                             std::string(generated ? "the generated " : "") + data.dataset
                       : "needs " + std::string(channels == 1 ? "1 entry" : "3 entries") + " for " + data.dataset +
                             ", one per channel");
  require(!data.color_jitter.enabled() || data.dataset == "image_folder", "data.color_jitter.brightness",
          {"data.color_jitter.contrast", "data.color_jitter.saturation", "data.color_jitter.hue"},
          "colour jitter applies to image_folder's training crops, not to " + data.dataset);
  const RandomResizedCropConfig& crop = config.data.random_resized_crop;
  require(crop.scale[0] <= crop.scale[1], "data.random_resized_crop.scale", {},
          "the lower bound must not exceed the upper");
  require(crop.ratio[0] <= crop.ratio[1], "data.random_resized_crop.ratio", {},
          "the lower bound must not exceed the upper");
  // Each extent and vocabulary is bounded by its key; these products stay below int64 with them.
  const SyntheticDataConfig& synthetic = config.data.synthetic;
  const int64_t image_values = synthetic.channels * synthetic.height * synthetic.width;
  require(image_values <= detail::kMaxSyntheticImageValues, "data.synthetic.channels",
          {"data.synthetic.height", "data.synthetic.width"},
          "channels x height x width = " + std::to_string(image_values) + " values per image, more than the " +
              std::to_string(detail::kMaxSyntheticImageValues) + " (1 GiB of f32) allowed");
  int64_t vocabulary = 0;
  for (int64_t size : config.data.ctr.vocab_sizes) vocabulary += size;
  require(vocabulary <= detail::kMaxCtrVocabulary, "data.ctr.vocab_sizes", {},
          "the vocabularies total " + std::to_string(vocabulary) + " values, more than the " +
              std::to_string(detail::kMaxCtrVocabulary) +
              " allowed (each needs a planted weight and an embedding row)");
  if (config.model.arch == "dlrm") {
    const ModelConfig& model = config.model;
    const size_t fields = static_cast<size_t>(data::kCriteoCategoricalFields);
    require(model.hash_buckets.size() == 1 || model.hash_buckets.size() == fields, "model.hash_buckets", {},
            "has " + std::to_string(model.hash_buckets.size()) + " entries; give one row count for every categorical " +
                "field or 26, one each for C1 .. C26");
    require(model.bottom_mlp.back() == model.embedding_dim, "model.bottom_mlp", {"model.embedding_dim"},
            "ends in " + std::to_string(model.bottom_mlp.back()) + " but must end in model.embedding_dim (" +
                std::to_string(model.embedding_dim) +
                "): its output is the 27th vector of the dot interaction, beside the 26 embeddings");
    // Each entry is at most 2^40 (its key), so 26 of them add up without overflow.
    int64_t rows = 0;
    for (size_t f = 0; f < fields; ++f) rows += model.hash_buckets[model.hash_buckets.size() == 1 ? 0 : f];
    int64_t values = 0;
    require(!__builtin_mul_overflow(rows, model.embedding_dim, &values) && values <= detail::kMaxDlrmTableValues,
            "model.hash_buckets", {"model.embedding_dim"},
            "the table of " + std::to_string(rows) + " rows x model.embedding_dim " +
                std::to_string(model.embedding_dim) + " has more than the " +
                std::to_string(detail::kMaxDlrmTableValues) + " values (256 GiB of f32) allowed");
  }
}

// A run name from a file name: its stem, with characters a folder name should not hold replaced.
std::string run_name_from(const std::string& source) {
  std::string name = std::filesystem::path(source).stem().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return name.empty() || name == "." || name == ".." ? "run" : name;
}

// Config and architecture files: regular files of at most 16 MiB (far above any real config), so that
// --config /dev/zero or a FIFO cannot make the loader read without end.
constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;

std::string read_text_file(const std::string& path, const char* what) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (fs::is_directory(status)) throw ConfigError(path + ": is a folder, not a " + what);
  if (fs::exists(status) && !fs::is_regular_file(status))
    throw ConfigError(path + ": is not a regular file (a device, pipe or socket); expected a " + what);
  std::ifstream file(path, std::ios::binary);
  if (!file) throw ConfigError(path + ": cannot read " + what + " (" + std::strerror(errno) + ")");
  std::string text;
  char buffer[1 << 16];
  while (file.read(buffer, sizeof buffer) || file.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(file.gcount()));
    if (text.size() > kMaxConfigBytes)
      throw ConfigError(path + ": is larger than 16 MiB; a " + what + " is a small YAML file");
  }
  if (file.bad()) throw ConfigError(path + ": cannot read " + what + " (" + std::strerror(errno) + ")");
  return text;
}

// model.file names an architecture YAML holding model keys (models/*.yaml). Its keys are read first, so
// keys written in the config's own model section override them. A relative path is looked up next to
// the config file, then in the current folder; the path found is returned (absolute, so a resolved
// config written elsewhere still finds it) and "" when there is no model file.
std::string load_model_file(const YAML::Node& root, const std::string& source, ConfigReader& reader,
                            TrainConfig& config) {
  if (!root.IsMap()) return {};
  const YAML::Node model = root["model"];  // const lookups: absent keys give invalid nodes, never insert
  if (!model.IsDefined() || !model.IsMap()) return {};
  const YAML::Node node = model["file"];
  if (!node.IsDefined()) return {};
  const Origin origin = reader.origin_for("model.file", node);
  TrainConfig scratch;
  for (const detail::KeySpec& spec : detail::schema()) {
    if (spec.path == "model.file") spec.read(node, origin, scratch);  // type check
  }
  const std::string& written = scratch.model.file;
  if (written.empty()) return {};
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  const fs::path as_written(written);
  if (as_written.is_relative() && origin.line >= 0) candidates.push_back(fs::path(source).parent_path() / as_written);
  candidates.push_back(as_written);
  std::error_code error;
  for (const fs::path& candidate : candidates) {
    if (!fs::is_regular_file(candidate, error)) continue;
    const std::string path = fs::absolute(candidate, error).lexically_normal().string();
    ConfigReader model_reader(path);
    model_reader.read_model_file(model_reader.parse(read_text_file(path, "architecture file")), config);
    reader.inherit_leaf_origins(model_reader.leaf_origins());
    return path;
  }
  std::string tried;
  for (const fs::path& candidate : candidates) tried += (tried.empty() ? "" : ", ") + candidate.string();
  fail(origin, "model.file", "cannot read the architecture file (tried " + tried + ")");
}

TrainConfig load(const std::string& text, const std::string& source, const std::string& default_run_name,
                 const std::vector<detail::LocatedOverride>& overrides) {
  ConfigReader reader(source);
  YAML::Node root = reader.parse(text);
  for (const detail::LocatedOverride& entry : overrides) reader.apply_override(root, entry.argument, entry.origin);
  TrainConfig config;
  const std::string model_file = load_model_file(root, source, reader, config);
  reader.read(root, config);
  if (!model_file.empty()) config.model.file = model_file;
  if (config.run.name.empty()) config.run.name = default_run_name;
  if (config.run.out_dir.empty()) config.run.out_dir = "runs/" + config.run.name;
  // optimizer.lr, optimizer.eps and optimizer.betas left out of the file take the optimizer's own defaults
  // (lion: 1e-4 and [0.9, 0.99]; adagrad: 1e-2 and eps 1e-10); the resolved config.yaml then records them.
  if (const optim::OptimizerDescriptor* descriptor = optim::find_optimizer(config.optimizer.name)) {
    if (!reader.was_set("optimizer.lr")) config.optimizer.lr = descriptor->default_lr;
    if (!reader.was_set("optimizer.eps")) config.optimizer.eps = descriptor->default_eps;
    if (!reader.was_set("optimizer.betas"))
      config.optimizer.betas = {descriptor->default_betas.first, descriptor->default_betas.second};
  }
  check_consistency(config, reader);
  config.source = source;
  validate_config(config);
  return config;
}

std::vector<detail::LocatedOverride> from_set_arguments(const std::vector<std::string>& set_overrides) {
  std::vector<detail::LocatedOverride> overrides;
  for (const std::string& argument : set_overrides) overrides.push_back({argument, ""});
  return overrides;
}

}  // namespace

TrainConfig load_config(const std::string& path, const std::vector<std::string>& set_overrides) {
  return load(read_text_file(path, "config file"), path, run_name_from(path), from_set_arguments(set_overrides));
}

TrainConfig load_config_text(const std::string& yaml_text, const std::string& source_name,
                             const std::vector<std::string>& set_overrides) {
  return load(yaml_text, source_name, run_name_from(source_name), from_set_arguments(set_overrides));
}

TrainConfig load_default_config(const std::vector<std::string>& set_overrides) {
  return load(default_config_yaml(), kEmbeddedSource, "quickstart", from_set_arguments(set_overrides));
}

namespace detail {

TrainConfig load_config_located(const std::string& path, const std::vector<LocatedOverride>& overrides) {
  return load(read_text_file(path, "config file"), path, run_name_from(path), overrides);
}

std::string read_yaml_file(const std::string& path, const char* what) { return read_text_file(path, what); }

YAML::Node parse_yaml_document(const std::string& text, const std::string& source) {
  return ConfigReader(source).parse(text);
}

}  // namespace detail

const std::string& default_config_yaml() {
  static const std::string text = detail::kQuickstartYaml;
  return text;
}

bool TrainConfig::operator==(const TrainConfig& other) const {
  return run == other.run && model == other.model && data == other.data && train == other.train &&
         optimizer == other.optimizer && scheduler == other.scheduler && monitor == other.monitor &&
         logging == other.logging && checkpoint == other.checkpoint && distributed == other.distributed;
}

double TrainConfig::effective_weight_decay() const {
  return optimizer.settings.fp32_weight_decay.value_or(optimizer.weight_decay);
}

std::string TrainConfig::effective_state_dtype() const {
  return optimizer.settings.fp16_momentum ? "f16" : optimizer.settings.state_dtype;
}

bool TrainConfig::loss_scaling_enabled() const {
  return optimizer.settings.loss_scaling.enabled.value_or(train.precision == "fp16");
}

}  // namespace opsnn::train
