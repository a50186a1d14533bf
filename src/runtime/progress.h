// Rank 0's progress line for a phase of the run (search, compile, simulate) on stderr.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace tsp::runtime {

/// One phase's progress line: `tsp-sim: PHASE: DONE of TOTAL UNIT (P%), DETAIL, ETA S s`.
/// Nothing is printed in a phase's first 2 s (a short phase stays silent). The ETA is the time so far
/// times the work left over the work done. A phase of several steps (profiling, then evaluating, or
/// many short candidate lists) measures each step on its own (a step starts when the unit changes or
/// the count goes back): the line shows the current step's count, and its ETA once the step has run
/// for 1 s ("ETA unknown" before). On a terminal the line is rewritten in place, at most 4 times a
/// second; in a log (not a terminal) each line is a new line, at most one every 10 s.
class PhaseProgress {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kSilentFor{2000};
  static constexpr std::chrono::milliseconds kStepMeasure{1000};
  static constexpr std::chrono::milliseconds kTerminalInterval{250};
  static constexpr std::chrono::milliseconds kLogInterval{10000};

  /// enabled: rank 0 without --quiet or --json. terminal: whether `out` is a terminal. now: the clock
  /// (tests give their own).
  PhaseProgress(std::string phase, bool enabled, bool terminal, std::FILE* out = stderr,
                std::function<Clock::time_point()> now = Clock::now);
  ~PhaseProgress();
  PhaseProgress(const PhaseProgress&) = delete;
  PhaseProgress& operator=(const PhaseProgress&) = delete;

  /// Whether a line is due now: callers with costly figures (the simulation's event count over all
  /// ranks) ask before they gather them.
  bool due() const;
  /// Prints a line if one is due. total 0: not known ahead (no percentage, no ETA). detail: more of
  /// the phase's own figures, may be empty.
  void update(std::int64_t done, std::int64_t total, const char* unit, const std::string& detail = "");
  /// Ends the phase: a line rewritten on a terminal is ended with a newline. Also done by the destructor.
  void finish();

 private:
  std::string phase_;
  bool enabled_, terminal_;
  std::FILE* out_;
  std::function<Clock::time_point()> now_;
  Clock::time_point start_, last_;
  Clock::time_point stepStart_;  // where the ETA's measure starts: the phase, or its current step
  std::string unit_;
  std::int64_t lastDone_ = 0;
  bool printed_ = false, open_ = false;
};

/// Whether stderr is a terminal (then progress lines are rewritten in place).
bool stderrIsTerminal();

}  // namespace tsp::runtime
