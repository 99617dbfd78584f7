// Training checkpoints on disk: <run>/checkpoints/step_<8-digit step>/ holding model.safetensors,
// optimizer.safetensors and state.json (step state, RNG, data-loader position, config digest, the
// trainer's free-form JSON, and the size + CRC-32 of both tensor files). Saving is atomic (a temporary
// folder, fsynced, then renamed); loading verifies sizes and CRCs before parsing and refuses a corrupt
// or truncated checkpoint with a DataError naming the file and the fault.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opsnn/optim/step_state.h"
#include "opsnn/train/safetensors.h"

namespace opsnn::train {

// state.json's "format_version"; a reader refuses versions it does not know.
inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr std::string_view kModelFileName = "model.safetensors";
inline constexpr std::string_view kOptimizerFileName = "optimizer.safetensors";
inline constexpr std::string_view kStateFileName = "state.json";

// A Philox Generator's state (opsnn/core/rng.h): Generator::set_state(seed, offset) restores it.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  bool operator==(const RngState&) const = default;
};

// Where the data loader resumes: the epoch it is in and the next batch of that epoch.
struct DataLoaderPosition {
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t samples_seen = 0;
  bool operator==(const DataLoaderPosition&) const = default;
};

// Everything a checkpoint holds. Loaded tensors are CPU and contiguous, in file order.
struct CheckpointData {
  int64_t step = 0;  // completed training steps; names the folder
  int64_t epoch = 0;
  optim::StepState step_state;          // host copy of the optimizer's step state
  std::map<std::string, RngState> rng;  // named generators ("train", "data", ...)
  DataLoaderPosition data_loader;
  std::string config_digest;       // e.g. config_digest(resolved config text)
  std::string extra_json = "{}";   // a JSON object the trainer adds (read back re-serialized)
  NamedTensors model_tensors;      // parameters and buffers by module name
  NamedTensors optimizer_tensors;  // optimizer state tensors by name
  std::filesystem::path folder;    // where load_checkpoint read it from (save_checkpoint ignores it)
};

// A complete checkpoint folder found on disk.
struct CheckpointEntry {
  int64_t step = 0;
  std::filesystem::path path;
};

// "step_00001200" for step 1200 (wider when the step needs more than 8 digits).
std::string checkpoint_folder_name(int64_t step);

// Writes <run_dir>/checkpoints/step_<step>/ atomically and returns its path: the files go into
// .tmp-step_<step>/ in the same folder, are fsynced, and the folder is renamed into place (an existing
// checkpoint of the same step is replaced). Leftover temporary folders of interrupted saves are removed.
// keep_last > 0 then deletes the oldest complete checkpoints until keep_last remain, never the one just
// written (so a resumed run that saves below stale higher steps keeps its own); 0 keeps all.
// One writer per run folder. Throws opsnn::Error (with the path and reason) when writing fails, or
// when extra_json is not a JSON object.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, const CheckpointData& data,
                                      int keep_last = 0);

// Complete checkpoints under <run_dir>/checkpoints, oldest first: folders named step_<digits> that
// hold all three files. Temporary and incomplete folders are skipped (not verified; load does that).
std::vector<CheckpointEntry> list_checkpoints(const std::filesystem::path& run_dir);
// The newest of list_checkpoints (for --resume auto); nullopt when there is none.
std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& run_dir);

// Loads a checkpoint from its folder or its state.json. Checks state.json (its own CRC, format,
// version, every field), then each tensor file's size and CRC-32 against state.json, then parses the
// tensors. Throws opsnn::DataError naming the file and what is wrong; never crashes on bad bytes.
CheckpointData load_checkpoint(const std::filesystem::path& path);

// The first half of load_checkpoint: state.json's text validated (its own CRC, format, version, every
// field) without opening the tensor files, whose recorded sizes and CRC-32s it returns. `source` names
// the text in messages; `folder` is the checkpoint folder (its step_<digits> name must match the step).
struct CheckpointState {
  CheckpointData data;  // without tensors
  FileDigest model_file, optimizer_file;
};
CheckpointState parse_checkpoint_state(std::string_view state_text, const std::string& source,
                                       const std::filesystem::path& folder);

// A short stable digest of a text (the resolved config): "fnv1a64:<16 hex digits>".
std::string config_digest(std::string_view text);

}  // namespace opsnn::train
