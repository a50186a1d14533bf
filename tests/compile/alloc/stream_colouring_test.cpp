// Tests of Chaitin-Briggs stream-register colouring.
#include "compile/alloc/stream_colouring.h"

#include <gtest/gtest.h>

#include "compile/schedule/list_scheduler.h"
#include "compile/test_problems.h"

namespace tsp::alloc {
namespace {

InterferenceGraph graphOf(int n, const std::vector<std::pair<int, int>>& edges) {
  InterferenceGraph g;
  g.neighbours.resize(n);
  for (auto [a, b] : edges) {
    g.neighbours[a].push_back(b);
    g.neighbours[b].push_back(a);
  }
  for (auto& v : g.neighbours) std::sort(v.begin(), v.end());
  return g;
}

bool proper(const InterferenceGraph& g, const StreamColouring& c) {
  for (size_t v = 0; v < g.neighbours.size(); ++v)
    for (int w : g.neighbours[v])
      if (c.streamId[v] >= 0 && c.streamId[v] == c.streamId[w]) return false;
  return true;
}

TEST(StreamColouring, OptimisticSelectColoursAnEvenCycleWithTwo) {
  // A 4-cycle: every node has degree 2 = K, so simplify blocks; Briggs' optimism still finds 2 colours.
  const auto g = graphOf(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
  const auto c = colourGraph(g, {1, 1, 1, 1}, 2);
  EXPECT_TRUE(c.spilled.empty());
  EXPECT_TRUE(proper(g, c));
}

TEST(StreamColouring, SpillsTheCheapestNodeOfAClique) {
  // K4 with 3 registers: one node must go; cost (load+store)*freq/degree is least for node 2.
  const auto g = graphOf(4, {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}});
  const auto c = colourGraph(g, {50, 40, 5, 60}, 3);
  ASSERT_EQ(c.spilled, std::vector<int>{2});
  EXPECT_TRUE(proper(g, c));
}

TEST(StreamColouring, ScheduledProblemsColourWithinTheRegisters) {
  topology::ChipSpec chip;
  for (std::uint64_t seed = 0; seed < 30; ++seed) {
    schedule::Problem p = testing::randomProblem(chip, seed, 40);
    ASSERT_TRUE(p.check().ok());
    schedule::Schedule s = *schedule::scheduleList(p, {});
    const auto c = colourStreams(p, s);
    EXPECT_TRUE(c.spilled.empty());
    s.streamId = c.streamId;
    auto v = schedule::verify(p, s);
    EXPECT_TRUE(v.ok()) << seed << ": " << v.error().message;
    EXPECT_LE(c.registersUsed[0], chip.streamsPerDirection);
  }
}

TEST(StreamColouring, UnlimitedPressureWithFewRegistersSpills) {
  topology::ChipSpec chip;
  chip.streamsPerDirection = 2;
  schedule::Problem p(chip);
  // Three chains at once on different slices: three eastward reads overlap for two registers.
  p.addTask(testing::chainTask(chip, 0, 10, 50, "a"));
  p.addTask(testing::chainTask(chip, 1, 11, 50, "b"));
  p.addTask(testing::chainTask(chip, 2, 12, 50, "c"));
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  schedule::Options o;
  o.limitStreamPressure = false;
  const schedule::Schedule s = *schedule::scheduleList(p, o);
  const auto c = colourStreams(p, s);
  EXPECT_EQ(c.spilled.size(), 2u);  // one eastward read, one westward write
  o.limitStreamPressure = true;    // the scheduler then staggers them instead
  EXPECT_TRUE(colourStreams(p, *schedule::scheduleList(p, o)).spilled.empty());
}

}  // namespace
}  // namespace tsp::alloc
