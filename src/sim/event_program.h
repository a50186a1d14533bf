// A program as the chip's event loop reads it: decoded once per (program, chip spec) and shared by every chip running it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compile/isa/program.h"
#include "sim/chip.h"
#include "topology/chip_spec.h"

namespace tsp::sim {

/// One instruction in the form the event loop needs: its timing fields, what the chip spec derives
/// from them, its unit's place, and whether a check that needs no chip state fails.
struct Event {
  Event() = default;
  /// The instruction's own fields; what the chip spec derives from them keeps its default.
  explicit Event(const isa::Instruction& inst)
      : issue(inst.issue), unit(inst.unit), src(inst.src), src2(inst.src2), dst(inst.dst), address(inst.address),
        bank(inst.bank), stride(inst.stride), port(inst.port), repeat(inst.repeat), interval(inst.interval),
        weightUnit(inst.weightUnit), weightRows(inst.weightRows), op(inst.op) {}

  Cycle issue = 0;          ///< absolute (a piece's offset added)
  Cycle span = 0;           ///< (repeat - 1) * interval: from the first iteration's issue to the last's
  Cycle busy = 0;           ///< busy cycles of its unit: busyPerIssue * repeat
  Cycle busyPerIssue = 1;   ///< isa::busyPerIssue
  Cycle resultLatency = 0;  ///< isa::resultLatency
  std::int32_t unit = 0;
  // From src to weightRows in isa::Instruction's order, so that decoding copies them as one block.
  isa::StreamRef src, src2, dst;
  std::int32_t address = -1, bank = -1, stride = 0, port = -1, repeat = 1, interval = 1;
  std::int32_t weightUnit = -1, weightRows = 0;
  std::int16_t slice = 0, indexInKind = 0;  ///< of its unit
  isa::Opcode op = isa::Opcode::kNop;
  topology::UnitKind kind = topology::UnitKind::kMem;  ///< of its unit
  std::uint8_t checks = 0;  ///< kMalformed | kBankField

  /// isa::unitFreeAt: the cycle after the last iteration's busy cycles.
  Cycle unitFreeAt() const { return issue + span + busyPerIssue; }
  /// isa::completion: the last iteration's result is ready.
  Cycle completion() const { return issue + span + resultLatency; }
};

/// Event::checks: the instruction is malformed whatever the chip's state (unit, repeat, opcode or stream).
inline constexpr std::uint8_t kMalformed = 1;
/// Event::checks: a MEM access whose bank field disagrees with the chip's bank mapping.
inline constexpr std::uint8_t kBankField = 2;

/// What is wrong with an instruction whatever the chip's state, in the simulator's order of checks,
/// or nothing. A unit that does not exist is reported by the chip (its own message).
std::optional<std::string> malformation(const isa::Instruction& inst, const topology::ChipSpec& spec,
                                        const std::vector<topology::UnitInfo>& units);

/// What the chips running one program with one utilisation timeline share: how far the checks that
/// depend on the program alone passed, and the statistics they give (docs/architecture.md, "Chips
/// that share a program"). In timing mode without faults, an instruction's unit, stream, MEM port and
/// MXM checks and its statistics depend on the program only; its C2C part (ports, links, bursts
/// sent and received) depends on the chip's links and on what arrives. The first chip that runs the
/// program (the leader) runs every check and records how far they passed; another chip (a follower)
/// runs only the C2C part of the instructions the leader has passed, and takes the rest from here.
struct SharedChecks {
  int bins = 0;
  Cycle binCycles = 0;
  bool leading = false;              ///< a leader is running
  std::atomic<size_t> passed{0};     ///< the program-only checks of events [0, passed) pass
  std::atomic<bool> complete{false};  ///< a leader finished: `stats` and the counts below hold its statistics
  ChipStats stats;                    ///< the leader's (its C2C figures are its own)
  std::int64_t vxmVectors = 0, mxmVectors = 0, sxmVectors = 0, installs = 0;
};

/// The events of one program for one chip spec, in program order. A program without pieces is decoded
/// whole when it is made. The pieces' bodies are decoded a chunk of kChunkEvents at a time, when a
/// cursor enters the chunk, and kept while a cursor (any program's) is in it: a chip holds the decoding
/// of the chunk it is in, not of its whole program (a collective's thousands of programs are mostly
/// bodies of their own).
class EventProgram {
  struct Body;

