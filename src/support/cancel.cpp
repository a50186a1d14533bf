#include "support/cancel.h"

#include <chrono>

namespace tsp::support {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(5);

std::function<bool()>& poll() {
  static std::function<bool()> installed;
  return installed;
}
bool gCancelled = false;
Clock::time_point gLastPoll{};

}  // namespace

bool cancelRequested() {
  if (gCancelled) return true;
  if (!poll()) return false;
  const auto now = Clock::now();
  if (now - gLastPoll < kPollInterval) return false;
  gLastPoll = now;
  gCancelled = poll()();
  return gCancelled;
}

void setCancelPoll(std::function<bool()> p) {
  poll() = std::move(p);
  gCancelled = false;
  gLastPoll = {};
}

Diagnostic interrupted() { return makeError(ExitCode::kInterrupted, "interrupted"); }

}  // namespace tsp::support
