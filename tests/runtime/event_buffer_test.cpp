// Tests of the event buffer: row positions fixed before the run, the flush threshold, canonical order.
#include "runtime/event_buffer.h"

#include <gtest/gtest.h>

namespace tsp::runtime {
namespace {

isa::Instruction inst(int unit, Cycle issue, isa::Opcode op, int port = -1) {
  isa::Instruction i;
  i.unit = unit;
  i.issue = issue;
  i.op = op;
  i.port = port;
  return i;
}

std::vector<std::shared_ptr<const isa::Program>> programs(const topology::ChipSpec& spec) {
  const int c2c = spec.firstUnit(topology::UnitKind::kC2c);
  auto a = std::make_shared<isa::Program>();
  a->instructions = {inst(0, 0, isa::Opcode::kMemRead), inst(c2c, 5, isa::Opcode::kC2cSend, 0),
                     inst(c2c, 40, isa::Opcode::kC2cSend, 0)};
  auto b = std::make_shared<isa::Program>();
  b->instructions = {inst(0, 1, isa::Opcode::kMemRead), inst(1, 1, isa::Opcode::kMemRead)};
  return {a, b, a};
}

TEST(EventBuffer, RowsOfEachChipFollowThoseOfLowerChips) {
  topology::ChipSpec spec;
  const auto list = programs(spec);
  EventBuffer buffer(spec, list, attribute(spec, list), {true, true, {}}, 1000);
  ASSERT_TRUE(buffer.check().ok());
  EXPECT_EQ(buffer.c2cRowCount(), 4);           // two sends on chips 0 and 2
  EXPECT_EQ(buffer.instructionRowCount(), 8);   // 3 + 2 + 3
  buffer.instructionExecuted(2, 1, 5, 6);
  buffer.instructionExecuted(1, 0, 1, 2);
  EXPECT_EQ(buffer.buffered(), 2);
  sim::C2CBurst burst;
  burst.srcChip = 2;
  buffer.recordBursts({burst, burst});
  EXPECT_EQ(buffer.buffered(), 4);
  EXPECT_EQ(buffer.peakBuffered(), 4);
}

TEST(EventBuffer, OnlyTheChosenChipsRecordInstructions) {
  topology::ChipSpec spec;
  const auto list = programs(spec);
  EventBuffer buffer(spec, list, attribute(spec, list), {true, true, {1}}, 1000);
  EXPECT_EQ(buffer.instructionRowCount(), 2);
  buffer.instructionExecuted(0, 0, 0, 1);  // chip 0 is not recorded
  EXPECT_EQ(buffer.buffered(), 0);
  buffer.instructionExecuted(1, 1, 1, 2);
  EXPECT_EQ(buffer.buffered(), 1);
}

TEST(EventBuffer, AsksForAFlushAtTheThreshold) {
  topology::ChipSpec spec;
  const auto list = programs(spec);
  EventBuffer buffer(spec, list, attribute(spec, list), {true, false, {}}, 2);
  sim::C2CBurst burst;
  buffer.recordBursts({burst});
  EXPECT_FALSE(buffer.wantsFlush());
  buffer.recordBursts({burst});
  EXPECT_TRUE(buffer.wantsFlush());
}

TEST(EventBuffer, RefusesAProgramOutOfOrder) {
  topology::ChipSpec spec;
  auto p = std::make_shared<isa::Program>();
  p->instructions = {inst(0, 9, isa::Opcode::kMemRead), inst(0, 3, isa::Opcode::kMemRead)};
  const std::vector<std::shared_ptr<const isa::Program>> list{p};
  EventBuffer buffer(spec, list, attribute(spec, list), {true, false, {}}, 10);
  auto s = buffer.check();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().format(), "the program of chip 0 is not in (issue, unit) order; event rows need it");
}

}  // namespace
}  // namespace tsp::runtime
