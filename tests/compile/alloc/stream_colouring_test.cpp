// Tests of Chaitin-Briggs stream-register colouring.
#include "compile/alloc/stream_colouring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

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

// The textbook form of the same algorithm: each step scans every node for the least (degree,
// index) to simplify, or for the least (cost, degree, index) spill candidate.
StreamColouring colourByScans(const InterferenceGraph& g, const std::vector<double>& freq, int registers) {
  const int n = static_cast<int>(g.neighbours.size());
  std::vector<int> degree(n), stack;
  std::vector<char> removed(n, 0);
  for (int v = 0; v < n; ++v) degree[v] = static_cast<int>(g.neighbours[v].size());
  for (int left = n; left > 0; --left) {
    int pick = -1;
    for (int v = 0; v < n; ++v)
      if (!removed[v] && (pick < 0 || degree[v] < degree[pick])) pick = v;
    if (degree[pick] >= registers) {
      pick = -1;
      double best = 0;
      for (int v = 0; v < n; ++v) {
        if (removed[v]) continue;
        const double cost = 2.0 * freq[v] / static_cast<double>(degree[v]);
        if (pick < 0 || cost < best || (cost == best && degree[v] < degree[pick])) pick = v, best = cost;
      }
    }
    removed[pick] = 1;
    stack.push_back(pick);
    for (int w : g.neighbours[pick])
      if (!removed[w]) --degree[w];
  }
  StreamColouring c;
  c.streamId.assign(n, -1);
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
    std::vector<char> taken(registers, 0);
    for (int w : g.neighbours[*it])
      if (c.streamId[w] >= 0) taken[c.streamId[w]] = 1;
    for (int r = 0; r < registers && c.streamId[*it] < 0; ++r)
      if (!taken[r]) c.streamId[*it] = r;
    if (c.streamId[*it] < 0) c.spilled.push_back(*it);
  }
  std::sort(c.spilled.begin(), c.spilled.end());
  return c;
}

TEST(StreamColouring, HeapsGiveTheColouringOfTheScans) {
  // Random graphs from sparse to dense, with few registers so that many steps block and spill, and
  // frequencies with ties: the same colours and the same spills as the scans, node for node.
  std::mt19937_64 rng(7);
  int spills = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 60);
    const int density = 1 + static_cast<int>(rng() % 60);  // percent
    std::vector<std::pair<int, int>> edges;
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b)
        if (static_cast<int>(rng() % 100) < density) edges.push_back({a, b});
    std::vector<double> freq(n);
    for (auto& f : freq) f = static_cast<double>(1 + rng() % 4);
    const int registers = 1 + static_cast<int>(rng() % 8);
    const auto g = graphOf(n, edges);
    const auto heaps = colourGraph(g, freq, registers);
    const auto scans = colourByScans(g, freq, registers);
    ASSERT_EQ(heaps.streamId, scans.streamId) << "trial " << trial;
    ASSERT_EQ(heaps.spilled, scans.spilled) << "trial " << trial;
    EXPECT_TRUE(proper(g, heaps));
    spills += static_cast<int>(heaps.spilled.size());
  }
  EXPECT_GT(spills, 0);  // the spill choice was exercised
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
