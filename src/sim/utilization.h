// The utilisation timeline: busy cycles per unit kind in fixed-width bins.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sim/chip.h"

namespace tsp::sim {

/// Busy cycles of `repeat` iterations, iteration i busy over [i * interval, i * interval + perIssue),
/// in the cycles [0, t).
inline Cycle busyCyclesBefore(Cycle t, std::int64_t repeat, Cycle interval, Cycle perIssue) {
  if (t <= 0) return 0;
  const std::int64_t started = std::min<std::int64_t>(repeat, (t + interval - 1) / interval);
  const std::int64_t done = t >= perIssue ? std::min<std::int64_t>(repeat, (t - perIssue) / interval + 1) : 0;
  // Iterations [done, started) are busy from their issue to t.
  return done * perIssue + (started - done) * t - interval * ((started - done) * (done + started - 1) / 2);
}

/// One chip's utilisation timeline: the busy cycles of each unit kind in `SimOptions::bins` bins of
/// `binCycles`. A bin counts cycles, an integer, so its sum does not depend on the order of the
/// additions. A kind's bins are kept as differences (entry b is bin b minus bin b - 1, one entry more
/// than the bins), so that a span over many bins, whose middle bins are all busy, costs four additions.
class Timeline {
 public:
  explicit Timeline(const SimOptions& options)
      : width_(std::max<Cycle>(1, options.binCycles)), bins_(std::max(0, options.bins)),
        diff_(static_cast<size_t>(topology::kUnitKindCount) * (bins_ + 1), 0) {}

  /// Adds an instruction (inline: once per executed instruction) whose iteration i of `repeat` keeps
  /// a unit of `kind` busy over [start + i * interval, + perIssue): `busy` cycles in all, the last
  /// ending at `end`. Instructions come in issue order, so most start in the bin of the one before,
  /// found without a division.
  [[gnu::always_inline]] void add(int kind, Cycle start, Cycle end, Cycle busy, std::int64_t repeat, Cycle interval,
                                  Cycle perIssue) {
    const Cycle width = width_;
    if (start < lastFirst_ || start - lastFirst_ >= width) {
      lastBin_ = start / width;
      lastFirst_ = lastBin_ * width;
    }
    const Cycle first = lastBin_, firstCycle = lastFirst_;
    if (first >= bins_) return;
    Cycle* diff = diff_.data() + kind * (bins_ + 1);
    if (end - firstCycle <= width) {  // the common case: the whole span in one bin
      diff[first] += busy;
      diff[first + 1] -= busy;
      return;
    }
    if (busy != end - start) {
      addGapped(diff, first, start, end, repeat, interval, perIssue);
      return;
    }
    // Busy through the span: the bins between the first and the last are full.
    const Cycle head = firstCycle + width - start;
    diff[first] += head;
    diff[first + 1] += width - head;
    // Most spans end in the next bin: no division then.
    if (const Cycle last = end - firstCycle <= 2 * width ? first + 1 : (end - 1) / width; last < bins_) {
      const Cycle tail = end - last * width;
      diff[last] += tail - width;
      diff[last + 1] -= tail;
    }
  }

  /// Busy cycles, [kind][bin].
  std::vector<Cycle> busyCycles() const;
  /// Busy fractions, [kind][bin]: each bin divided by (units of the kind x bin width), as float (a
  /// Kokkos kernel, a kind per work item).
  std::vector<float> normalize(const int unitsPerKind[]) const;
  /// Heap bytes of a timeline of these options (and of its normalized form).
  static Bytes bytes(const SimOptions& options);

 private:
  // add() for iterations with gaps between them (or overlapping ones): each bin's cycles in closed form.
  void addGapped(Cycle* diff, Cycle first, Cycle start, Cycle end, std::int64_t repeat, Cycle interval,
                 Cycle perIssue);

  Cycle width_, bins_;
  Cycle lastBin_ = 0, lastFirst_ = 0;  // the bin of the last instruction added, and its first cycle
  std::vector<Cycle> diff_;
};

}  // namespace tsp::sim
