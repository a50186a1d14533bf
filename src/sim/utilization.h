// The utilisation timeline: busy cycles per unit kind in fixed-width bins.
#pragma once

#include <vector>

#include "sim/chip.h"

namespace tsp::sim {

/// Adds `busy` cycles spread evenly over [start, end) to the bins of one unit kind.
void addToTimeline(std::vector<double>& timeline, const SimOptions& options, int kind, Cycle start, Cycle end,
                   Cycle busy);

/// Busy fractions: each bin divided by (units of the kind x bin width), as float (a Kokkos kernel).
std::vector<float> normalizeTimeline(const std::vector<double>& timeline, const SimOptions& options,
                                     const int unitsPerKind[]);

}  // namespace tsp::sim
