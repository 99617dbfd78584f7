// Progress display for the training loop: a single self-updating bar on a terminal, or plain periodic
// log lines when the output is a file or a pipe (logging.progress: auto | bar | plain).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace opsnn::train {

struct ProgressLine {
  int64_t epoch = 0, epochs = 0;  // epochs 0 = unbounded
  int64_t step = 0, total_steps = 0;
  double loss = 0.0, lr = 0.0, samples_per_second = 0.0, eta_seconds = -1.0;
};

class ProgressBar {
 public:
  // mode: "auto" (bar only when stderr is a terminal), "bar" or "plain".
  explicit ProgressBar(const std::string& mode, bool enabled);
  bool active() const { return active_; }
  // Redraws the bar, at most a few times a second; no-op when not active.
  void update(const ProgressLine& line);
  // Clears the bar so a log line can be printed cleanly.
  void clear();
  void finish();

 private:
  bool active_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

std::string format_duration(double seconds);  // "1:02:03" or "2:03"

}  // namespace opsnn::train
