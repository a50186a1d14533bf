// The utilisation timeline: busy cycles per unit kind in fixed-width bins.
#pragma once

#include <algorithm>
#include <vector>

#include "sim/chip.h"

namespace tsp::sim {

/// The bin of the last instruction added: instructions come in issue order, so most fall in it and
/// need no division to find their bin.
struct TimelineBin {
  Cycle index = 0;  ///< the bin
  Cycle first = 0;  ///< its first cycle
};

/// Adds `busy` cycles spread evenly over [start, end) to the bins of one unit kind (inline: once per
/// executed instruction). `last`: the bin of the previous call, updated.
inline void addToTimeline(std::vector<double>& timeline, const SimOptions& options, int kind, Cycle start, Cycle end,
                          Cycle busy, TimelineBin& last) {
  if (end <= start || busy <= 0) return;
  const Cycle width = std::max<Cycle>(1, options.binCycles);
  if (start < last.first || start - last.first >= width) {
    last.index = start / width;
    last.first = last.index * width;
  }
  const Cycle firstBin = last.index;
  if (firstBin >= options.bins) return;
  if (end - last.first <= width) {  // the common case: the whole span in one bin
    timeline[static_cast<size_t>(kind) * options.bins + firstBin] += static_cast<double>(busy);
    return;
  }
  const double density = static_cast<double>(busy) / static_cast<double>(end - start);
  for (Cycle bin = firstBin; bin < options.bins && bin * width < end; ++bin) {
    const Cycle lo = std::max(start, bin * width), hi = std::min(end, (bin + 1) * width);
    if (hi > lo) timeline[static_cast<size_t>(kind) * options.bins + bin] += density * static_cast<double>(hi - lo);
  }
}

/// Busy fractions: each bin divided by (units of the kind x bin width), as float (a Kokkos kernel).
std::vector<float> normalizeTimeline(const std::vector<double>& timeline, const SimOptions& options,
                                     const int unitsPerKind[]);

}  // namespace tsp::sim
