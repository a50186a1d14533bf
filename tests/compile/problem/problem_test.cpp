// Tests of the scheduling problem: check() of the input and verify() of a schedule, one per message.
#include "compile/problem/problem.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "compile/schedule/list_scheduler.h"
#include "compile/test_problems.h"

namespace tsp::schedule {
namespace {

using testing::chainTask;

std::string checkError(const Problem& p) {
  auto s = p.check();
  return s.ok() ? std::string() : s.error().message;
}

TEST(Problem, OffsetsFollowTheTimeOfFlight) {
  topology::ChipSpec chip;
  Problem p(chip);
  p.addTask(chainTask(chip, 0, 50, 8, "a"));
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  const auto& steps = p.tasks()[0].steps;
  const auto units = chip.units();
  EXPECT_EQ(steps[0].offset, 0);
  EXPECT_EQ(steps[1].offset, chip.memReadCycles + std::abs(units[steps[0].inst.unit].slice - units[steps[1].inst.unit].slice));
  EXPECT_EQ(steps[2].offset,
            steps[1].offset + chip.vxmCycles + std::abs(units[steps[1].inst.unit].slice - units[steps[2].inst.unit].slice));
  ASSERT_EQ(p.streamEdges().size(), 2u);
  EXPECT_EQ(p.streamEdges()[0].dir, isa::Direction::kEast);  // MEM 0 is west of the VXM
  EXPECT_EQ(p.streamEdges()[1].dir, isa::Direction::kEast);  // MEM 50 is east of it
}

TEST(Problem, CheckingTheDependencesAloneFindsACycleAChangeCloses) {
  // What the plane-order search relies on: after check() passed, a change of dependences is
  // checked by checkDependences(), which finds a cycle as check() does and orders the tasks anew.
  topology::ChipSpec chip;
  Problem p(chip);
  p.addTask(chainTask(chip, 0, 1, 4, "a"));
  p.addTask(chainTask(chip, 2, 3, 4, "b"));
  p.addDataDependence(1, 2, 0, 0);
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  EXPECT_EQ(p.topologicalOrder(), (std::vector<int>{1, 0}));
  p.addDataDependence(0, 2, 1, 0);
  const auto s = p.checkDependences();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("lies on a dependence cycle"), std::string::npos);
  EXPECT_EQ(s.error().message, checkError(p));
  p.mutableDependences().pop_back();
  p.mutableDependences().front() = {0, 2, 1, 0, 1};
  ASSERT_TRUE(p.checkDependences().ok());
  EXPECT_EQ(p.topologicalOrder(), (std::vector<int>{0, 1}));
}

TEST(Problem, SideOperandsAreAlignedBackwards) {
  topology::ChipSpec chip;
  Problem p(chip);
  Task t = chainTask(chip, 0, 60, 4, "binary");
  t.steps[1].inst.op = isa::Opcode::kVxmBinary;
  t.steps[1].producer2 = 3;
  Step side = t.steps[0];
  side.inst.unit = chip.firstUnit(topology::UnitKind::kMem) + 80;  // east of the VXM: a westward stream
  t.steps.push_back(side);
  p.addTask(t);
  p.finalize();
  ASSERT_TRUE(p.check().ok()) << checkError(p);
  EXPECT_EQ(p.streamEdges().size(), 3u);
  bool west = false;
  for (const auto& e : p.streamEdges()) west |= e.dir == isa::Direction::kWest;
  EXPECT_TRUE(west);
}

TEST(Problem, AValueWrittenByTwoSlicesReachesTheFarther) {
  // One result written by two MEM slices downstream of its producer: each write at its own time of
  // flight, the stream edge reaching the farther; verify() sees both write ports.
  topology::ChipSpec chip;
  Problem p(chip);
  Task t = chainTask(chip, 0, 60, 40, "twice");
  t.steps.push_back(t.steps[2]);
  t.steps[3].inst.unit = chip.firstUnit(topology::UnitKind::kMem) + 70;
  p.addTask(t);
  p.addTask(chainTask(chip, 1, 70, 40, "other"));  // writes the second copy's slice too
  p.finalize();
  ASSERT_TRUE(p.check().ok()) << checkError(p);
  const auto& steps = p.tasks()[0].steps;
  EXPECT_EQ(steps[3].offset - steps[2].offset, 10);
  const auto [eb, ee] = p.edgesOf(0);
  ASSERT_EQ(ee - eb, 2);
  EXPECT_EQ(p.streamEdges()[eb + 1].reach, p.sliceOf(steps[3].inst.unit) - p.sliceOf(steps[1].inst.unit));
  auto s = scheduleList(p, {});
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_TRUE(verify(p, *s).ok());
  // The two tasks write slice 70 for 40 cycles each: they must not overlap there.
  const Cycle a = s->start[0] + steps[3].offset, b = s->start[1] + p.tasks()[1].steps[2].offset;
  EXPECT_TRUE(a + 40 <= b || b + 40 <= a);
  Schedule broken = *s;
  broken.start[1] = s->start[0] + steps[3].offset - p.tasks()[1].steps[2].offset;
  EXPECT_FALSE(verify(p, broken).ok());
}

TEST(ProblemCheck, RejectsEachMalformedInput) {
  topology::ChipSpec chip;
  {
    Problem p(chip);
    p.addTask(chainTask(chip, 0, 1, 4, "a"));
    EXPECT_NE(checkError(p).find("finalize() was not called"), std::string::npos);
  }
  {
    Problem p(chip);
    p.addTask(Task{{}, "empty", 0, -1});
    p.finalize();
    EXPECT_NE(checkError(p).find("has no instructions"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "late");
    t.release = 10;
    t.deadline = 5;
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("deadline 5 is before its release 10"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "nounit");
    t.steps[2].inst.unit = 9999;
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("step 2 names unit 9999, which does not exist"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "wrongkind");
    t.steps[1].inst.unit = chip.firstUnit(topology::UnitKind::kSxm);
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("VxmUnary cannot run on a SXM unit"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "repeat");
    t.steps[0].inst.repeat = 0;
    t.steps[1].inst.repeat = 0;
    t.steps[2].inst.repeat = 0;
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("repeat and interval must be >= 1"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "address");
    t.steps[2].inst.address = chip.addressesPerSlice - 2;
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("SRAM addresses"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "rates");
    t.steps[2].inst.repeat = 3;
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("reads 3 values every 1 cycles from step 1, which makes 4 every 1"), std::string::npos);
  }
  {
    Problem p(chip);
    p.addTask(chainTask(chip, 0, 1, 4, "offset"));
    p.finalize();
    p.mutableTasks()[0].steps[2].offset += 1;
    EXPECT_NE(checkError(p).find("but the time of flight from step 1 gives"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "fanout");
    t.steps.push_back(t.steps[2]);
    t.steps[3].inst.unit = chip.firstUnit(topology::UnitKind::kMem) + 80;  // the VXM's other side
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("step 1 feeds step 3 eastward and step 2 westward"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 5, 5, 400, "self");
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("steps 0 and 2 use unit"), std::string::npos);
  }
  {
    topology::ChipSpec one = chip;
    one.streamsPerDirection = 1;
    Problem p(one);
    p.addTask(chainTask(one, 0, 60, 40, "registers"));  // both streams run eastward at once
    p.finalize();
    EXPECT_NE(checkError(p).find("needs 2 stream registers eastward at once, the chip has 1"), std::string::npos);
  }
  {
    Problem p(chip);
    p.addTask(chainTask(chip, 0, 1, 4, "a"));
    p.addDependence({0, 0, 3, 0, 1});
    p.finalize();
    EXPECT_NE(checkError(p).find("names a missing step"), std::string::npos);
  }
  {
    Problem p(chip);
    p.addTask(chainTask(chip, 0, 1, 4, "a"));
    p.addDependence({0, 0, 0, 1, 1});
    p.finalize();
    EXPECT_NE(checkError(p).find("depends on itself"), std::string::npos);
  }
  {
    Problem p(chip);
    p.addTask(chainTask(chip, 0, 1, 4, "a"));
    p.addTask(chainTask(chip, 2, 3, 4, "b"));
    p.addDataDependence(0, 2, 1, 0);
    p.addDataDependence(1, 2, 0, 0);
    p.finalize();
    EXPECT_NE(checkError(p).find("lies on a dependence cycle"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "badproducer");
    t.steps[1].producer = 1;
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("which is not another step of the task"), std::string::npos);
  }
  {
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "badfollow");
    t.steps[2].follows = 2;
    p.addTask(t);
    p.finalize();
    EXPECT_NE(checkError(p).find("step 2 follows step 2, which is not another step of the task"), std::string::npos);
  }
  {
    // Two chains in one task, the second issuing 10 cycles after the first (Step::follows).
    Problem p(chip);
    Task t = chainTask(chip, 0, 1, 4, "follow");
    const Task second = chainTask(chip, 2, 3, 4, "second");
    for (Step st : second.steps) {
      if (st.producer >= 0) st.producer += 3;
      t.steps.push_back(st);
    }
    t.steps[3].follows = 0;
    t.steps[3].followGap = 10;
    p.addTask(t);
    p.finalize();
    EXPECT_EQ(p.tasks()[0].steps[3].offset, p.tasks()[0].steps[0].offset + 10);
    EXPECT_TRUE(p.check().ok()) << p.check().error().message;
    p.mutableTasks()[0].steps[3].followGap = 11;
    EXPECT_NE(checkError(p).find("step 3 issues at offset 10, but following step 0 by 11 gives 11"), std::string::npos)
        << checkError(p);
  }
}

