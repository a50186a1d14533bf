// The order-free lower bound is a true bound: never above the exact optimum of tiny problems (found by
// enumeration), nor above any schedule the list scheduler or the annealer finds on random problems.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "compile/schedule/annealer.h"
#include "compile/schedule/list_scheduler.h"
#include "compile/test_problems.h"

namespace tsp::schedule {
namespace {

// A chip whose pools bind in small problems: 2 VXM ALU groups, 2 SXM units per hemisphere.
topology::ChipSpec smallPoolChip() {
  topology::ChipSpec chip;
  chip.vxmAluGroups = 2;
  chip.sxmUnits = 4;
  return chip;
}

// A random problem of `tasks` chain tasks (MEM read -> VXM -> MEM write) near the VXM (short times of
// flight), on a few MEM slices so that ports and the ALU pool are shared, with random data
// dependences and releases, and a serial group of `segments` single-task segments (read to write).
struct TinyInstance {
  Problem problem;
  std::vector<std::vector<SerialSegment>> serial;
};

TinyInstance tinyInstance(const topology::ChipSpec& chip, std::uint64_t seed, int tasks, int segments) {
  std::mt19937_64 rng(seed);
  TinyInstance instance{Problem(chip), {}};
  Problem& p = instance.problem;
  const int mid = chip.memSlices / 2;
  for (int i = 0; i < tasks; ++i) {
    const int a = mid - 2 + static_cast<int>(rng() % 4);
    int b = mid - 2 + static_cast<int>(rng() % 3);
    if (b >= a) ++b;
    auto t = testing::chainTask(chip, a, b, 1 + static_cast<int>(rng() % 8), std::string("t").append(std::to_string(i)));
    t.release = rng() % 3 == 0 ? static_cast<Cycle>(rng() % 12) : 0;
    p.addTask(t);
    for (int j = 0; j < i; ++j)
      if (rng() % 4 == 0) p.addDataDependence(j, 2, i, 0);
  }
  p.finalize();
  if (segments > 0) {
    std::vector<int> order(static_cast<size_t>(tasks));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    instance.serial.emplace_back();
    for (int k = 0; k < segments; ++k) instance.serial.back().push_back({order[k], 0, order[k], 2, 1 + static_cast<Cycle>(rng() % 4)});
  }
  return instance;
}

// The chain of one order of a group's segments: each next one's first step `gap` after the last step
// of the one before it.
std::vector<Dependence> chainOf(const std::vector<SerialSegment>& group, const std::vector<int>& order) {
  std::vector<Dependence> chain;
  for (size_t k = 1; k < order.size(); ++k) {
    const SerialSegment& a = group[order[k - 1]];
    const SerialSegment& b = group[order[k]];
    chain.push_back({a.last, a.lastStep, b.first, b.firstStep, a.gap});
  }
  return chain;
}

Problem withChain(const Problem& problem, const std::vector<Dependence>& chain) {
  Problem p = problem;
  for (const auto& d : chain) p.addDependence(d);
  p.finalize();
  return p;
}

// The least makespan of a tiny problem under its dependences, releases, units (a pool holds at most
// its count of steps at once), MEM ports and serial groups (two segments of a group never overlap:
// one's first step at least its predecessor's gap after the other's last step), by depth-first
// enumeration of every task's start in topological order. A relaxation of the scheduler's problem
// (it leaves out MEM queue dispatch, banks and stream registers), so its optimum is at most the
// problem's, and a true bound is at most it. -1 when the search passes `nodeLimit` nodes.
class ExactSolver {
 public:
  ExactSolver(const Problem& p, const std::vector<std::vector<SerialSegment>>& serial, Cycle upper)
      : p_(p), serial_(serial), best_(upper) {
    const auto& chip = p.chip();
    const size_t n = p.tasks().size();
    start_.assign(n, -1);
    tail_.assign(n, 0);
    const auto& topo = p.topologicalOrder();
    for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
      Cycle t = p.span(*it);
      for (const auto& d : p.dependences())
        if (d.from == *it)
          t = std::max(t, p.tasks()[d.from].steps[d.fromStep].offset + d.latency - p.tasks()[d.to].steps[d.toStep].offset + tail_[d.to]);
      tail_[*it] = t;
    }
    for (size_t t = 0; t < n; ++t)
      for (size_t k = 0; k < p.tasks()[t].steps.size(); ++k) {
        const auto& inst = p.tasks()[t].steps[k].inst;
        int key = unitPool(chip, inst.unit).first;
        if (isMemAccess(inst)) key = static_cast<int>(p.units().size()) + memPortOf(chip, inst);
        keys_.push_back({static_cast<int>(t), static_cast<int>(k), key, unitPool(chip, inst.unit).count});
      }
    occupancy_.assign(p.units().size() + 2 * static_cast<size_t>(chip.memSlices), std::vector<int>(static_cast<size_t>(upper) + 64, 0));
  }

