// Rank 0's progress line: silent for a phase's first seconds, an ETA from the rate so far, tty or log.
#include "runtime/progress.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>
#include <unistd.h>

namespace tsp::runtime {

PhaseProgress::PhaseProgress(std::string phase, bool enabled, bool terminal, std::FILE* out,
                             std::function<Clock::time_point()> now)
    : phase_(std::move(phase)), enabled_(enabled), terminal_(terminal), out_(out), now_(std::move(now)),
      start_(now_()), last_(start_), stepStart_(start_) {}

PhaseProgress::~PhaseProgress() { finish(); }

bool PhaseProgress::due() const {
  if (!enabled_) return false;
  const auto now = now_();
  if (now - start_ < kSilentFor) return false;
  return !printed_ || now - last_ >= (terminal_ ? kTerminalInterval : kLogInterval);
}

void PhaseProgress::update(std::int64_t done, std::int64_t total, const char* unit, const std::string& detail) {
  if (!enabled_) return;
  if (unit != unit_ || done < lastDone_) {  // a new step of the phase
    if (!unit_.empty()) stepStart_ = now_();
    unit_ = unit;
  }
  lastDone_ = done;
  if (!due()) return;
  last_ = now_();
  printed_ = true;
  const double seconds = std::chrono::duration<double>(last_ - stepStart_).count();
  done = std::max<std::int64_t>(0, total > 0 ? std::min(done, total) : done);
  std::string line = total > 0 ? fmt::format("tsp-sim: {}: {} of {} {} ({:.0f}%)", phase_, done, total, unit,
                                             std::floor(100.0 * static_cast<double>(done) / static_cast<double>(total)))
                               : fmt::format("tsp-sim: {}: {} {} so far", phase_, done, unit);
  if (!detail.empty()) line += ", " + detail;
  if (done > 0 && total > 0 && last_ - stepStart_ >= kStepMeasure)
    line += fmt::format(", ETA {:.0f} s", seconds * static_cast<double>(total - done) / static_cast<double>(done));
  else
    line += ", ETA unknown";
  if (terminal_) {
    fmt::print(out_, "\r{}\x1b[K", line);  // rewrite the line in place, clearing what a longer one left
    open_ = true;
  } else {
    fmt::print(out_, "{}\n", line);
  }
  std::fflush(out_);
}

void PhaseProgress::finish() {
  if (open_) {
    fmt::print(out_, "\n");
    std::fflush(out_);
    open_ = false;
  }
}

bool stderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

}  // namespace tsp::runtime