// A valid two-task schedule to break one constraint at a time.
struct Fixture {
  topology::ChipSpec chip;
  Problem problem{chip};
  Schedule schedule;
  Fixture() {
    chip.c2cPorts = 16;
    problem.addTask(chainTask(chip, 0, 1, 16, "a"));
    problem.addTask(chainTask(chip, 2, 3, 16, "b"));
    problem.addDataDependence(0, 2, 1, 0);
    problem.finalize();
    EXPECT_TRUE(problem.check().ok());
    schedule = *scheduleList(problem, {});
    EXPECT_TRUE(verify(problem, schedule).ok());
  }
  std::string error() {
    auto s = verify(problem, schedule);
    return s.ok() ? std::string() : s.error().message;
  }
};

TEST(Verify, CatchesABrokenDependence) {
  Fixture f;
  f.schedule.start[1] = f.schedule.start[0];
  EXPECT_NE(f.error().find("before task 0 step 2 allows"), std::string::npos);
}

TEST(Verify, CatchesAnEarlyStartAndAMissedDeadline) {
  Fixture f;
  f.problem.mutableTasks()[0].release = 5;
  f.problem.finalize();
  EXPECT_NE(f.error().find("before its release 5"), std::string::npos);
  f.problem.mutableTasks()[0].release = 0;
  f.problem.mutableTasks()[1].deadline = 1;
  f.problem.finalize();
  EXPECT_NE(f.error().find("after its deadline 1"), std::string::npos);
}

