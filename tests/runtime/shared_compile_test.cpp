// Tests of how compiles are dealt over the ranks: each job on one rank, the heaviest first.
#include "runtime/shared_compile.h"

#include <gtest/gtest.h>

namespace tsp::runtime {
namespace {

// The weights each rank is dealt.
std::vector<std::int64_t> loads(const std::vector<std::int64_t>& weights, int ranks) {
  std::vector<std::int64_t> load(ranks, 0);
  const auto owner = dealJobs(weights, ranks);
  for (size_t i = 0; i < weights.size(); ++i) load.at(owner[i]) += weights[i];
  return load;
}

TEST(DealJobs, HeaviestFirstToTheLeastLoadedRank) {
  // The profile of a GPT: a block with its sends, three pairs, three small layers (op counts).
  const std::vector<std::int64_t> weights = {3, 33, 33, 3, 36, 66, 36};
  EXPECT_EQ(dealJobs(weights, 2), (std::vector<int>{0, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(loads(weights, 2), (std::vector<std::int64_t>{105, 105}));
  EXPECT_EQ(dealJobs(weights, 1), std::vector<int>(weights.size(), 0));
}

TEST(DealJobs, EveryRankGetsAJobWhenThereAreEnough) {
  const std::vector<std::int64_t> weights(5, 7);  // equal weights: round robin, lower rank first
  EXPECT_EQ(dealJobs(weights, 4), (std::vector<int>{0, 1, 2, 3, 0}));
  EXPECT_EQ(dealJobs({10}, 3), (std::vector<int>{0}));
  EXPECT_TRUE(dealJobs({}, 2).empty());
}

}  // namespace
}  // namespace tsp::runtime
