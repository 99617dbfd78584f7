// The terminal progress bar of opsnn-train (see progress.h).
#include "train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace opsnn::train {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  auto total = static_cast<int64_t>(seconds + 0.5);
  int64_t hours = total / 3600, minutes = (total / 60) % 60, secs = total % 60;
  return hours > 0 ? fmt::format("{}:{:02}:{:02}", hours, minutes, secs) : fmt::format("{}:{:02}", minutes, secs);
}

ProgressBar::ProgressBar(const std::string& mode, bool enabled) {
  active_ = enabled && (mode == "bar" || (mode == "auto" && isatty(fileno(stderr))));
}

void ProgressBar::update(const ProgressLine& line) {
  if (!active_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(200) && line.step != line.total_steps) return;
  last_draw_ = now;
  constexpr int kWidth = 24;
  double fraction = line.total_steps > 0 ? static_cast<double>(line.step) / static_cast<double>(line.total_steps) : 0.0;
  int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '-');
  std::string epoch = line.epochs > 0 ? fmt::format("{}/{}", line.epoch, line.epochs) : fmt::format("{}", line.epoch);
  std::fprintf(stderr, "\r\033[Kepoch %s |%s| %3.0f%% step %lld/%lld loss %.4f lr %.2e %.0f samples/s ETA %s",
               epoch.c_str(), bar.c_str(), 100.0 * fraction, static_cast<long long>(line.step),
               static_cast<long long>(line.total_steps), line.loss, line.lr, line.samples_per_second,
               format_duration(line.eta_seconds).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!active_ || !drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

void ProgressBar::finish() { clear(); }

}  // namespace opsnn::train