TEST(Verify, CatchesABusyUnit) {
  topology::ChipSpec chip;
  Problem p(chip);
  p.addTask(chainTask(chip, 0, 1, 16, "a"));
  p.addTask(chainTask(chip, 0, 3, 16, "b"));  // reads the same MEM slice
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  Schedule s = *scheduleList(p, {});
  ASSERT_TRUE(verify(p, s).ok());
  s.start[1] = s.start[0] + 3;
  s.unitOf[s.stepBase[1] + 1] = chip.firstUnit(topology::UnitKind::kVxm) + 5;  // another ALU group: only MEM clashes
  auto v = verify(p, s);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("MEM port 0 is busy until"), std::string::npos)  // slice 0's read port
      << v.error().message;
  s.start[1] = s.start[0];  // the queue dispatches one instruction per cycle
  v = verify(p, s);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("unit 0 is busy until"), std::string::npos);
}

// A read and a write of one slice may run at once only on different banks in every common cycle.
TEST(Verify, CatchesAReadAndAWriteOnOneBank) {
  topology::ChipSpec chip;
  chip.bankMapping = topology::BankMapping::kLinear;  // addresses 0..4095 in bank 0
  Problem p(chip);
  p.addTask(chainTask(chip, 0, 1, 16, "reads slice 0"));   // reads addresses 0.., writes slice 1 at 100..
  p.addTask(chainTask(chip, 2, 0, 16, "writes slice 0"));  // writes slice 0 at 100..
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  Schedule s = *scheduleList(p, {});
  ASSERT_TRUE(verify(p, s).ok());
  // Overlap the write on slice 0 with the read: both in bank 0.
  s.start[0] = 1000;
  const Cycle readAt = s.start[0] + p.tasks()[0].steps[0].offset;
  s.start[1] = readAt - p.tasks()[1].steps[2].offset + 1;
  auto v = verify(p, s);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("MEM slice 0: its write and a read of task 0 hit one bank in cycle"),
            std::string::npos)
      << v.error().message;
}

