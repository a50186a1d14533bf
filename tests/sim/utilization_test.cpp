// Tests of the utilisation timeline (sim::Timeline): each bin counts the busy cycles an instruction's iterations
// spend in it, whatever the span, the gaps between iterations or the bins it runs past.
#include "sim/utilization.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace tsp::sim {
namespace {

// An instruction's iterations: iteration i busy over [start + i * interval, + perIssue).
struct Span {
  int kind;
  Cycle start;
  std::int64_t repeat;
  Cycle interval, perIssue;
};

// The bins of every kind, counted cycle by cycle (cycles past the last bin not counted).
std::vector<Cycle> countedByCycle(const std::vector<Span>& spans, const SimOptions& options) {
  std::vector<Cycle> bins(static_cast<size_t>(topology::kUnitKindCount) * options.bins, 0);
  for (const Span& s : spans)
    for (std::int64_t i = 0; i < s.repeat; ++i)
      for (Cycle c = s.start + i * s.interval; c < s.start + i * s.interval + s.perIssue; ++c)
        if (c / options.binCycles < options.bins) ++bins[static_cast<size_t>(s.kind) * options.bins + c / options.binCycles];
  return bins;
}

// The bins of every kind as a Timeline counts them.
std::vector<Cycle> added(const std::vector<Span>& spans, const SimOptions& options) {
  Timeline timeline(options);
  for (const Span& s : spans)
    timeline.add(s.kind, s.start, s.start + (s.repeat - 1) * s.interval + s.perIssue, s.repeat * s.perIssue, s.repeat,
                 s.interval, s.perIssue);
  return timeline.busyCycles();
}

TEST(Utilization, BusyCyclesBeforeCountsEachIteration) {
  // Three iterations of 2 busy cycles every 5: busy at 0-1, 5-6, 10-11.
  EXPECT_EQ(busyCyclesBefore(0, 3, 5, 2), 0);
  EXPECT_EQ(busyCyclesBefore(1, 3, 5, 2), 1);
  EXPECT_EQ(busyCyclesBefore(4, 3, 5, 2), 2);
  EXPECT_EQ(busyCyclesBefore(6, 3, 5, 2), 3);
  EXPECT_EQ(busyCyclesBefore(100, 3, 5, 2), 6);
  // Overlapping iterations (an install longer than its interval) count once each.
  EXPECT_EQ(busyCyclesBefore(3, 3, 1, 4), 3 + 2 + 1);
  EXPECT_EQ(busyCyclesBefore(100, 3, 1, 4), 12);
}

TEST(Utilization, BinsCountTheBusyCyclesOfEverySpan) {
  SimOptions options;
  options.binCycles = 7;
  options.bins = 6;  // cycles [0, 42): spans past the end are cut
  std::vector<Span> spans;
  // Issue order, as a chip adds them: spans in one bin, over many (busy throughout, with gaps
  // between iterations, overlapping), and past the last bin.
  for (Cycle start = 0; start < 50; start += 3) {
    spans.push_back({0, start, 1, 1, 1});
    spans.push_back({1, start, 4, 1, 1});
    spans.push_back({2, start, 5, 3, 1});
    spans.push_back({3, start, 3, 2, 5});
    spans.push_back({4, start, 6, 4, 4});
    spans.push_back({static_cast<int>(start % 5), start + 1, 2, 9, 2});
  }
  EXPECT_EQ(added(spans, options), countedByCycle(spans, options));
}

TEST(Utilization, BinsAddUpInAnyOrder) {
  SimOptions options;
  options.binCycles = 10;
  options.bins = 8;
  std::vector<Span> spans = {{0, 3, 40, 2, 1}, {0, 0, 1, 1, 79}, {0, 15, 7, 7, 7}, {0, 77, 5, 1, 1}};
  const std::vector<Cycle> forward = added(spans, options);
  std::reverse(spans.begin(), spans.end());
  EXPECT_EQ(added(spans, options), forward);
  EXPECT_EQ(forward, countedByCycle(spans, options));
}

TEST(Utilization, NormalizedBinsAreBusyFractions) {
  SimOptions options;
  options.binCycles = 4;
  options.bins = 3;
  Timeline timeline(options);
  timeline.add(1, 2, 10, 8, 1, 1, 8);  // VXM busy over cycles 2-9: 2, 4, 2 cycles
  const int units[topology::kUnitKindCount] = {2, 4, 1, 1, 1};
  const std::vector<float> fractions = timeline.normalize(units);
  ASSERT_EQ(fractions.size(), static_cast<size_t>(topology::kUnitKindCount) * options.bins);
  EXPECT_FLOAT_EQ(fractions[3], 2.0f / 16);
  EXPECT_FLOAT_EQ(fractions[4], 4.0f / 16);
  EXPECT_FLOAT_EQ(fractions[5], 2.0f / 16);
  EXPECT_EQ(fractions[0], 0.0f);
}

}  // namespace
}  // namespace tsp::sim
