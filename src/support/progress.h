// How a long computation tells its caller how far it has come, without knowing who prints it.
#pragma once

#include <cstdint>
#include <functional>

namespace tsp::support {

/// Told that `done` of `total` units of work are finished; called on the computing thread, often,
/// so it must be cheap when the caller does not print (the caller decides when a line is due).
using ProgressFn = std::function<void(std::int64_t done, std::int64_t total)>;

}  // namespace tsp::support