// The bank mapping decides how often a write must wait for a read of its slice: linear mapping puts
// the consecutive addresses of both runs in one bank, prime-modulo alternates banks.
TEST(ListScheduler, BankMappingChangesTheDelayedAccesses) {
  std::int64_t delayed[3] = {0, 0, 0};
  const topology::BankMapping mappings[3] = {topology::BankMapping::kLinear, topology::BankMapping::kPrimeModulo,
                                             topology::BankMapping::kXor};
  for (int m = 0; m < 3; ++m) {
    topology::ChipSpec chip;
    chip.bankMapping = mappings[m];
    Problem p(chip);
    // Readers of slice 0 and writers into slice 0 at an odd address distance, all ready at once.
    for (int i = 0; i < 6; ++i) {
      Task a = chainTask(chip, 0, 10 + i, 64, "read " + std::to_string(i));
      a.steps[0].inst.address = 128 * i;
      p.addTask(a);
      Task b = chainTask(chip, 20 + i, 0, 64, "write " + std::to_string(i));
      b.steps[2].inst.address = 4096 + 128 * i + 1;
      p.addTask(b);
    }
    p.finalize();
    ASSERT_TRUE(p.check().ok());
    auto s = scheduleList(p, {});
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(verify(p, *s).ok());
    delayed[m] = s->bankDelayedMemAccesses;
  }
  EXPECT_NE(delayed[0], delayed[1]);
}

// A write that would meet a running read of its slice in one bank is tried a cycle or two later,
// where under prime-modulo banks the two runs' addresses pair up on different banks, instead of
// waiting for the read to end: for either parity of the address distance the write runs beside the
// read, and for one of them the scheduler had to move it.
TEST(ListScheduler, AWriteThatMeetsAReadInABankStartsACycleOrTwoLater) {
  topology::ChipSpec chip;
  ASSERT_EQ(chip.bankMapping, topology::BankMapping::kPrimeModulo);
  std::int64_t moved = 0;
  for (int parity = 0; parity < 2; ++parity) {
    Problem p(chip);
    p.addTask(chainTask(chip, 0, 1, 160, "reads slice 0"));  // addresses 0 to 159: no wrap past 173
    Task write = chainTask(chip, 20, 0, 64, "writes slice 0");
    write.steps[2].inst.address = 24 * 173 + parity;  // bank (address mod 173) mod 2, no wrap in 64 rows
    p.addTask(write);
    p.finalize();
    ASSERT_TRUE(p.check().ok());
    auto s = scheduleList(p, {});
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(verify(p, *s).ok());
    const Cycle readLast = s->start[0] + p.tasks()[0].steps[0].offset + 159;
    const Cycle writeFirst = s->start[1] + p.tasks()[1].steps[2].offset;
    EXPECT_LE(writeFirst, readLast) << "parity " << parity << ": the write waited for the read to end";
    moved += s->bankDelayedMemAccesses;
  }
  EXPECT_GT(moved, 0);
}

TEST(Verify, CatchesAWrongUnitAndAMissingRegister) {
  Fixture f;
  f.schedule.unitOf[0] = f.chip.firstUnit(topology::UnitKind::kSxm);
  EXPECT_NE(f.error().find("which cannot run it"), std::string::npos);
  Fixture g;
  g.schedule.streamId[0] = -1;
  EXPECT_NE(g.error().find("has no stream register"), std::string::npos);
}

TEST(Verify, CatchesTwoValuesOnOneStreamCell) {
  topology::ChipSpec chip;
  Problem p(chip);
  p.addTask(chainTask(chip, 0, 1, 16, "a"));
  p.addTask(chainTask(chip, 2, 3, 16, "b"));
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  Schedule s = *scheduleList(p, {});
  // Same start, same registers: the read streams of both tasks overlap on their way to the VXM
  // (the VXM pool hands them different ALU groups).
  s.start[1] = s.start[0];
  s.unitOf[s.stepBase[1] + 1] = s.unitOf[s.stepBase[0] + 1] + 1;
  s.streamId = std::vector<int>(s.streamId.size(), 0);
  auto v = verify(p, s);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("holds two values at once"), std::string::npos);
}

