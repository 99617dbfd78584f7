// The trainer: builds the data, model and optimizer a TrainConfig describes and runs the training loop
// (forward, loss, backward, fused optimizer step, evaluation, metrics, checkpoints, resume). opsnn-train is
// a thin command line over it, and an embedding program can drive it directly:
//
//   opsnn::train::Trainer trainer(opsnn::train::load_config("configs/quickstart.yaml"), {.out_dir = "runs/x"});
//   trainer.train_steps(10);
//   trainer.save_checkpoint();
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "opsnn/train/config.h"

namespace opsnn::nn {
class Module;
}
namespace opsnn::optim {
class Optimizer;
}

namespace opsnn::train {

struct TrainerOptions {
  std::string out_dir;         // run folder; "" = config.run.out_dir, else runs/<run name>
  std::string resume;          // "" (fresh start), "auto" (latest checkpoint of the run folder, if any) or a path
  bool show_progress = true;   // progress bar on a terminal / periodic lines (logging.progress decides which)
  bool log_to_console = true;  // train.log always; also stderr when true (tests and embedders may turn it off)
  // Checked after every step; when it becomes true the trainer saves a checkpoint and stops (SIGINT).
  const std::atomic<bool>* stop_requested = nullptr;
  // Evaluation of a checkpoint (opsnn-train --eval-only): `resume` must name one (a path, or auto with a
  // checkpoint in the run folder, else DataError). Only its model is loaded (not the optimizer state or
  // the loader position, so those settings may differ), model.init_from is ignored, an existing
  // config.yaml of the run folder is kept; call evaluate() once. Nothing is trained or saved.
  bool eval_only = false;
};

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // fraction in [0, 1]
  // Top-5 accuracy (the label among the 5 highest logits); only for models with at least 5 classes.
  std::optional<double> top5_accuracy;
  int64_t samples = 0;
};

struct TrainSummary {
  int64_t steps = 0;  // optimizer steps completed (applied + skipped)
  int64_t epochs_completed = 0;
  double final_train_loss = 0.0;
  std::optional<EvalResult> final_eval;
  double best_test_accuracy = 0.0;
  double wall_seconds = 0.0;
  double samples_per_second = 0.0;
  std::optional<double> bayes_test_loss;  // ctr_synthetic: the best log-loss any model can reach on the test set
  bool interrupted = false;
  std::string last_checkpoint;  // "" when none was written
};

class Trainer {
 public:
  // Builds everything; initialises the model from model.init_from (a fresh start only) and resumes from a
  // checkpoint when options.resume asks for it. Throws ConfigError for settings this build cannot honour
  // and DataError for missing or corrupt data, checkpoints and init_from files (or, with
  // model.init_strict, an init_from file that does not fit the model).
  Trainer(TrainConfig config, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains until the config's epochs / max_steps are done (or a stop is requested), evaluating and
  // checkpointing as configured, and writes the summary to the log and metrics.
  TrainSummary fit();
  // Runs at most `count` optimizer steps (crossing epochs as needed); returns the mean training loss.
  double train_steps(int64_t count);
  // One pass over the test split: loss, top-1 (and top-5) accuracy, logged and written as an "eval" record.
  EvalResult evaluate();
  // Writes a checkpoint of the current state (model, optimizer, sparse-update and top-k state, loader
  // position); returns its folder.
  std::filesystem::path save_checkpoint();

  int64_t step() const;
  int64_t epoch() const;
  const std::filesystem::path& run_dir() const;
  const TrainConfig& config() const;
  nn::Module& model();
  optim::Optimizer& optimizer();
  // Loss of every optimizer step run so far in this process (mean over its micro-batches), in order.
  const std::vector<double>& step_losses() const;
  // ctr_synthetic runs: the Bayes-optimal log-loss of the test set (the planted model's entropy).
  std::optional<double> bayes_test_loss() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace opsnn::train
