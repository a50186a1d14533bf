#include <tuple>

#include <gtest/gtest.h>

#include "compile/schedule/sharded_schedule_internal.h"

namespace tsp::schedule::detail {
namespace {

// A program of MEM reads on slice 0 (unit 0): one per (issue, address), 100 vectors each.
isa::Program reads(std::initializer_list<std::pair<Cycle, int>> at) {
  isa::Program program;
  for (const auto& [issue, address] : at) {
    isa::Instruction inst;
    inst.unit = 0;
    inst.op = isa::Opcode::kMemRead;
    inst.issue = issue;
    inst.address = address;
    inst.stride = 1;
    inst.repeat = 100;
    program.instructions.push_back(inst);
  }
  program.predictedCycles = program.instructions.back().issue + 200;
  return program;
}

// A chip's next program may use a MEM slice in the gaps of the previous one's reads at other
// addresses, not at the addresses the previous one still reads.
TEST(ChipTimelines, ConsecutiveProgramsShareAMemSliceOrderedPerAddressBlock) {
  topology::ChipSpec chip;
  ChipTimelines timelines(chip, 1);
  timelines.append(0, reads({{0, 0}, {5000, 0}}), 0);  // holds addresses 0-99 until about 5,100
  const Cycle firstGapEnd = 100 + isa::busyPerIssue(chip, reads({{0, 0}}).instructions.front());

  const Cycle elsewhere = timelines.earliestStart(0, timelines.footprint(reads({{0, 4096}}).instructions));
  EXPECT_GE(elsewhere, 99);  // not while the slice reads addresses 0-99
  EXPECT_LE(elsewhere, firstGapEnd);

  const Cycle same = timelines.earliestStart(0, timelines.footprint(reads({{0, 50}}).instructions));
  EXPECT_GE(same, isa::unitFreeAt(chip, reads({{5000, 0}}).instructions.front()));  // after the last read of 0-99

  // The slice still counts as busy until its last read for the compile's release times.
  bool released = false;
  for (const auto& [unit, at] : timelines.releases(0, 0))
    if (unit == 0) released = at >= 5000;
  EXPECT_TRUE(released);
}

// A program's copy follows it once the addresses it reads first are free again: a program that
// holds addresses 0-99 from its first read to its last repeats at that span, not at its busy cycles.
TEST(ChipTimelines, FollowsAtIsTheSpanOfTheResourceHeldLongest) {
  topology::ChipSpec chip;
  const isa::Program spread = reads({{0, 0}, {5000, 0}});
  const Cycle held = isa::unitFreeAt(chip, spread.instructions.back());
  EXPECT_EQ(ChipTimelines::followsAt(chip, spread), held);
  const isa::Program apart = reads({{0, 0}, {5000, 4096}});  // two address blocks, each held for one read
  EXPECT_LT(ChipTimelines::followsAt(chip, apart), held);
  EXPECT_GE(ChipTimelines::followsAt(chip, apart), isa::unitFreeAt(chip, apart.instructions.front()) - 1);
}

// Renaming a footprint's stream registers gives the footprint of the renamed instructions.
TEST(ChipTimelines, RenamedFootprintIsTheFootprintOfTheRenamedProgram) {
  topology::ChipSpec chip;
  ChipTimelines timelines(chip, 1);
  isa::Program program = reads({{0, 0}, {300, 200}, {600, 400}, {900, 600}});
  for (size_t i = 0; i < program.instructions.size(); ++i)
    program.instructions[i].dst = {static_cast<std::int16_t>(i % 3),
                                   i % 2 ? isa::Direction::kEast : isa::Direction::kWest};
  const int n = chip.streamsPerDirection;
  std::vector<std::int16_t> map(2 * static_cast<size_t>(n));
  for (int dir = 0; dir < 2; ++dir)
    for (int id = 0; id < n; ++id) map[dir * n + id] = static_cast<std::int16_t>((id + 2 + dir) % n);
  const auto expected = timelines.footprint(timelines.renamed(program.instructions, map));
  const auto renamed = timelines.renamedFootprint(timelines.footprint(program.instructions), map);
  const auto spans = [](const std::vector<ChipTimelines::Footprint::Span>& list) {
    std::vector<std::tuple<int, Cycle, Cycle>> out;
    for (const auto& s : list) out.emplace_back(s.resource, s.first, s.end);
    return out;
  };
  EXPECT_EQ(spans(renamed.ordered), spans(expected.ordered));
  EXPECT_EQ(spans(renamed.slices), spans(expected.slices));
  EXPECT_EQ(renamed.shared, expected.shared);
  EXPECT_NE(timelines.footprint(program.instructions).shared, expected.shared);  // the renaming moved something
}

}  // namespace
}  // namespace tsp::schedule::detail