 public:
  /// The decoded form of `program` for `spec`: decoded once per program object and spec object, kept
  /// while the program lives and shared by every chip that runs it.
  static std::shared_ptr<const EventProgram> of(const std::shared_ptr<const isa::Program>& program,
                                                const topology::ChipSpec& spec);
  /// Decodes `program` for `spec`, which must both outlive the result. A piece's body is decoded once
  /// for every cursor of every program that is in it at once (the programs of a collective share a
  /// few bodies among thousands of chips).
  EventProgram(const isa::Program& program, const topology::ChipSpec& spec);
  ~EventProgram();
  /// Events in a chunk of a piece's body decoded at once.
  static constexpr size_t kChunkEvents = 256;

  /// A place in program order, read without a search; it holds the decoding of its chunk. A segment
  /// is a program without pieces, or a chunk of a piece.
  struct Cursor {
    size_t segment = 0, at = 0;
    size_t count = 0;  // events in the segment
    Cycle offset = 0;  // the segment's offset
    const Event* events = nullptr;  // the segment's events
    const std::vector<std::uint32_t>* c2c = nullptr;  // places of the segment's C2C events, ascending
    const std::int32_t* origins = nullptr;  // per event of a piece's segment, its origin id in the body; null: none
    std::shared_ptr<const Body> hold;  // the segment's decoding, when the program does not hold it
  };

  /// Number of events.
  size_t size() const { return size_; }
  /// Event `index` (a search over the pieces, and a decoding of that one instruction when its piece is
  /// decoded on entry; use a Cursor in order).
  Event at(size_t index) const;
  /// Instruction `index` as the program has it, its issue absolute. `hint` is the caller's segment of
  /// its last look-up (start at 0): in order, a look-up costs no search.
  isa::Instruction instruction(size_t index, size_t& hint) const;
  /// Instruction `index`'s entry in the program's origins (Program::origins), or -1; `hint` as above.
  std::int32_t originOf(size_t index, size_t& hint) const;
  /// originOf the event at the cursor, without a search (its piece's origins decoded with its events).
  std::int32_t originAt(const Cursor& c) const {
    const Segment& s = segments_[c.segment];
    if (!s.piece) return c.at < program_->originOf.size() ? program_->originOf[c.at] : -1;
    if (!s.originMap || !c.origins) return -1;
    const std::int32_t local = c.origins[c.at];
    return local >= 0 && static_cast<size_t>(local) < s.originMap->size() ? (*s.originMap)[local] : -1;
  }
  /// The event at the cursor, which must be before the end.
  Event at(const Cursor& c) const {
    Event e = body(c);
    e.issue += c.offset;
    return e;
  }
  /// The event at the cursor as its piece's body has it: its issue is offset(c) cycles early.
  const Event& body(const Cursor& c) const { return c.events[c.at]; }
  /// The offset of the piece of the event at the cursor.
  Cycle offset(const Cursor& c) const { return c.offset; }
  /// Moves the cursor to the next event.
  void step(Cursor& c) const {
    if (++c.at < c.count) return;
    c.at = 0;
    while (++c.segment < segments_.size() && segments_[c.segment].count == 0) {
    }
    enter(c);
  }
  /// A cursor at the first event.
  Cursor begin() const;
  /// The place of the first C2C event at or after a cursor in its segment (the segment's count if
  /// none), kept by the caller between calls of plainBefore.
  struct C2cMark {
    size_t segment = static_cast<size_t>(-1), at = 0;
  };
  /// How many events from the cursor on, at most `limit`, are not C2C and issue before `end`: the
  /// events a follower may pass over at once (the program must be canonical). Costs the log of the
  /// count (a galloping search), plus a search of the segment's C2C events when `mark` is not of the cursor.
  size_t plainBefore(const Cursor& c, Cycle end, size_t limit, C2cMark& mark) const {
    if (mark.segment != c.segment || mark.at < c.at) {
      const auto next = std::lower_bound(c.c2c->begin(), c.c2c->end(), static_cast<std::uint32_t>(c.at));
      mark = {c.segment, next == c.c2c->end() ? c.count : *next};
    }
    const size_t stop = std::min({c.count, c.at + limit, mark.at});
    const Cycle before = end - c.offset;  // issues ascend in a canonical program
    const Event* events = c.events;
    if (c.at >= stop || events[c.at].issue >= before) return 0;
    size_t good = c.at, step = 1;  // events[good] issues before `end`
    while (good + step < stop && events[good + step].issue < before) {
      good += step;
      step *= 2;
    }
    size_t bad = std::min(good + step, stop);  // the first at or after `end` is in (good, bad]
    while (bad - good > 1) {
      const size_t mid = good + (bad - good) / 2;
      (events[mid].issue < before ? good : bad) = mid;
    }
    return bad - c.at;
  }
  /// Moves the cursor `n` events on, within its segment (n <= the events left in the segment).
  void skip(Cursor& c, size_t n) const {
    c.at += n - 1;
    step(c);
  }
  /// True when the events are in (issue, unit) order, the order they run in.
  bool canonical() const { return canonical_; }
  /// ChipSpec::bankOf of each address of a slice (empty when the spec has more than 256 banks).
  const std::vector<std::uint8_t>& banks() const;
  /// The chip spec's unit table (ChipSpec::units()).
  const std::vector<topology::UnitInfo>& units() const;
  /// Per entry of the program's origins: burstTensor of its tensor's name (0: no tensor named).
  const std::vector<std::uint64_t>& originTensors() const { return originTensors_; }
  /// Per entry of the program's origins: the id (0 .. readTensors() - 1) of the input instance its MEM
  /// reads read (OpOrigin::input, inputProducer, instance), -1: none; empty when no origin names one.
  const std::vector<std::int32_t>& originReads() const { return originReads_; }
  /// Per entry of the program's origins: the id of the instance its MEM writes write (tensor, op,
  /// instance) when some origin reads it, -1: none; empty when no origin names an input.
  const std::vector<std::int32_t>& originWrites() const { return originWrites_; }
  /// Number of distinct tensor instances the origins read.
  size_t readTensors() const { return readTensors_; }
  /// The checks shared by the chips that run this program with this utilisation timeline (made on first use).
  std::shared_ptr<SharedChecks> sharedChecks(int bins, Cycle binCycles) const;

