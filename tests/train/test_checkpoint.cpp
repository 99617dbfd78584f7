// Tests of src/train/checkpoint.cpp: full round trip, atomic save (no temporary folder left), keep_last
// pruning, --resume auto discovery, and refusal of missing, truncated and corrupted checkpoint files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <random>

#include "opsnn/train/checkpoint.h"
#include "support/catch.h"

using namespace opsnn;
using namespace opsnn::train;
namespace fs = std::filesystem;

namespace {

// A fresh run folder under the system temp folder, deleted at scope exit.
struct TemporaryRunDir {
  fs::path path;
  TemporaryRunDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("opsnn-checkpoint-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TemporaryRunDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

CheckpointData sample_checkpoint(int64_t step) {
  CheckpointData data;
  data.step = step;
  data.epoch = 3;
  data.step_state.step = step;
  data.step_state.skipped_steps = 2;
  data.step_state.lr = 0.1 + 0.2;  // not exactly representable in short decimal: must survive bit-exactly
  data.step_state.beta1_power = std::pow(0.9, static_cast<double>(step));
  data.step_state.beta2_power = std::pow(0.999, static_cast<double>(step));
  data.step_state.loss_scale = 32768.0f;
  data.step_state.growth_tracker = 17;
  data.step_state.found_inf = 1;
  data.step_state.grad_norm = std::numeric_limits<float>::quiet_NaN();
  data.step_state.clip_factor = 0.3f;
  data.step_state.monitor_flags = optim::kNonFiniteGrad | optim::kStepSkipped;
  data.step_state.first_nonfinite_step = 11;
  data.step_state.first_nonfinite_segment = 4;
  data.rng["train"] = RngState{42, 123456789012345ull};
  data.rng["data"] = RngState{~0ull, 7};
  data.data_loader = DataLoaderPosition{3, 17, 12345};
  data.config_digest = config_digest("model: {arch: mlp}");
  data.extra_json = R"({"best_test_acc": 0.875, "lr_history": [0.1, 0.01], "note": "ok"})";
  data.model_tensors = {{"fc1.weight", Tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 1e-30f, -0.0f, 7.5f}, {2, 3})},
                        {"fc1.bias", Tensor::from_vector<float>({0.5f, -0.5f}, {2})},
                        {"bn.num_batches_tracked", Tensor::from_vector<int64_t>({step}, {})},
                        {"empty", Tensor::empty({0, 4}, DType::bf16)}};
  data.optimizer_tensors = {
      {"exp_avg", Tensor::from_vector<float>({1e-3f, 2e-3f, 3e-3f, 4e-3f, 5e-3f, 6e-3f, 7e-3f, 8e-3f}, {8})},
      {"exp_avg_sq", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {8}, DType::f16)}};
  return data;
}

std::string raw_bytes(const Tensor& tensor) {
  if (tensor.nbytes() == 0) return {};
  Tensor host = tensor.contiguous();
  return std::string(static_cast<const char*>(host.data_ptr()), host.nbytes());
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

void require_same_tensors(const NamedTensors& actual, const NamedTensors& expected) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO(expected[i].first);
    CHECK(actual[i].first == expected[i].first);
    CHECK(actual[i].second.dtype() == expected[i].second.dtype());
    CHECK(actual[i].second.shape() == expected[i].second.shape());
    CHECK(raw_bytes(actual[i].second) == raw_bytes(expected[i].second));
  }
}

