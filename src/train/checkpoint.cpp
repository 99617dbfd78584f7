// Checkpoint folders: atomic save (temporary folder, fsync, rename), pruning, discovery for --resume
// auto, and a verifying load (state.json self-CRC, tensor file sizes and CRC-32s, then safetensors).
#include "opsnn/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>  // state.json (kept out of the public header)

#include "core/json_reader.h"

namespace opsnn::train {

using Json = nlohmann::json;  // sorted keys: the canonical form the state CRC is computed over

namespace {

constexpr std::string_view kFormatName = "opsnn-checkpoint";
constexpr std::string_view kStepPrefix = "step_";
constexpr std::string_view kTemporaryPrefix = ".tmp-";
constexpr std::string_view kReplacedPrefix = ".old-";
constexpr const char* kStateCrcKey = "state_crc32";

std::string system_reason() { return std::strerror(errno); }

// Closes a POSIX file descriptor on scope exit.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

void write_file_durably(const std::filesystem::path& path, std::string_view bytes) {
  FileDescriptor file{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  OPSNN_CHECK(file.fd >= 0, "cannot create ", path.string(), ": ", system_reason());
  while (!bytes.empty()) {
    ssize_t written = ::write(file.fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    OPSNN_CHECK(written > 0, "cannot write ", path.string(), ": ", system_reason());
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  OPSNN_CHECK(::fsync(file.fd) == 0, "cannot flush ", path.string(), " to disk: ", system_reason());
  int fd = file.fd;
  file.fd = -1;
  OPSNN_CHECK(::close(fd) == 0, "cannot close ", path.string(), ": ", system_reason());
}

// A rename is durable only once the folder holding the entry is flushed too.
void sync_directory(const std::filesystem::path& directory) {
  FileDescriptor folder{::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  OPSNN_CHECK(folder.fd >= 0, "cannot open folder ", directory.string(), ": ", system_reason());
  OPSNN_CHECK(::fsync(folder.fd) == 0, "cannot flush folder ", directory.string(), ": ", system_reason());
}

void rename_path(const std::filesystem::path& from, const std::filesystem::path& to) {
  OPSNN_CHECK(::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from.string(), " to ", to.string(), ": ",
              system_reason());
}

// The step of a folder named step_<digits>, or nullopt.
std::optional<int64_t> parse_step_folder_name(std::string_view name) {
  if (!name.starts_with(kStepPrefix) || name.size() == kStepPrefix.size()) return std::nullopt;
  std::string_view digits = name.substr(kStepPrefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t step = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

bool holds_all_files(const std::filesystem::path& folder) {
  std::error_code error;
  for (std::string_view name : {kModelFileName, kOptimizerFileName, kStateFileName})
    if (!std::filesystem::is_regular_file(folder / name, error)) return false;
  return true;
}

// Doubles in state.json: numbers when finite (nlohmann prints them round-trip exact), else a string,
// because JSON has no NaN or infinity and the step state may legitimately hold them.
Json encode_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

Json encode_step_state(const optim::StepState& state) {
  // Every field must be saved for a bit-identical resume: a new StepState member needs a line here
  // and in StateReader::step_state.
  static_assert(sizeof(optim::StepState) == 80, "optim::StepState changed: update checkpoint.cpp (de)serialization");
  return Json{{"step", state.step},
              {"skipped_steps", state.skipped_steps},
              {"lr", encode_double(state.lr)},
              {"beta1_power", encode_double(state.beta1_power)},
              {"beta2_power", encode_double(state.beta2_power)},
              {"loss_scale", encode_double(state.loss_scale)},
              {"growth_tracker", state.growth_tracker},
              {"found_inf", state.found_inf},
              {"grad_norm", encode_double(state.grad_norm)},
              {"clip_factor", encode_double(state.clip_factor)},
              {"monitor_flags", state.monitor_flags},
              {"first_nonfinite_step", state.first_nonfinite_step},
              {"first_nonfinite_segment", state.first_nonfinite_segment}};
}

Json file_record(const FileDigest& digest) { return Json{{"size_bytes", digest.size_bytes}, {"crc32", digest.crc32}}; }

std::string hex32(uint32_t value) {
  char text[11];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

// Typed access to state.json fields; every problem is a DataError naming the file and the field.
class StateReader : public JsonReader {
 public:
  using JsonReader::JsonReader;

  optim::StepState step_state(const Json& root) const {
    const std::string parent = "step_state";
    const Json& json = object(root, "", "step_state");
    optim::StepState state;
    state.step = integer<int64_t>(json, parent, "step");
    state.skipped_steps = integer<int64_t>(json, parent, "skipped_steps");
    state.lr = real(json, parent, "lr");
    state.beta1_power = real(json, parent, "beta1_power");
    state.beta2_power = real(json, parent, "beta2_power");
    state.loss_scale = static_cast<float>(real(json, parent, "loss_scale"));
    state.growth_tracker = integer<int32_t>(json, parent, "growth_tracker");
    state.found_inf = integer<int32_t>(json, parent, "found_inf");
    state.grad_norm = static_cast<float>(real(json, parent, "grad_norm"));
    state.clip_factor = static_cast<float>(real(json, parent, "clip_factor"));
    state.monitor_flags = integer<uint32_t>(json, parent, "monitor_flags");
    state.first_nonfinite_step = integer<int64_t>(json, parent, "first_nonfinite_step");
    state.first_nonfinite_segment = integer<int32_t>(json, parent, "first_nonfinite_segment");
    return state;
  }

  FileDigest file_record(const Json& root, std::string_view file_name) const {
    const Json& files = object(root, "", "files");
    std::string key(file_name);
    std::string parent = "files." + key;
    const Json& record = object(files, "files", key.c_str());
    return FileDigest{integer<uint64_t>(record, parent, "size_bytes"), integer<uint32_t>(record, parent, "crc32")};
  }
};

// The error for a file given as a checkpoint that is not a state.json; `why` says what it is instead.
DataError not_a_state_file(const std::string& source, const char* why) {
  return DataError(
      detail::concat(source, ": expected a checkpoint folder or its ", kStateFileName, " (this file ", why, ")"));
}

// Reads one tensor file of a checkpoint, checking it against the size and CRC that state.json recorded.
NamedTensors load_tensor_file(const std::filesystem::path& folder, std::string_view file_name,
                              const FileDigest& recorded) {
  std::filesystem::path path = folder / file_name;
  std::error_code error;
  if (!std::filesystem::exists(path, error))
    throw DataError(detail::concat(path.string(), ": missing from the checkpoint folder (incomplete checkpoint)"));
  std::string bytes = read_file_bytes(path);
  if (bytes.size() != recorded.size_bytes)
    throw DataError(detail::concat(path.string(), ": is ", bytes.size(), " bytes but state.json records ",
                                   recorded.size_bytes, " (truncated or replaced)"));
  uint32_t crc = crc32_of(bytes);
  if (crc != recorded.crc32)
    throw DataError(detail::concat(path.string(), ": CRC-32 ", hex32(crc), " differs from ", hex32(recorded.crc32),
                                   " recorded in state.json (the file is corrupt)"));
  return decode_safetensors(bytes, path.string()).tensors;
}

void remove_quietly(const std::filesystem::path& path) {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

}  // namespace

std::string checkpoint_folder_name(int64_t step) {
  OPSNN_CHECK(step >= 0, "checkpoint step must be non-negative, got ", step);
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%08lld", static_cast<long long>(step));
  return std::string(kStepPrefix) + digits;
}

std::string config_digest(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis and prime
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return std::string("fnv1a64:") + hex;
}

std::vector<CheckpointEntry> list_checkpoints(const std::filesystem::path& run_dir) {
  std::filesystem::path checkpoints_dir = run_dir / "checkpoints";
  std::vector<CheckpointEntry> entries;
  std::error_code error;
  if (!std::filesystem::is_directory(checkpoints_dir, error)) return entries;
  for (const auto& item : std::filesystem::directory_iterator(checkpoints_dir, error)) {
    std::optional<int64_t> step = parse_step_folder_name(item.path().filename().string());
    if (step && item.is_directory(error) && holds_all_files(item.path())) entries.push_back({*step, item.path()});
  }
  OPSNN_CHECK_AS(DataError, !error, "cannot list ", checkpoints_dir.string(), ": ", error.message());
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.step != b.step ? a.step < b.step : a.path < b.path; });
  return entries;
}

std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& run_dir) {
  std::vector<CheckpointEntry> entries = list_checkpoints(run_dir);
  if (entries.empty()) return std::nullopt;
  return entries.back().path;
}

std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, const CheckpointData& data, int keep_last) {
  OPSNN_CHECK(keep_last >= 0, "keep_last must be >= 0 (0 keeps every checkpoint), got ", keep_last);
  std::string folder_name = checkpoint_folder_name(data.step);
  Json extra = Json::parse(data.extra_json, nullptr, /*allow_exceptions=*/false);
  OPSNN_CHECK(extra.is_object(), "checkpoint extra_json must be a JSON object, got: ", data.extra_json);

  std::filesystem::path checkpoints_dir = run_dir / "checkpoints";
  std::error_code error;
  std::filesystem::create_directories(checkpoints_dir, error);
  OPSNN_CHECK(!error, "cannot create ", checkpoints_dir.string(), ": ", error.message());
  // Leftovers of saves that crashed midway: never complete, safe to drop (one writer per run folder).
  for (const auto& item : std::filesystem::directory_iterator(checkpoints_dir, error)) {
    std::string name = item.path().filename().string();
    if (name.starts_with(kTemporaryPrefix) || name.starts_with(kReplacedPrefix)) remove_quietly(item.path());
  }

  std::filesystem::path temporary = checkpoints_dir / (std::string(kTemporaryPrefix) + folder_name);
  std::filesystem::path final_path = checkpoints_dir / folder_name;
  try {
    std::filesystem::create_directory(temporary, error);
    OPSNN_CHECK(!error, "cannot create ", temporary.string(), ": ", error.message());
    SafetensorsMetadata metadata{{"producer", "opsnn " OPSNN_VERSION}, {"step", std::to_string(data.step)}};
    FileDigest model = write_safetensors(temporary / kModelFileName, data.model_tensors, metadata);
    FileDigest optimizer = write_safetensors(temporary / kOptimizerFileName, data.optimizer_tensors, metadata);

    Json rng = Json::object();
    for (const auto& [name, state] : data.rng) rng[name] = Json{{"seed", state.seed}, {"offset", state.offset}};
    Json state{{"format", kFormatName},
               {"format_version", kCheckpointFormatVersion},
               {"step", data.step},
               {"epoch", data.epoch},
               {"step_state", encode_step_state(data.step_state)},
               {"rng", rng},
               {"data_loader",
                {{"epoch", data.data_loader.epoch},
                 {"batch_in_epoch", data.data_loader.batch_in_epoch},
                 {"samples_seen", data.data_loader.samples_seen}}},
               {"config_digest", data.config_digest},
               {"extra", extra},
               {"files", {{kModelFileName, file_record(model)}, {kOptimizerFileName, file_record(optimizer)}}}};
    // state.json guards itself: a CRC of its canonical compact form, so a flipped digit is caught too.
    state[kStateCrcKey] = crc32_of(state.dump());
    write_file_durably(temporary / kStateFileName, state.dump(2) + "\n");
    sync_directory(temporary);

    if (std::filesystem::exists(final_path, error)) {  // same step saved again: swap the new one in
      std::filesystem::path replaced = checkpoints_dir / (std::string(kReplacedPrefix) + folder_name);
      rename_path(final_path, replaced);
      rename_path(temporary, final_path);
      remove_quietly(replaced);
    } else {
      rename_path(temporary, final_path);
    }
    sync_directory(checkpoints_dir);
  } catch (const nlohmann::json::exception& json_error) {
    remove_quietly(temporary);
    throw Error(detail::concat("cannot write checkpoint ", final_path.string(), ": ", json_error.what()));
  } catch (...) {
    remove_quietly(temporary);
    throw;
  }

  if (keep_last > 0) {
    std::vector<CheckpointEntry> entries = list_checkpoints(run_dir);
    // Oldest first; the checkpoint just written stays even when stale higher steps exist.
    size_t excess = entries.size() > static_cast<size_t>(keep_last) ? entries.size() - keep_last : 0;
    for (size_t i = 0; i < entries.size() && excess > 0; ++i) {
      if (entries[i].path.filename() == folder_name) continue;
      std::filesystem::remove_all(entries[i].path, error);
      OPSNN_CHECK(!error, "cannot delete old checkpoint ", entries[i].path.string(), ": ", error.message());
      --excess;
    }
  }
  return final_path;
}

CheckpointState parse_checkpoint_state(std::string_view state_text, const std::string& source,
                                       const std::filesystem::path& folder) {
  // Not JSON at all (another file given by mistake): say what was expected rather than report its bytes
  // as a JSON syntax error.
  size_t first = state_text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || state_text[first] != '{')
    throw not_a_state_file(source, first == std::string::npos ? "is empty" : "does not hold a JSON object");
  Json state = parse_json_object(state_text, source);
  StateReader reader(source);
  uint32_t recorded_crc = reader.integer<uint32_t>(state, "", kStateCrcKey);
  state.erase(kStateCrcKey);
  if (crc32_of(state.dump()) != recorded_crc)
    throw DataError(
        detail::concat(source, ": content does not match its ", kStateCrcKey, " (the file is corrupt or was edited)"));
  reader.require_format(state, kFormatName, kCheckpointFormatVersion);

  CheckpointState result;
  CheckpointData& data = result.data;
  data.folder = folder;
  data.step = reader.integer<int64_t>(state, "", "step");
  data.epoch = reader.integer<int64_t>(state, "", "epoch");
  if (data.step < 0) reader.fail("step", "negative step ", data.step);
  if (data.epoch < 0) reader.fail("epoch", "negative epoch ", data.epoch);
  std::string folder_name = (folder.filename().empty() ? folder.parent_path() : folder).filename().string();
  std::optional<int64_t> folder_step = parse_step_folder_name(folder_name);
  if (folder_step && *folder_step != data.step)
    reader.fail("step", "step ", data.step, " does not match the folder name ", folder_name);
  data.step_state = reader.step_state(state);
  for (const auto& [name, entry] : reader.object(state, "", "rng").items()) {
    std::string parent = "rng." + name;
    if (!entry.is_object()) reader.fail(parent, "expected an object with seed and offset");
    data.rng[name] =
        RngState{reader.integer<uint64_t>(entry, parent, "seed"), reader.integer<uint64_t>(entry, parent, "offset")};
  }
  const Json& loader = reader.object(state, "", "data_loader");
  data.data_loader.epoch = reader.integer<int64_t>(loader, "data_loader", "epoch");
  data.data_loader.batch_in_epoch = reader.integer<int64_t>(loader, "data_loader", "batch_in_epoch");
  data.data_loader.samples_seen = reader.integer<int64_t>(loader, "data_loader", "samples_seen");
  // Counts and positions: a negative one would seek the loader or report progress from nowhere. How
  // they relate to each other and to the config is the trainer's to check (it knows the epoch length).
  for (const char* key : {"epoch", "batch_in_epoch", "samples_seen"}) {
    int64_t value = reader.integer<int64_t>(loader, "data_loader", key);
    if (value < 0) reader.fail(JsonReader::join("data_loader", key), "negative value ", value);
  }
  data.config_digest = reader.text(state, "", "config_digest");
  data.extra_json = reader.object(state, "", "extra").dump();

  result.model_file = reader.file_record(state, kModelFileName);
  result.optimizer_file = reader.file_record(state, kOptimizerFileName);
  return result;
}

CheckpointData load_checkpoint(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::path folder, state_path;
  if (std::filesystem::is_directory(path, error)) {
    folder = path;
    state_path = path / kStateFileName;
    if (!std::filesystem::exists(state_path, error))
      throw DataError(detail::concat(state_path.string(),
                                     ": missing from the checkpoint folder (incomplete "
                                     "checkpoint, or not a checkpoint folder)"));
  } else if (std::filesystem::exists(path, error)) {
    state_path = path;
    folder = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  } else {
    throw DataError(detail::concat("checkpoint ", path.string(), " does not exist"));
  }

  // Another file of the folder (model.safetensors, say) given by mistake: say what was expected, before
  // reading what may be gigabytes of tensors only to report them as a JSON syntax error.
  if (path.extension() == ".safetensors") throw not_a_state_file(state_path.string(), "is a tensor file");
  CheckpointState state = parse_checkpoint_state(read_file_bytes(state_path), state_path.string(), folder);
  CheckpointData& data = state.data;
  data.model_tensors = load_tensor_file(folder, kModelFileName, state.model_file);
  data.optimizer_tensors = load_tensor_file(folder, kOptimizerFileName, state.optimizer_file);
  return std::move(data);
}

}  // namespace opsnn::train
