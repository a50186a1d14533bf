// Property tests of list scheduling and annealing on random DAGs with many seeds.
#include "compile/schedule/list_scheduler.h"

#include <gtest/gtest.h>

#include "compile/schedule/annealer.h"
#include "compile/test_problems.h"

namespace tsp::schedule {
namespace {

TEST(ListScheduler, RandomDagsGiveVerifiedSchedulesAboveTheLowerBound) {
  topology::ChipSpec chip;
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    const Problem p = testing::randomProblem(chip, seed, 10 + static_cast<int>(seed % 50));
    ASSERT_TRUE(p.check().ok()) << seed;
    auto s = scheduleList(p, {});
    ASSERT_TRUE(s.ok()) << s.error().message;
    auto v = verify(p, *s);
    EXPECT_TRUE(v.ok()) << "seed " << seed << ": " << v.error().message;
    EXPECT_GE(s->makespan, lowerBound(p).value()) << seed;
    EXPECT_GE(s->makespan, lowerBound(p).resourceWindow) << seed;  // also a true bound
    EXPECT_GE(lowerBound(p).resourceWindow, lowerBound(p).busiestResource) << seed;
  }
}

TEST(ListScheduler, FewRegistersStillGiveAVerifiedSchedule) {
  topology::ChipSpec chip;
  chip.streamsPerDirection = 2;  // registers become the bottleneck
  for (std::uint64_t seed = 100; seed < 120; ++seed) {
    const Problem p = testing::randomProblem(chip, seed, 30);
    ASSERT_TRUE(p.check().ok());
    auto s = scheduleList(p, {});
    ASSERT_TRUE(s.ok());
    auto v = verify(p, *s);
    EXPECT_TRUE(v.ok()) << seed << ": " << v.error().message;
  }
}

TEST(ListScheduler, MissedDeadlineIsAnError) {
  topology::ChipSpec chip;
  Problem p(chip);
  p.addTask(testing::chainTask(chip, 0, 1, 100, "first"));
  Task late = testing::chainTask(chip, 0, 2, 10, "second");  // shares MEM 0, so it must wait 100 cycles
  late.deadline = 10;
  p.addTask(late);
  p.addDataDependence(0, 0, 1, 0);
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  auto s = scheduleList(p, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("task 'second' cannot start by its deadline 10"), std::string::npos);
}

TEST(ListScheduler, PriorityFollowsTheCriticalPath) {
  topology::ChipSpec chip;
  Problem p(chip);
  p.addTask(testing::chainTask(chip, 0, 1, 10, "head"));
  p.addTask(testing::chainTask(chip, 2, 3, 10, "tail"));
  p.addTask(testing::chainTask(chip, 4, 5, 10, "alone"));
  p.addDataDependence(0, 2, 1, 0);
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  const auto pr = priorities(p, {});
  EXPECT_GT(pr[0], pr[2]);  // same size, but a successor behind it
  Options betaOnly;
  betaOnly.alpha = 0;
  betaOnly.gamma = 0;
  const auto flat = priorities(p, betaOnly);
  EXPECT_DOUBLE_EQ(flat[0], flat[2]);
}

// An untimed successor (a send whose consumer takes the tensor at the program's end) lends its
// predecessor no critical-path priority: the head ranks as it does with no successor, the fanout aside.
TEST(ListScheduler, AnUntimedSuccessorLendsNoPriority) {
  topology::ChipSpec chip;
  auto headPriority = [&](bool linked, bool untimed) {
    Problem p(chip);
    p.addTask(testing::chainTask(chip, 0, 1, 10, "head"));
    Task tail = testing::chainTask(chip, 2, 3, 10, "tail");
    tail.untimed = untimed;
    p.addTask(tail);
    if (linked) p.addDataDependence(0, 2, 1, 0);
    p.finalize();
    EXPECT_TRUE(p.check().ok());
    Options noFanout;
    noFanout.gamma = 0;
    return priorities(p, noFanout)[0];
  };
  EXPECT_DOUBLE_EQ(headPriority(true, true), headPriority(false, true));
  EXPECT_GT(headPriority(true, false), headPriority(false, false));
}

TEST(Annealer, NeverWorseThanTheListScheduleAndDeterministic) {
  topology::ChipSpec chip;
  for (std::uint64_t seed = 0; seed < 25; ++seed) {
    const Problem p = testing::randomProblem(chip, 1000 + seed, 40);
    ASSERT_TRUE(p.check().ok());
    Options o;
    o.annealMoves = 60;
    o.seed = seed;
    const Schedule list = *scheduleList(p, o);
    auto a = anneal(p, list, o);
    ASSERT_TRUE(a.ok());
    EXPECT_LE(a->schedule.makespan, list.makespan) << seed;
    EXPECT_EQ(a->moves, 60);
    auto v = verify(p, a->schedule);
    EXPECT_TRUE(v.ok()) << seed << ": " << v.error().message;
    auto again = anneal(p, list, o);
    EXPECT_EQ(again->schedule.start, a->schedule.start) << seed;
    EXPECT_EQ(again->accepted, a->accepted);
  }
}

TEST(Annealer, ImprovesSomeRandomSchedules) {
  topology::ChipSpec chip;
  int improved = 0;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const Problem p = testing::randomProblem(chip, 5000 + seed, 50);
    ASSERT_TRUE(p.check().ok());
    Options o;
    o.annealMoves = 150;
    o.seed = seed;
    const Schedule list = *scheduleList(p, o);
    improved += anneal(p, list, o)->schedule.makespan < list.makespan;
  }
  EXPECT_GT(improved, 0);
}

TEST(Annealer, WorkBudgetCapsMoves) {
  topology::ChipSpec chip;
  const Problem p = testing::randomProblem(chip, 7, 40);
  ASSERT_TRUE(p.check().ok());
  Options o;
  o.annealMoves = 1000;
  o.annealWork = 40 * 25;
  auto a = anneal(p, *scheduleList(p, o), o);
  EXPECT_EQ(a->moves, 25);
}

}  // namespace
}  // namespace tsp::schedule