void require_same_checkpoint(const CheckpointData& actual, const CheckpointData& expected) {
  CHECK(actual.step == expected.step);
  CHECK(actual.epoch == expected.epoch);
  const optim::StepState& a = actual.step_state;
  const optim::StepState& e = expected.step_state;
  CHECK(a.step == e.step);
  CHECK(a.skipped_steps == e.skipped_steps);
  CHECK(same_bits(a.lr, e.lr));
  CHECK(same_bits(a.beta1_power, e.beta1_power));
  CHECK(same_bits(a.beta2_power, e.beta2_power));
  CHECK(same_bits(a.loss_scale, e.loss_scale));
  CHECK(a.growth_tracker == e.growth_tracker);
  CHECK(a.found_inf == e.found_inf);
  CHECK(std::isnan(a.grad_norm) == std::isnan(e.grad_norm));
  if (!std::isnan(e.grad_norm)) CHECK(same_bits(a.grad_norm, e.grad_norm));
  CHECK(same_bits(a.clip_factor, e.clip_factor));
  CHECK(a.monitor_flags == e.monitor_flags);
  CHECK(a.first_nonfinite_step == e.first_nonfinite_step);
  CHECK(a.first_nonfinite_segment == e.first_nonfinite_segment);
  CHECK(actual.rng == expected.rng);
  CHECK(actual.data_loader == expected.data_loader);
  CHECK(actual.config_digest == expected.config_digest);
  CHECK(nlohmann::json::parse(actual.extra_json) == nlohmann::json::parse(expected.extra_json));
  require_same_tensors(actual.model_tensors, expected.model_tensors);
  require_same_tensors(actual.optimizer_tensors, expected.optimizer_tensors);
}

std::vector<std::string> folder_names(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(folder)) names.push_back(item.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_all(const fs::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), {});
}