  Cycle solve(std::int64_t nodeLimit) {
    limit_ = nodeLimit;
    search(0);
    return nodes_ > limit_ ? -1 : best_;
  }

 private:
  struct Use {
    int task, step, key, units;
  };

  void search(size_t index) {
    if (++nodes_ > limit_) return;
    const auto& topo = p_.topologicalOrder();
    const Cycle ripple = p_.chip().rippleCycles;
    if (index == topo.size()) {
      Cycle end = 0;
      for (size_t t = 0; t < start_.size(); ++t) end = std::max(end, start_[t] + p_.span(static_cast<int>(t)));
      best_ = std::min(best_, end + ripple);
      return;
    }
    const int t = topo[index];
    Cycle least = p_.tasks()[t].release;
    for (const auto& d : p_.dependences())
      if (d.to == t)
        least = std::max(least, start_[d.from] + p_.tasks()[d.from].steps[d.fromStep].offset + d.latency - p_.tasks()[t].steps[d.toStep].offset);
    for (Cycle s = least; s + tail_[t] + ripple < best_; ++s) {
      if (!fits(t, s)) continue;
      place(t, s, +1);
      search(index + 1);
      place(t, s, -1);
      if (nodes_ > limit_) return;
    }
  }

  bool fits(int t, Cycle s) const {
    for (const Use& u : keys_) {
      if (u.task != t) continue;
      const Cycle from = s + p_.tasks()[t].steps[u.step].offset, to = s + p_.unitEnd(t, u.step);
      for (Cycle c = from; c < to; ++c)
        if (c >= static_cast<Cycle>(occupancy_[u.key].size()) || occupancy_[u.key][c] >= u.units) return false;
    }
    for (const auto& group : serial_)
      for (const SerialSegment& a : group) {
        if (a.first != t) continue;
        const Cycle aFirst = s + p_.tasks()[t].steps[a.firstStep].offset, aLast = s + p_.tasks()[t].steps[a.lastStep].offset;
        for (const SerialSegment& b : group) {
          if (b.first == t || start_[b.first] < 0) continue;
          const Cycle bFirst = start_[b.first] + p_.tasks()[b.first].steps[b.firstStep].offset;
          const Cycle bLast = start_[b.first] + p_.tasks()[b.first].steps[b.lastStep].offset;
          if (!(bFirst >= aLast + a.gap || aFirst >= bLast + b.gap)) return false;
        }
      }
    return true;
  }

  void place(int t, Cycle s, int delta) {
    start_[t] = delta > 0 ? s : -1;
    for (const Use& u : keys_)
      if (u.task == t)
        for (Cycle c = s + p_.tasks()[t].steps[u.step].offset; c < s + p_.unitEnd(t, u.step); ++c) occupancy_[u.key][c] += delta;
  }

