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

// An ordered resource a program uses several times is held once, from its first use to its last end,
// in resource order: address block 0 (read at 0 and 600) and block 32 (read at 300) of slice 0.
TEST(ChipTimelines, FootprintHoldsEachOrderedResourceFromItsFirstUseToItsLastEnd) {
  topology::ChipSpec chip;
  ChipTimelines timelines(chip, 1);
  const isa::Program program = reads({{0, 0}, {300, 4096}, {600, 0}});
  const auto f = timelines.footprint(program.instructions);
  const Cycle end300 = isa::unitFreeAt(chip, program.instructions[1]);
  const Cycle end600 = isa::unitFreeAt(chip, program.instructions[2]);
  ASSERT_EQ(f.ordered.size(), 2u);
  EXPECT_LT(f.ordered[0].resource, f.ordered[1].resource);
  EXPECT_EQ(std::tuple(f.ordered[0].first, f.ordered[0].end), std::tuple(Cycle{0}, end600));
  EXPECT_EQ(std::tuple(f.ordered[1].first, f.ordered[1].end), std::tuple(Cycle{300}, end300));
  ASSERT_EQ(f.slices.size(), 1u);
  EXPECT_EQ(std::tuple(f.slices[0].resource, f.slices[0].first, f.slices[0].end), std::tuple(0, Cycle{0}, end600));
}

// Appending with a known drain and footprint leaves the chip as appending computes them does.
TEST(ChipTimelines, AppendWithKnownFootprintIsAppend) {
  topology::ChipSpec chip;
  ChipTimelines computed(chip, 1), known(chip, 1);
  const isa::Program first = reads({{0, 0}, {5000, 4096}}), second = reads({{0, 0}, {100, 256}});
  for (const auto& [program, offset] : {std::pair(&first, Cycle{0}), std::pair(&second, Cycle{700})}) {
    computed.append(0, *program, offset);
    known.append(0, *program, offset, known.streamDrain(program->instructions), known.footprint(program->instructions));
  }
  EXPECT_EQ(known.freeAt(0), computed.freeAt(0));
  EXPECT_EQ(known.firstFreeAt(0), computed.firstFreeAt(0));
  EXPECT_EQ(known.releases(0, 800), computed.releases(0, 800));
  const isa::Program probe = reads({{0, 64}});
  EXPECT_EQ(known.earliestStart(0, known.footprint(probe.instructions)),
            computed.earliestStart(0, computed.footprint(probe.instructions)));
  const auto a = known.finish(), b = computed.finish();
  EXPECT_EQ(a.front().instructions, b.front().instructions);
  EXPECT_EQ(a.front().predictedCycles, b.front().predictedCycles);
}

}  // namespace
}  // namespace tsp::schedule::detail
