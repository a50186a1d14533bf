// Tests of the rank-to-chip block mapping.
#include "runtime/pdes.h"

#include <cstdlib>
#include <vector>

#include <gtest/gtest.h>

namespace tsp::runtime {
namespace {

TEST(BlockMapping, CoversEveryChipOnce) {
  for (int ranks : {1, 2, 3, 4, 7}) {
    std::vector<int> seen(10, 0);
    for (int rank = 0; rank < ranks; ++rank) {
      const auto m = blockMapping(10, ranks, rank);
      for (int chip : m.localChips) {
        ++seen[chip];
        EXPECT_EQ(m.owner[chip], rank);
      }
      // Blocks differ in size by at most one chip.
      EXPECT_GE(static_cast<int>(m.localChips.size()), 10 / ranks);
      EXPECT_LE(static_cast<int>(m.localChips.size()), 10 / ranks + 1);
    }
    for (int count : seen) EXPECT_EQ(count, 1);
  }
}

// Weighted blocks: contiguous, every chip once, every rank at least one chip, and the work of a
// model on the first chips of a large cluster (idle chips weigh 1) split over the ranks.
TEST(BlockMapping, WeightedBlocksBalanceTheWork) {
  std::vector<std::int64_t> weights(72, 0);
  for (int chip = 0; chip < 8; ++chip) weights[static_cast<size_t>(chip)] = 100000;
  for (int ranks : {1, 2, 3, 4, 8, 72}) {
    std::vector<int> seen(weights.size(), 0);
    int previousLast = -1;
    for (int rank = 0; rank < ranks; ++rank) {
      const auto m = blockMapping(weights, ranks, rank);
      ASSERT_FALSE(m.localChips.empty()) << ranks << " ranks, rank " << rank;
      EXPECT_EQ(m.localChips.front(), previousLast + 1);
      EXPECT_EQ(m.localChips.back() - m.localChips.front() + 1, static_cast<int>(m.localChips.size()));
      previousLast = m.localChips.back();
      for (int chip : m.localChips) ++seen[static_cast<size_t>(chip)];
      std::int64_t work = 0;
      for (int chip : m.localChips) work += weights[static_cast<size_t>(chip)];
      // Up to 8 ranks each get a share of the 8 busy chips: 800,000 / ranks, within one chip's work.
      if (ranks <= 8) {
        EXPECT_LE(std::abs(work - 800000 / ranks), 100000) << ranks << " ranks, rank " << rank;
      }
    }
    EXPECT_EQ(previousLast, 71);
    for (int count : seen) EXPECT_EQ(count, 1);
  }
}

}  // namespace
// Sends and reads on one link are matched vector by vector in FIFO order.
TEST(ReadDeadlines, MatchBurstsToTheReadsThatTakeThem) {
  // Burst 0 (4 vectors) is read by the reads at 100 (3) and 120 (1 of 2); burst 1 (1 vector)
  // by the rest of the read at 120; burst 2 (2 vectors) by the read at 300; burst 3 never.
  const std::vector<LinkUse> sends = {{10, 4}, {20, 1}, {30, 2}, {40, 5}};
  const std::vector<LinkUse> reads = {{100, 3}, {120, 2}, {300, 2}};
  EXPECT_EQ(readDeadlines(sends, reads), (std::vector<Cycle>{100, 120, 300, sim::kNever}));
}

TEST(ReadDeadlines, AWindowMustEndByTheEarliestLaterRead) {
  // Out-of-order reads (a forward issued before a receive) make a later burst's read earlier:
  // every earlier burst's deadline is bounded by it.
  const std::vector<LinkUse> sends = {{0, 1}, {5, 1}, {9, 1}};
  const std::vector<LinkUse> reads = {{500, 1}, {50, 1}, {900, 1}};
  EXPECT_EQ(readDeadlines(sends, reads), (std::vector<Cycle>{50, 50, 900}));
  EXPECT_EQ(readDeadlines(sends, {}), (std::vector<Cycle>(3, sim::kNever)));
  EXPECT_TRUE(readDeadlines({}, reads).empty());
}

}  // namespace tsp::runtime