  const Problem& p_;
  const std::vector<std::vector<SerialSegment>>& serial_;
  Cycle best_;
  std::vector<Cycle> start_, tail_;
  std::vector<Use> keys_;
  std::vector<std::vector<int>> occupancy_;
  std::int64_t nodes_ = 0, limit_ = 0;
};

// On tiny problems (5 to 7 tasks, 2 or 3 of them a serial group) the bound, with and without the
// resource-raised heads and tails, is at most the exact optimum over every order of the group; and
// the bound of the problem chained in one order, with that chain relaxed, is the same order-free bound.
TEST(LowerBound, NeverAboveTheExactOptimumOfTinyProblems) {
  const topology::ChipSpec chip = smallPoolChip();
  int solved = 0, raised = 0, tight = 0;
  for (std::uint64_t seed = 0; seed < 120; ++seed) {
    const int tasks = 5 + static_cast<int>(seed % 3), segments = 2 + static_cast<int>(seed % 2);
    const TinyInstance instance = tinyInstance(chip, seed, tasks, segments);
    ASSERT_TRUE(instance.problem.check().ok()) << seed;
    // Every order of the group that the data allows, as a chain: the list schedules' best is the
    // search's first upper bound, and each order's bound with its chain relaxed is the order-free one.
    std::vector<int> order(static_cast<size_t>(segments));
    std::iota(order.begin(), order.end(), 0);
    Cycle upper = std::numeric_limits<Cycle>::max();
    std::vector<Cycle> relaxedBounds;
    do {
      const auto chain = chainOf(instance.serial[0], order);
      const Problem chained = withChain(instance.problem, chain);
      if (!chained.check().ok()) continue;  // the order runs against the data
      const Schedule list = *scheduleList(chained, {});
      ASSERT_TRUE(verify(chained, list).ok()) << seed;
      upper = std::min(upper, list.makespan);
      relaxedBounds.push_back(lowerBound(chained, chain, instance.serial).value());
    } while (std::next_permutation(order.begin(), order.end()));
    ASSERT_FALSE(relaxedBounds.empty()) << seed;
    ExactSolver solver(instance.problem, instance.serial, upper);
    const Cycle optimum = solver.solve(4'000'000);
    if (optimum < 0) continue;
    ++solved;
    const LowerBound bound = lowerBound(instance.problem, {}, instance.serial);
    const LowerBound plain = lowerBound(instance.problem, {}, instance.serial, 0);
    EXPECT_LE(bound.value(), optimum) << "seed " << seed;
    EXPECT_LE(bound.serialSegments, optimum) << "seed " << seed;
    EXPECT_LE(bound.resourceWindow, optimum) << "seed " << seed;
    EXPECT_GE(bound.value(), plain.value()) << "seed " << seed;
    for (const Cycle b : relaxedBounds) EXPECT_EQ(b, bound.value()) << "seed " << seed;
    raised += bound.value() > plain.value();
    tight += bound.value() == optimum;
  }
  EXPECT_GE(solved, 100);
  // The raised heads and tails make a difference on some of them, and the bound is often exact.
  EXPECT_GT(raised, 0);
  EXPECT_GT(tight, 10);
}

// On random problems of 10 to 60 tasks with a serial group chained in a random order, the order-free
// bound is at most the list schedule and the annealed schedule of that order, on the full chip and on
// one whose pools bind.
TEST(LowerBound, NeverAboveListOrAnnealedSchedulesOfRandomProblems) {
  for (const topology::ChipSpec& chip : {topology::ChipSpec{}, smallPoolChip()}) {
    for (std::uint64_t seed = 0; seed < 40; ++seed) {
      const int tasks = 10 + static_cast<int>(seed % 50);
      const Problem p = testing::randomProblem(chip, seed, tasks);
      std::mt19937_64 rng(seed);
      std::vector<SerialSegment> group;
      for (int t = 0; t < tasks; ++t)
        if (rng() % 4 == 0) group.push_back({t, 0, t, 2, 1 + static_cast<Cycle>(rng() % 8)});
      // A random order, or (when it runs against the data) the order of the task indices, along
      // which every dependence runs.
      std::vector<int> order(group.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      if (!withChain(p, chainOf(group, order)).check().ok()) std::sort(order.begin(), order.end());
      const auto chain = chainOf(group, order);
      const Problem chained = withChain(p, chain);
      ASSERT_TRUE(chained.check().ok()) << seed;
      const LowerBound bound = lowerBound(chained, chain, {group});
      const Schedule list = *scheduleList(chained, {});
      Options options;
      options.annealMoves = 64;
      options.seed = seed;
      const auto annealed = anneal(chained, list, options);
      ASSERT_TRUE(annealed.ok());
      EXPECT_LE(bound.value(), list.makespan) << seed;
      EXPECT_LE(bound.value(), annealed->schedule.makespan) << seed;
      EXPECT_GE(bound.value(), lowerBound(chained, chain, {group}, 0).value()) << seed;
    }
  }
}

// The ALU pool must have run four 40-row tasks before a segment's task can start: the raised head is
// their work over the 2 groups, later than the data alone allows, and it moves the serial group's bound.
TEST(LowerBound, ResourcesRaiseASegmentsHead) {
  const topology::ChipSpec chip = smallPoolChip();
  Problem p(chip);
  const int mid = chip.memSlices / 2;
  for (int i = 0; i < 4; ++i) p.addTask(testing::chainTask(chip, mid - 4 + i, mid + i, 40, std::string("a").append(std::to_string(i))));
  p.addTask(testing::chainTask(chip, mid - 6, mid + 6, 30, "after"));  // 4: waits for all four
  p.addTask(testing::chainTask(chip, mid - 8, mid + 8, 30, "free"));   // 5: no data before it
  for (int i = 0; i < 4; ++i) p.addDataDependence(i, 2, 4, 0);
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  // (Wide gaps keep the busiest resource below the bound from the data, where the rounds run.)
  const std::vector<std::vector<SerialSegment>> serial{{{4, 0, 4, 2, 60}, {5, 0, 5, 2, 60}}};
  const LowerBound plain = lowerBound(p, {}, serial, 0), bound = lowerBound(p, {}, serial);
  // Four ALU steps of 40 rows on 2 groups: the last ends no earlier than 80 cycles after the first
  // could start, and "after" needs the longest path from that end to its start.
  EXPECT_GT(bound.serialSegments, plain.serialSegments);
  EXPECT_GE(bound.value(), plain.value());
  for (const auto& order : {std::vector<int>{0, 1}, std::vector<int>{1, 0}}) {
    const auto chain = chainOf(serial[0], order);
    const Problem chained = withChain(p, chain);
    ASSERT_TRUE(chained.check().ok());
    EXPECT_GE(scheduleList(chained, {})->makespan, bound.value());
  }
}

}  // namespace
}  // namespace tsp::schedule