 private:
  struct SpecTables;
  struct Segment {
    const Body* decoded = nullptr;  // held by the program (one without pieces); null: decoded on entry
    const isa::ProgramPiece* piece = nullptr;  // the piece, when decoded on entry
    size_t start = 0;  // the chunk's first place in the piece's body
    size_t count = 0;
    Cycle offset = 0;
    size_t first = 0;  // program index of its first event
    const std::vector<std::int32_t>* originMap = nullptr;  // the piece's (ProgramPiece::originMap)
  };
  // One instruction list decoded: its events and the places of its C2C events, ascending.
  struct Body {
    std::vector<Event> events;
    std::vector<std::uint32_t> c2c;
    std::vector<std::int32_t> origins;  // a piece's: each event's origin id in the body (-1: none); empty: none known
  };
  // The decoded form of `count` instructions of a shared body from `start` for `spec`: decoded once
  // while a cursor holds it.
  std::shared_ptr<const Body> bodyOf(const std::shared_ptr<const isa::InstructionBody>& body, size_t start,
                                     size_t count) const;
  std::shared_ptr<Body> decodeBody(const isa::Instruction* list, size_t count) const;
  // The segment holding event `index`: `hint`, the one after it, or one found by a search (hint set to it).
  const Segment& segmentOf(size_t index, size_t& hint) const;
  // Points the cursor at its segment's events (decoding its piece if no one holds it), or at nothing past the end.
  void enter(Cursor& c) const;

  const isa::Program* program_;
  const topology::ChipSpec* spec_;
  std::shared_ptr<const SpecTables> tables_;  // what the spec says of units, opcodes and banks: one per spec
  std::vector<std::uint64_t> originTensors_;  // per entry of the program's origins
  std::vector<std::int32_t> originReads_, originWrites_;  // per entry of the program's origins, or empty
  size_t readTensors_ = 0;
  std::shared_ptr<const Body> whole_;  // a program without pieces, decoded
  std::vector<Segment> segments_;
  size_t size_ = 0;
  bool canonical_ = true;
  mutable std::mutex sharedMutex_;
  mutable std::vector<std::shared_ptr<SharedChecks>> shared_;  // one per timeline (bins, bin width)
};

}  // namespace tsp::sim