TEST(Verify, CatchesABusyLink) {
  topology::ChipSpec chip;
  Problem p(chip);
  for (int i = 0; i < 2; ++i) {
    Task t;
    t.name = std::string("send").append(std::to_string(i));
    Step read, tx;
    read.inst.unit = chip.firstUnit(topology::UnitKind::kMem) + i;
    read.inst.op = isa::Opcode::kMemRead;
    read.inst.address = 0;
    read.inst.stride = 1;
    read.inst.repeat = 8;
    read.inst.interval = 20;
    tx.inst.unit = chip.firstUnit(topology::UnitKind::kC2c) + 3;
    tx.inst.op = isa::Opcode::kC2cSend;
    tx.inst.port = 3;
    tx.inst.repeat = 8;
    tx.inst.interval = 20;
    tx.linkSpacing = 20;
    tx.producer = 0;
    t.steps = {read, tx};
    p.addTask(t);
  }
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  Schedule s = *scheduleList(p, {});
  ASSERT_TRUE(verify(p, s).ok());
  EXPECT_GE(std::abs(s.start[1] - s.start[0]), 8 * 20);
  // The unit is free one cycle after the last vector leaves; the link needs 19 more.
  s.start[1] = s.start[0] + 7 * 20 + 1;
  auto v = verify(p, s);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("link of port 3 is busy"), std::string::npos);
}

TEST(LowerBound, IsTheLargestOfItsParts) {
  topology::ChipSpec chip;
  Problem p(chip);
  for (int i = 0; i < 4; ++i) p.addTask(chainTask(chip, 0, 1 + i, 100, std::string("t").append(std::to_string(i))));  // all read MEM 0
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  const LowerBound b = lowerBound(p);
  EXPECT_EQ(b.busiestResource, 400 + chip.rippleCycles);
  EXPECT_EQ(b.criticalPath, p.span(0) + chip.rippleCycles);
  EXPECT_EQ(b.value(), std::max({b.busiestResource, b.criticalPath, b.resourceWindow, b.serialSegments}));
  const Schedule s = *scheduleList(p, {});
  EXPECT_GE(s.makespan, b.value());
  // The reads take turns on MEM 0's read port; the last one's task still needs its span after it:
  // the window bound sees that (and the four serialised tasks meet it), the busiest port does not.
  Cycle shortest = p.span(0);
  for (int i = 1; i < 4; ++i) shortest = std::min(shortest, p.span(i));
  EXPECT_EQ(b.resourceWindow, 400 + (shortest - 100) + chip.rippleCycles);
  EXPECT_GT(b.resourceWindow, std::max(b.busiestResource, b.criticalPath));
  EXPECT_EQ(b.value(), b.resourceWindow);
  EXPECT_GE(s.makespan, b.resourceWindow);
}

// Dependences an order chose (a plane's chain) are left out of the order-free bound, each
// occurrence once; the problem's other dependences stay.
TEST(LowerBound, RelaxedDependencesAreLeftOut) {
  topology::ChipSpec chip;
  Problem p(chip);
  for (int i = 0; i < 3; ++i) p.addTask(chainTask(chip, 10 + i, 20 + i, 100, std::string("t").append(std::to_string(i))));
  p.addDataDependence(0, 2, 1, 0);  // t0 -> t1: the lowering's (true) dependence
  const Dependence chosen{1, 2, 2, 0, 1000};  // t1 -> t2: a chosen order's, with a long latency
  p.addDependence(chosen);
  p.addDependence(chosen);  // twice: one occurrence stays when one is relaxed
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  const LowerBound all = lowerBound(p), once = lowerBound(p, {chosen}), free = lowerBound(p, {chosen, chosen});
  EXPECT_EQ(once.criticalPath, all.criticalPath);
  EXPECT_LT(free.criticalPath, all.criticalPath);
  // Without the chain t2 may start at 0; t1 still starts after t0's write completed.
  const Cycle t1Start = p.completionOffset(0, 2);
  EXPECT_EQ(free.criticalPath, t1Start + p.span(1) + chip.rippleCycles);
  EXPECT_EQ(all.criticalPath, t1Start + p.tasks()[1].steps[2].offset + 1000 + p.span(2) + chip.rippleCycles);
  EXPECT_EQ(free.busiestResource, all.busiestResource);
  const Schedule s = *scheduleList(p, {});
  EXPECT_GE(s.makespan, all.value());
}