void write_all(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Rewrites state.json with one field changed and a matching state CRC (as a writer of that content would).
void rewrite_state(const fs::path& folder, const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json state = nlohmann::json::parse(read_all(folder / "state.json"));
  state.erase("state_crc32");
  change(state);
  state["state_crc32"] = crc32_of(state.dump());
  write_all(folder / "state.json", state.dump(2));
}

std::string load_error(const fs::path& path) {
  try {
    load_checkpoint(path);
  } catch (const DataError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checkpoint round trip restores every field bit-exactly", "[checkpoint]") {
  TemporaryRunDir run;
  CheckpointData saved = sample_checkpoint(42);
  fs::path folder = save_checkpoint(run.path, saved);
  CHECK(folder == run.path / "checkpoints" / "step_00000042");
  CHECK(folder_names(run.path / "checkpoints") == std::vector<std::string>{"step_00000042"});  // no temp left
  CHECK(folder_names(folder) == std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"});

  require_same_checkpoint(load_checkpoint(folder), saved);
  require_same_checkpoint(load_checkpoint(folder / "state.json"), saved);
  require_same_checkpoint(load_checkpoint(run.path / "checkpoints" / "step_00000042/"), saved);

  // The tensor files are plain safetensors with the module names as keys.
  SafetensorsContents model = read_safetensors(folder / "model.safetensors");
  CHECK(model.find("fc1.weight") != nullptr);
  CHECK(model.metadata.at("step") == "42");
  nlohmann::json state = nlohmann::json::parse(read_all(folder / "state.json"));
  CHECK(state["format_version"] == kCheckpointFormatVersion);
  CHECK(state["step_state"]["grad_norm"] == "nan");
  CHECK(state["files"]["model.safetensors"]["size_bytes"] == fs::file_size(folder / "model.safetensors"));
}

TEST_CASE("checkpoint folder names and config digests", "[checkpoint]") {
  CHECK(checkpoint_folder_name(0) == "step_00000000");
  CHECK(checkpoint_folder_name(1200) == "step_00001200");
  CHECK(checkpoint_folder_name(123456789) == "step_123456789");
  CHECK_THROWS_AS(checkpoint_folder_name(-1), Error);
  CHECK(config_digest("") == "fnv1a64:cbf29ce484222325");  // FNV-1a 64 test vectors
  CHECK(config_digest("a") == "fnv1a64:af63dc4c8601ec8c");
  CHECK(config_digest("lr: 0.1") != config_digest("lr: 0.2"));
}

TEST_CASE("checkpoint keep_last prunes the oldest complete checkpoints", "[checkpoint]") {
  TemporaryRunDir run;
  for (int64_t step = 1; step <= 5; ++step) save_checkpoint(run.path, sample_checkpoint(step * 100), 2);
  CHECK(folder_names(run.path / "checkpoints") == std::vector<std::string>{"step_00000400", "step_00000500"});
  save_checkpoint(run.path, sample_checkpoint(600), 0);  // 0 keeps everything
  CHECK(list_checkpoints(run.path).size() == 3);

  // A run resumed from an older step keeps the checkpoint it just wrote, dropping stale ones first.
  save_checkpoint(run.path, sample_checkpoint(450), 1);
  CHECK(folder_names(run.path / "checkpoints") == std::vector<std::string>{"step_00000450"});
  CHECK_THROWS_AS(save_checkpoint(run.path, sample_checkpoint(700), -1), Error);
}

TEST_CASE("checkpoint saved twice at one step is replaced atomically", "[checkpoint]") {
  TemporaryRunDir run;
  save_checkpoint(run.path, sample_checkpoint(7));
  CheckpointData second = sample_checkpoint(7);
  second.epoch = 99;
  second.model_tensors[1].second.fill_(3.0);
  save_checkpoint(run.path, second);
  CHECK(folder_names(run.path / "checkpoints") == std::vector<std::string>{"step_00000007"});
  require_same_checkpoint(load_checkpoint(run.path / "checkpoints" / "step_00000007"), second);
}

TEST_CASE("find_latest_checkpoint ignores temporary and incomplete folders", "[checkpoint]") {
  TemporaryRunDir run;
  CHECK_FALSE(find_latest_checkpoint(run.path).has_value());  // no checkpoints/ folder yet
  CHECK_FALSE(find_latest_checkpoint(run.path / "missing").has_value());
  fs::path complete = save_checkpoint(run.path, sample_checkpoint(20));
  fs::path checkpoints = run.path / "checkpoints";

  // A crash mid-save leaves a temporary folder (even a full one) and maybe a folder missing files.
  fs::copy(complete, checkpoints / ".tmp-step_00000030");
  fs::create_directory(checkpoints / "step_00000040");
  fs::copy_file(complete / "state.json", checkpoints / "step_00000040" / "state.json");
  fs::copy(complete, checkpoints / "step_00000050-copy");
  fs::copy(complete, checkpoints / "step_0000x060");
  std::ofstream(checkpoints / "step_00000070") << "a file, not a folder";
  REQUIRE(find_latest_checkpoint(run.path).has_value());
  CHECK(*find_latest_checkpoint(run.path) == complete);
  CHECK(list_checkpoints(run.path).size() == 1);

  fs::path newer = save_checkpoint(run.path, sample_checkpoint(25));
  CHECK(*find_latest_checkpoint(run.path) == newer);            // 25 > 20 numerically
  CHECK_FALSE(fs::exists(checkpoints / ".tmp-step_00000030"));  // leftovers are cleaned by the next save
  std::vector<CheckpointEntry> entries = list_checkpoints(run.path);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].step == 20);
  CHECK(entries[1].step == 25);
}

TEST_CASE("checkpoint with a missing file is refused with a clear message", "[checkpoint]") {
  TemporaryRunDir run;
  fs::path folder = save_checkpoint(run.path, sample_checkpoint(5));
  CHECK_THAT(load_error(run.path / "checkpoints" / "step_00000006"), Catch::Contains("does not exist"));

  for (std::string_view file : {kOptimizerFileName, kModelFileName, kStateFileName}) {
    fs::path moved = run.path / "moved";
    fs::rename(folder / file, moved);
    std::string message = load_error(folder);
    CHECK_THAT(message, Catch::Contains(std::string(file)));
    CHECK_THAT(message, Catch::Contains("missing"));
    fs::rename(moved, folder / file);
  }
  CHECK(load_error(folder).empty());
}

TEST_CASE("checkpoint truncated at any byte of any file is refused", "[checkpoint]") {
  TemporaryRunDir run;
  CheckpointData small = sample_checkpoint(9);
  fs::path folder = save_checkpoint(run.path, small);
  for (std::string_view file : {kModelFileName, kOptimizerFileName, kStateFileName}) {
    fs::path path = folder / file;
    std::string original = read_all(path);
    for (size_t length = 0; length < original.size(); ++length) {
      write_all(path, original.substr(0, length));
      INFO(file << " truncated to " << length << " of " << original.size() << " bytes");
      std::string message = load_error(folder);
      // Only state.json's final newline can go without changing the content.
      bool only_whitespace_lost =
          file == kStateFileName && original.find_first_not_of(" \n", length) == std::string::npos;
      if (!only_whitespace_lost) CHECK_THAT(message, Catch::Contains(std::string(file)));
    }
    write_all(path, original);
  }
  require_same_checkpoint(load_checkpoint(folder), small);
}

TEST_CASE("checkpoint with a corrupted byte anywhere is refused", "[checkpoint]") {
  TemporaryRunDir run;
  CheckpointData saved = sample_checkpoint(9);
  fs::path folder = save_checkpoint(run.path, saved);
  std::mt19937 engine(77);
  int state_whitespace_changes = 0;
  for (std::string_view file : {kModelFileName, kOptimizerFileName, kStateFileName}) {
    fs::path path = folder / file;
    std::string original = read_all(path);
    for (size_t position = 0; position < original.size(); ++position) {
      std::string corrupt = original;
      corrupt[position] = static_cast<char>(corrupt[position] ^ static_cast<char>(1 + engine() % 255));
      write_all(path, corrupt);
      INFO(file << " byte " << position << " changed");
      std::string message = load_error(folder);
      if (message.empty()) {
        // Only state.json can survive a change: JSON whitespace swapped for other whitespace, which
        // leaves its content (and so its CRC) the same.
        CHECK(file == kStateFileName);
        CHECK(std::isspace(static_cast<unsigned char>(original[position])));
        CHECK(std::isspace(static_cast<unsigned char>(corrupt[position])));
        ++state_whitespace_changes;
      } else {
        CHECK_THAT(message, Catch::Contains(std::string(file)));
      }
    }
    write_all(path, original);
  }
  CHECK(state_whitespace_changes < 20);
  require_same_checkpoint(load_checkpoint(folder), saved);
}

TEST_CASE("checkpoint state.json fields are validated after its CRC", "[checkpoint]") {
  TemporaryRunDir run;
  fs::path folder = save_checkpoint(run.path, sample_checkpoint(12));
  std::string original = read_all(folder / "state.json");

  rewrite_state(folder, [](nlohmann::json& state) { state["format_version"] = 2; });
  CHECK_THAT(load_error(folder), Catch::Contains("version 2 is not supported"));
  write_all(folder / "state.json", original);

  rewrite_state(folder, [](nlohmann::json& state) { state["step"] = 13; });
  CHECK_THAT(load_error(folder), Catch::Contains("does not match the folder name step_00000012"));
  write_all(folder / "state.json", original);

  rewrite_state(folder, [](nlohmann::json& state) { state["step_state"].erase("lr"); });
  CHECK_THAT(load_error(folder), Catch::Contains("field \"step_state.lr\": missing"));
  write_all(folder / "state.json", original);

  rewrite_state(folder, [](nlohmann::json& state) { state["step_state"]["growth_tracker"] = 1ll << 40; });
  CHECK_THAT(load_error(folder), Catch::Contains("step_state.growth_tracker\": integer 1099511627776 is out of range"));
  write_all(folder / "state.json", original);

  // Counts and positions a CRC-valid edit made negative: refused rather than resumed from nowhere.
  rewrite_state(folder, [](nlohmann::json& state) { state["epoch"] = -1; });
  CHECK_THAT(load_error(folder), Catch::Contains("state.json: field \"epoch\": negative epoch -1"));
  write_all(folder / "state.json", original);
  for (const char* key : {"epoch", "batch_in_epoch", "samples_seen"}) {
    INFO(key);
    rewrite_state(folder, [key](nlohmann::json& state) { state["data_loader"][key] = -1; });
    CHECK_THAT(load_error(folder),
               Catch::Contains(std::string("field \"data_loader.") + key + "\": negative value -1"));
    write_all(folder / "state.json", original);
  }

  rewrite_state(folder, [](nlohmann::json& state) { state["rng"]["train"]["seed"] = -1; });
  CHECK_THAT(load_error(folder), Catch::Contains("rng.train.seed"));
  write_all(folder / "state.json", original);

  rewrite_state(folder, [](nlohmann::json& state) { state["files"]["model.safetensors"]["size_bytes"] = 1; });
  CHECK_THAT(load_error(folder), Catch::Contains("but state.json records 1 (truncated or replaced)"));
  write_all(folder / "state.json", original);

  rewrite_state(folder, [](nlohmann::json& state) { state["files"]["optimizer.safetensors"]["crc32"] = 0; });
  CHECK_THAT(load_error(folder), Catch::Contains("optimizer.safetensors: CRC-32"));
  write_all(folder / "state.json", original);

  // An edit without a matching state CRC is refused before any field is read.
  nlohmann::json edited = nlohmann::json::parse(original);
  edited["epoch"] = 4;
  write_all(folder / "state.json", edited.dump(2));
  CHECK_THAT(load_error(folder), Catch::Contains("does not match its state_crc32"));
  write_all(folder / "state.json", original);
  CHECK(load_error(folder).empty());
}

TEST_CASE("checkpoint state.json nested too deep is refused before anything walks it", "[checkpoint]") {
  TemporaryRunDir run;
  fs::path folder = save_checkpoint(run.path, sample_checkpoint(2));
  // The CRC is computed over dump(), which recurses once per level: 100000 levels overflowed the stack.
  write_all(folder / "state.json",
            "{\"state_crc32\":1,\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  CHECK(load_error(folder) == (folder / "state.json").string() + ": nested deeper than 64 levels");

  // 64 levels (the state object, extra, and 62 arrays) still load.
  CheckpointData deep = sample_checkpoint(2);
  deep.extra_json = R"({"a":)" + std::string(62, '[') + std::string(62, ']') + "}";
  CHECK(load_error(save_checkpoint(run.path, deep)).empty());
}

TEST_CASE("checkpoint given another file of the folder says what it expected", "[checkpoint]") {
  TemporaryRunDir run;
  fs::path folder = save_checkpoint(run.path, sample_checkpoint(2));
  std::string message = load_error(folder / "model.safetensors");
  CHECK(message == (folder / "model.safetensors").string() +
                       ": expected a checkpoint folder or its state.json (this file is a tensor file)");
  // A binary file by any other name: no raw bytes echoed from a JSON parse error.
  fs::copy_file(folder / "model.safetensors", run.path / "weights.bin");
  message = load_error(run.path / "weights.bin");
  CHECK_THAT(message, Catch::Contains("expected a checkpoint folder or its state.json (this file does not hold a "
                                      "JSON object)"));
  CHECK(std::all_of(message.begin(), message.end(), [](char c) { return c >= 0x20 && c < 0x7f; }));
  write_all(run.path / "empty.json", "  \n");
  CHECK_THAT(load_error(run.path / "empty.json"), Catch::Contains("(this file is empty)"));
  // state.json itself still loads when named directly.
  CHECK(load_error(folder / "state.json").empty());
}

TEST_CASE("checkpoint save rejects extra_json that is not an object", "[checkpoint]") {
  TemporaryRunDir run;
  CheckpointData data = sample_checkpoint(1);
  data.extra_json = "[1, 2]";
  CHECK_THROWS_WITH(save_checkpoint(run.path, data), Catch::Contains("extra_json must be a JSON object"));
  data.extra_json = "{not json";
  CHECK_THROWS_AS(save_checkpoint(run.path, data), Error);
  CHECK_FALSE(fs::exists(run.path / "checkpoints"));  // refused before touching the disk
}

TEST_CASE("checkpoint path that is a FIFO is refused at once, not waited on", "[checkpoint]") {
  // A blocking open() of a FIFO waits for a writer forever: load_checkpoint hung on it.
  TemporaryRunDir run;
  const fs::path fifo = run.path / std::string(kStateFileName);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const fs::path& path : {fifo, run.path}) {
    std::future<std::string> message = std::async(std::launch::async, [&] { return load_error(path); });
    if (message.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      // Free the blocked reader so the test ends: opening the write side lets its open() return.
      const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (writer >= 0) ::close(writer);
      FAIL("load_checkpoint(" << path << ") still waiting on the FIFO after 20 s");
    }
    CHECK_THAT(message.get(), Catch::Contains(fifo.string() + " is not a regular file"));
  }
}
