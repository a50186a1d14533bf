// Tests of the rank-to-chip block mapping.
#include "runtime/pdes.h"

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

}  // namespace
}  // namespace tsp::runtime