// Segments that never overlap, whatever their order: their shortest lengths add up, with the gaps
// between them, after the least head and before the least tail.
TEST(LowerBound, SerialSegmentsAddUp) {
  topology::ChipSpec chip;
  Problem p(chip);
  // Two segments of two chained tasks each (tasks 0-1 and 2-3), on different slices: without the
  // group nothing orders them.
  for (int i = 0; i < 4; ++i) p.addTask(chainTask(chip, 10 + i, 20 + i, 50, std::string("t").append(std::to_string(i))));
  p.addDataDependence(0, 2, 1, 0);
  p.addDataDependence(2, 2, 3, 0);
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  const LowerBound free = lowerBound(p);
  EXPECT_EQ(free.serialSegments, 0);
  const SerialSegment a{0, 0, 1, 2, 7}, b{2, 0, 3, 2, 5};
  const Cycle lengthA = p.completionOffset(0, 2) + p.tasks()[1].steps[2].offset;
  const Cycle lengthB = p.completionOffset(2, 2) + p.tasks()[3].steps[2].offset;
  const LowerBound serial = lowerBound(p, {}, {{a, b}});
  // Least head 0; the widest gap (7) is left out, since either segment may go last; the least tail
  // after a segment's last step is what the write still needs.
  const Cycle tailAfter = std::min(p.span(1) - p.tasks()[1].steps[2].offset, p.span(3) - p.tasks()[3].steps[2].offset);
  EXPECT_EQ(serial.serialSegments, lengthA + lengthB + 5 + tailAfter + chip.rippleCycles);
  EXPECT_GT(serial.value(), free.value());
  // Either order of the two segments, as dependences, schedules no faster.
  for (const auto& [first, second] : {std::pair{a, b}, std::pair{b, a}}) {
    Problem ordered = p;
    ordered.addDependence({first.last, first.lastStep, second.first, second.firstStep, first.gap});
    ordered.finalize();
    ASSERT_TRUE(ordered.check().ok());
    EXPECT_GE(scheduleList(ordered, {})->makespan, serial.serialSegments);
  }
  // A segment naming a missing step makes no claim.
  EXPECT_EQ(lowerBound(p, {}, {{SerialSegment{0, 9, 1, 2, 1}}}).serialSegments, 0);
}

// Segments whose tails differ: the group's bound is the one-machine bound with heads and tails
// (Jackson's preemptive schedule), above the least head + all lengths + the least tail, and still
// no schedule of any order of the segments beats it.
TEST(LowerBound, SerialSegmentsKeepEachTail) {
  topology::ChipSpec chip;
  Problem p(chip);
  for (int i = 0; i < 4; ++i) p.addTask(chainTask(chip, 10 + i, 20 + i, 20, std::string("t").append(std::to_string(i))));
  p.addTask(chainTask(chip, 14, 24, 400, "long"));
  p.addDataDependence(0, 2, 1, 0);
  p.addDataDependence(2, 2, 3, 0);
  p.finalize();
  ASSERT_TRUE(p.check().ok());
  // a, b: two chained tasks each, ending at their writes; c: the long task's read, 400 rows still
  // to stream after it.
  const std::vector<SerialSegment> group{{0, 0, 1, 2, 3}, {2, 0, 3, 2, 3}, {4, 0, 4, 0, 3}};
  const LowerBound bound = lowerBound(p, {}, {group});
  const Cycle lengthA = p.completionOffset(0, 2) + p.tasks()[1].steps[2].offset;
  const Cycle lengthB = p.completionOffset(2, 2) + p.tasks()[3].steps[2].offset;
  const Cycle leastTail = std::min(p.span(1) - p.tasks()[1].steps[2].offset, p.span(3) - p.tasks()[3].steps[2].offset);
  // The least head (0), every length and gap but the widest, and the least tail (a's or b's).
  const Cycle oneWindow = lengthA + lengthB + 3 + 3 + leastTail + chip.rippleCycles;
  EXPECT_GT(bound.serialSegments, oneWindow);
  // The long task's whole span comes after its read: c's own tail alone bounds the program.
  EXPECT_GE(bound.serialSegments, p.span(4) + chip.rippleCycles);
  std::vector<int> order{0, 1, 2};
  do {
    Problem ordered = p;
    for (size_t k = 0; k + 1 < order.size(); ++k) {
      const SerialSegment& first = group[order[k]];
      const SerialSegment& second = group[order[k + 1]];
      ordered.addDependence({first.last, first.lastStep, second.first, second.firstStep, first.gap});
    }
    ordered.finalize();
    ASSERT_TRUE(ordered.check().ok());
    EXPECT_GE(scheduleList(ordered, {})->makespan, bound.serialSegments) << order[0] << order[1] << order[2];
  } while (std::next_permutation(order.begin(), order.end()));
}

}  // namespace
}  // namespace tsp::schedule
