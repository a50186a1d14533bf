// Cooperative cancellation of long computations (planning, compiling): the caller that owns the run
// installs what "stop" means; long loops ask, cheaply, at each step and end early when told.
#pragma once

#include <functional>

#include "support/diagnostic.h"

namespace tsp::support {

/// Whether the computation is to stop. Cheap enough for every step of a loop: the installed poll is
/// called at most every few milliseconds, and once it said yes the answer stays yes. A loop that
/// stops early still returns normally (an error built with interrupted(), or what it has so far).
bool cancelRequested();

/// Installs the poll cancelRequested() calls (nullptr: never cancelled) and forgets an earlier yes.
void setCancelPoll(std::function<bool()> poll);

/// The error a computation stopped by cancelRequested() returns (exit code 7).
Diagnostic interrupted();

}  // namespace tsp::support
