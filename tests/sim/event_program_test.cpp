// Tests of the decoded program: the events agree with the instructions and the chip spec, pieces read
// in program order, static checks flagged, one decoding per program shared by its chips.
#include "sim/event_program.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "sim/chip.h"

namespace tsp::sim {
namespace {

using isa::Instruction;
using isa::Opcode;
using topology::UnitKind;

Instruction inst(const topology::ChipSpec& spec, UnitKind kind, int index, Cycle issue, Opcode op, int repeat = 1,
                 int interval = 1) {
  Instruction i;
  i.unit = spec.firstUnit(kind) + index;
  i.issue = issue;
  i.op = op;
  i.repeat = repeat;
  i.interval = interval;
  return i;
}

TEST(EventProgramTest, EventsCarryTheSpecTimingAndTheUnitPlace) {
  topology::ChipSpec spec;
  isa::Program p;
  Instruction read = inst(spec, UnitKind::kMem, 3, 10, Opcode::kMemRead, 4, 2);
  read.address = 7;
  read.stride = 1;
  read.dst = {2, isa::Direction::kEast};
  p.instructions = {read, inst(spec, UnitKind::kMxm, 1, 20, Opcode::kMxmInstall), inst(spec, UnitKind::kVxm, 0, 30, Opcode::kNop, 3, 5)};
  const EventProgram events(p, spec);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_TRUE(events.canonical());
  const auto units = spec.units();
  for (size_t i = 0; i < 3; ++i) {
    const Event e = events.at(i);
    const Instruction& in = p.instructions[i];
    EXPECT_EQ(e.issue, in.issue);
    EXPECT_EQ(e.unitFreeAt(), isa::unitFreeAt(spec, in)) << i;
    EXPECT_EQ(e.completion(), isa::completion(spec, in)) << i;
    EXPECT_EQ(e.busy, isa::busyPerIssue(spec, in) * in.repeat) << i;
    EXPECT_EQ(e.resultLatency, isa::resultLatency(spec, in)) << i;
    EXPECT_EQ(e.slice, units[in.unit].slice);
    EXPECT_EQ(e.indexInKind, units[in.unit].indexInKind);
    EXPECT_EQ(e.kind, units[in.unit].kind);
    EXPECT_EQ(e.checks, 0) << i;
  }
}

TEST(EventProgramTest, PiecesReadInProgramOrderWithTheirOffsets) {
  topology::ChipSpec spec;
  isa::Program p;
  auto body = isa::makeBody({inst(spec, UnitKind::kVxm, 0, 0, Opcode::kNop), inst(spec, UnitKind::kVxm, 1, 2, Opcode::kNop)});
  auto empty = isa::makeBody({});
  p.pieces = {{body, 0, {}}, {empty, 5, {}}, {body, 10, {}}, {body, 20, {}}};
  const EventProgram events(p, spec);
  const isa::InstructionSequence sequence(p);
  ASSERT_EQ(events.size(), sequence.size());
  EventProgram::Cursor c = events.begin();
  for (size_t i = 0; i < sequence.size(); ++i) {
    EXPECT_EQ(events.at(i).issue, sequence[i].issue) << i;
    EXPECT_EQ(events.at(c).issue, sequence[i].issue) << i;
    EXPECT_EQ(events.at(c).unit, sequence[i].unit) << i;
    events.step(c);
  }
  EXPECT_TRUE(events.canonical());
  p.pieces = {{body, 10, {}}, {body, 0, {}}};  // the second piece issues before the first: not in order
  EXPECT_FALSE(EventProgram(p, spec).canonical());
}

// What a follower passes over at once: the events of a piece before its next C2C event, before a
// cycle, and within a limit.
TEST(EventProgramTest, PlainEventsStopAtC2cAtTheEndCycleAndAtTheLimit) {
  topology::ChipSpec spec;
  isa::Program p;
  auto body = isa::makeBody({inst(spec, UnitKind::kVxm, 0, 0, Opcode::kNop), inst(spec, UnitKind::kVxm, 1, 2, Opcode::kNop),
                             inst(spec, UnitKind::kC2c, 0, 3, Opcode::kC2cSend), inst(spec, UnitKind::kVxm, 0, 4, Opcode::kNop)});
  p.pieces = {{body, 0, {}}, {body, 10, {}}};
  const EventProgram events(p, spec);
  EventProgram::Cursor c = events.begin();
  EventProgram::C2cMark mark;
  EXPECT_EQ(events.plainBefore(c, kNever, 100, mark), 2u);  // stops at the send
  EXPECT_EQ(events.plainBefore(c, 2, 100, mark), 1u);       // the second issues at cycle 2
  EXPECT_EQ(events.plainBefore(c, 0, 100, mark), 0u);
  EXPECT_EQ(events.plainBefore(c, kNever, 1, mark), 1u);
  events.skip(c, 2);
  EXPECT_EQ(events.at(c).op, Opcode::kC2cSend);
  EXPECT_EQ(events.plainBefore(c, kNever, 100, mark), 0u);
  events.step(c);
  EXPECT_EQ(events.plainBefore(c, kNever, 100, mark), 1u);  // the rest of the piece
  events.skip(c, 1);                                   // into the next piece
  EXPECT_EQ(c.segment, 1u);
  EXPECT_EQ(events.at(c).issue, 10);
  EXPECT_EQ(events.plainBefore(c, 13, 100, mark), 2u);  // the piece's offset counts
  EXPECT_EQ(events.plainBefore(c, 12, 100, mark), 1u);
  // A long piece: the count before every cycle, from every place.
  std::vector<Instruction> many;
  for (int i = 0; i < 100; ++i) many.push_back(inst(spec, UnitKind::kVxm, i % 4, 3 * i, Opcode::kNop));
  isa::Program q;
  q.instructions = many;
  const EventProgram long_(q, spec);
  for (size_t from = 0; from < 100; from += 7)
    for (Cycle end = 0; end < 310; ++end) {
      EventProgram::Cursor at = long_.begin();
      if (from > 0) long_.skip(at, from);
      EventProgram::C2cMark m;
      const size_t before = static_cast<size_t>(std::clamp<Cycle>((end + 2) / 3, 0, 100));
      EXPECT_EQ(long_.plainBefore(at, end, 1000, m), before > from ? before - from : 0) << from << " " << end;
      EXPECT_EQ(long_.plainBefore(at, end, 5, m), std::min<size_t>(5, before > from ? before - from : 0));
    }
}

TEST(EventProgramTest, StaticProblemsAreFlaggedAndNamedByMalformation) {
  topology::ChipSpec spec;
  const auto units = spec.units();
  isa::Program p;
  Instruction badRepeat = inst(spec, UnitKind::kVxm, 0, 0, Opcode::kNop, 0);
  Instruction wrongUnit = inst(spec, UnitKind::kVxm, 0, 1, Opcode::kMemRead);
  Instruction badStream = inst(spec, UnitKind::kVxm, 0, 2, Opcode::kVxmUnary);
  badStream.dst = {static_cast<std::int16_t>(spec.streamsPerDirection), isa::Direction::kWest};
  Instruction noUnit = inst(spec, UnitKind::kVxm, 0, 3, Opcode::kNop);
  noUnit.unit = static_cast<int>(units.size());
  Instruction badBank = inst(spec, UnitKind::kMem, 0, 4, Opcode::kMemRead);
  badBank.address = 0;
  badBank.bank = spec.bankOf(0) + 1;
  p.instructions = {badRepeat, wrongUnit, badStream, noUnit, badBank};
  const EventProgram events(p, spec);
  EXPECT_EQ(events.at(0).checks, kMalformed);
  EXPECT_EQ(*malformation(badRepeat, spec, units), "repeat and interval must be >= 1");
  EXPECT_EQ(events.at(1).checks, kMalformed);
  EXPECT_EQ(*malformation(wrongUnit, spec, units), "opcode cannot run on this kind of unit");
  EXPECT_EQ(events.at(2).checks, kMalformed);
  EXPECT_NE(malformation(badStream, spec, units)->find("does not exist"), std::string::npos);
  EXPECT_EQ(events.at(3).checks, kMalformed);
  EXPECT_EQ(events.at(4).checks, kBankField);
}

TEST(EventProgramTest, OneDecodingPerProgramSharedByItsChips) {
  topology::ChipSpec spec;
  auto program = std::make_shared<isa::Program>();
  program->instructions = {inst(spec, UnitKind::kVxm, 0, 0, Opcode::kNop)};
  const auto first = EventProgram::of(program, spec);
  EXPECT_EQ(EventProgram::of(program, spec), first);
  // Another program with the same content is another program: decoded on its own.
  auto copy = std::make_shared<isa::Program>(*program);
  EXPECT_NE(EventProgram::of(copy, spec), first);
  // A program that died is decoded again if a new one takes its address.
  std::weak_ptr<const EventProgram> old = first;
  const isa::Program* address = program.get();
  program.reset();
  auto next = std::make_shared<isa::Program>();
  next->instructions = {inst(spec, UnitKind::kVxm, 0, 0, Opcode::kNop), inst(spec, UnitKind::kVxm, 1, 1, Opcode::kNop)};
  const auto decoded = EventProgram::of(next, spec);
  EXPECT_EQ(decoded->size(), 2u);
  if (next.get() == address) {
    EXPECT_NE(decoded.get(), old.lock().get());
  }
}

TEST(EventProgramTest, ProgramsPlacingOneBodyShareItsDecoding) {
  topology::ChipSpec spec;
  auto body = isa::makeBody({inst(spec, UnitKind::kVxm, 0, 0, Opcode::kNop), inst(spec, UnitKind::kVxm, 1, 2, Opcode::kNop)});
  auto other = isa::makeBody({inst(spec, UnitKind::kVxm, 0, 0, Opcode::kNop), inst(spec, UnitKind::kVxm, 1, 2, Opcode::kNop)});
  auto a = std::make_shared<isa::Program>(), b = std::make_shared<isa::Program>(), c = std::make_shared<isa::Program>();
  a->pieces = {{body, 0, {}}, {body, 10, {}}};
  b->pieces = {{body, 7, {}}};
  c->pieces = {{other, 7, {}}};
  const auto da = EventProgram::of(a, spec), db = EventProgram::of(b, spec), dc = EventProgram::of(c, spec);
  // One body's events, wherever it is placed, are one decoding while cursors are in it; an equal body
  // of its own is another.
  const EventProgram::Cursor ca = da->begin(), cb = db->begin(), cc = dc->begin();
  EXPECT_EQ(&da->body(ca), &db->body(cb));
  EXPECT_NE(&db->body(cb), &dc->body(cc));
  // Each program still reads the body at its own offsets.
  EXPECT_EQ(da->at(2).issue, 10);
  EXPECT_EQ(db->at(1).issue, 9);
  EXPECT_EQ(dc->at(0).issue, 7);
}

TEST(EventProgramTest, APieceIsDecodedWhileACursorIsInIt) {
  topology::ChipSpec spec;
  auto first = isa::makeBody({inst(spec, UnitKind::kVxm, 0, 0, Opcode::kNop), inst(spec, UnitKind::kVxm, 1, 2, Opcode::kNop)});
  auto second = isa::makeBody({inst(spec, UnitKind::kVxm, 2, 1, Opcode::kNop)});
  isa::Program p;
  p.pieces = {{first, 0, {}}, {second, 5, {}}};
  const EventProgram events(p, spec);
  EventProgram::Cursor c = events.begin();
  const std::weak_ptr<const void> held = c.hold;
  ASSERT_FALSE(held.expired());
  events.step(c);
  EXPECT_EQ(events.at(c).issue, 2);
  events.step(c);  // into the second piece: the first one's decoding is let go
  EXPECT_TRUE(held.expired());
  EXPECT_EQ(events.at(c).issue, 6);
  EXPECT_EQ(events.at(c).unit, p.pieces[1].body->instructions[0].unit);
  events.step(c);
  EXPECT_EQ(c.hold, nullptr);  // past the end
  // Read by index, an event of a piece no cursor is in is decoded on its own.
  EXPECT_EQ(events.at(1).issue, 2);
  EXPECT_EQ(events.at(2).issue, 6);
  // Two cursors in one piece share its decoding.
  const EventProgram::Cursor a = events.begin(), b = events.begin();
  EXPECT_EQ(&events.body(a), &events.body(b));
}

TEST(EventProgramTest, ALongPieceIsReadAChunkAtATime) {
  topology::ChipSpec spec;
  std::vector<Instruction> list;
  const size_t n = 2 * EventProgram::kChunkEvents + 40;
  for (size_t i = 0; i < n; ++i)
    list.push_back(inst(spec, UnitKind::kVxm, static_cast<int>(i % 4), static_cast<Cycle>(i), Opcode::kNop));
  isa::Program p;
  p.pieces = {{isa::makeBody(list), 3, {}}};
  const EventProgram events(p, spec);
  ASSERT_EQ(events.size(), n);
  EventProgram::Cursor c = events.begin();
  std::weak_ptr<const void> chunk = c.hold;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(events.at(c).issue, list[i].issue + 3) << i;
    EXPECT_EQ(events.at(c).unit, list[i].unit) << i;
    EXPECT_EQ(events.at(i).issue, list[i].issue + 3) << i;
    if (i % EventProgram::kChunkEvents == 0) {
      // A new chunk: the one before is let go (no other cursor is in it).
      EXPECT_EQ(c.at, 0u) << i;
      if (i > 0) {
        EXPECT_TRUE(chunk.expired()) << i;
      }
      chunk = c.hold;
    }
    // A follower's skip stops at the chunk's end.
    EventProgram::C2cMark mark;
    EXPECT_EQ(events.plainBefore(c, kNever, n, mark), c.count - c.at) << i;
    events.step(c);
  }
  EXPECT_EQ(c.segment, 3u);
}

TEST(EventProgramTest, InstructionsAndOriginsByIndexAreTheProgramsOwn) {
  topology::ChipSpec spec;
  std::vector<Instruction> list;
  std::vector<std::int32_t> origins;
  const size_t n = EventProgram::kChunkEvents + 10;
  for (size_t i = 0; i < n; ++i) {
    list.push_back(inst(spec, UnitKind::kVxm, static_cast<int>(i % 4), static_cast<Cycle>(i), Opcode::kNop));
    origins.push_back(static_cast<std::int32_t>(i % 3) - 1);  // -1 (none), 0, 1
  }
  const auto body = isa::makeBody(list, origins);
  isa::Program p;
  p.origins = {{"a", "Add", 0, "x", "", ""}, {"b", "Mul", 0, "y", "", ""}, {"c", "Sub", 0, "z", "", ""}};
  p.pieces = {{body, 0, std::make_shared<const std::vector<std::int32_t>>(std::vector<std::int32_t>{2, 0})},
              {isa::makeBody({}), 5, {}},
              {body, 1000, nullptr}};
  const EventProgram events(p, spec);
  const isa::InstructionSequence sequence(p);
  ASSERT_EQ(events.size(), sequence.size());
  size_t hint = 0;
  for (size_t i = 0; i < sequence.size(); ++i) {
    EXPECT_EQ(events.instruction(i, hint), sequence[i]) << i;
    EXPECT_EQ(events.originOf(i, hint), sequence.originOf(i)) << i;
  }
  size_t i = 0;
  for (EventProgram::Cursor c = events.begin(); i < events.size(); events.step(c), ++i)
    EXPECT_EQ(events.originAt(c), sequence.originOf(i)) << i;
  // Out of order, and with a hint of another segment.
  for (size_t k = sequence.size(); k-- > 0;) {
    EXPECT_EQ(events.instruction(k, hint), sequence[k]) << k;
    EXPECT_EQ(events.originOf(k, hint), sequence.originOf(k)) << k;
  }
  EXPECT_EQ(events.originOf(1, hint), 2);
  EXPECT_EQ(events.originOf(n + 1, hint), -1);  // the second placement has no origin map
  isa::Program flat = isa::expanded(p);
  const EventProgram whole(flat, spec);
  hint = 0;
  EventProgram::Cursor c = whole.begin();
  for (size_t k = 0; k < sequence.size(); ++k, whole.step(c)) {
    EXPECT_EQ(whole.instruction(k, hint), sequence[k]) << k;
    EXPECT_EQ(whole.originOf(k, hint), sequence.originOf(k)) << k;
    EXPECT_EQ(whole.originAt(c), sequence.originOf(k)) << k;
  }
}

TEST(EventProgramTest, DecodingsOfDeadProgramsAreReleased) {
  topology::ChipSpec spec;
  auto body = isa::makeBody({inst(spec, UnitKind::kVxm, 0, 0, Opcode::kNop)});
  std::vector<std::weak_ptr<const EventProgram>> decoded;
  for (int i = 0; i < 200; ++i) {
    auto p = std::make_shared<isa::Program>();
    p->pieces = {{body, i, {}}};
    const auto events = EventProgram::of(p, spec);
    ASSERT_EQ(events->at(0).issue, i);
    decoded.push_back(events);
  }
  // Every program died; the cache keeps at most a bounded share of their decodings (a sweep whenever
  // it doubles), not all of them.
  const auto alive = std::count_if(decoded.begin(), decoded.end(), [](const auto& d) { return !d.expired(); });
  EXPECT_LT(alive, 100);
}

}  // namespace
}  // namespace tsp::sim
