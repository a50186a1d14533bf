// What the cluster schedulers share (sharded plans, training steps): segment keys for sharing compiled segments, the chips' timelines.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "compile/isa/program.h"
#include "compile/schedule/cluster_schedule.h"
#include "compile/schedule/collectives.h"
#include "compile/schedule/shard_compiler.h"
#include "topology/chip_spec.h"

namespace tsp::schedule::detail {

/// AllReduce, AllGather, ReduceScatter, AllToAll: the ops scheduled as collectives on routes.
inline bool isCollective(ir::OpKind kind) {
  return kind == ir::OpKind::kAllReduce || kind == ir::OpKind::kAllGather || kind == ir::OpKind::kReduceScatter ||
         kind == ir::OpKind::kAllToAll;
}

/// The collective a collective op kind performs.
inline CollectiveOp collectiveOpOf(ir::OpKind kind) {
  switch (kind) {
    case ir::OpKind::kAllGather: return CollectiveOp::kAllGather;
    case ir::OpKind::kReduceScatter: return CollectiveOp::kReduceScatter;
    case ir::OpKind::kAllToAll: return CollectiveOp::kAllToAll;
    default: return CollectiveOp::kAllReduce;
  }
}

/// What compileShard sees of a segment, tensor ids renumbered: identical keys compile to one program.
std::string segmentKey(const ir::Graph& graph, const std::vector<ir::OpId>& ops);

/// segmentKey of a segment whose interface has resident tensors and nothing else, with the order of
/// those tensors (the lowering places them in that order), each named by its first read (op and
/// input position in the segment), and the outputs that replace a resident leaf (a KV cache update).
std::string residentSegmentKey(const ir::Graph& graph, const std::vector<ir::OpId>& ops,
                               const std::vector<ir::TensorId>& resident);

/// The chips' programs as they are built: instructions at absolute cycles, each chip's next free cycle.
class ChipTimelines {
 public:
  /// Empty programs for `chips` chips of the spec, every chip free from cycle 0. With `pieces`
  /// each appended program becomes a piece of the chip's program (isa::ProgramPiece) instead of
  /// being copied into its instructions, so that a body appended many times is held once.
  ChipTimelines(const topology::ChipSpec& chip, int chips, bool pieces = false)
      : chip_(chip), units_(chip.units()), free_(chips, 0), end_(chips, 0), programs_(chips), originIds_(chips),
        pieces_(pieces) {
    for (auto& p : programs_) p.chipSpecHash = chip.hash();
  }
  /// The first cycle chip c has nothing to do.
  Cycle freeAt(int c) const { return free_[c]; }
  /// The cycle chip c's last appended program completes (its stream drain and idle time not counted).
  Cycle endAt(int c) const { return end_[c]; }
  /// freeAt of every chip.
  const std::vector<Cycle>& free() const { return free_; }
  /// Appends program (cycles relative to `offset`); the chip is free again when it completes. Its
  /// instructions' origins are named by `names` (lower::originsOf of this use of a program compiled
  /// once for several segments), else by the program's own origins.
  void append(int c, const isa::Program& program, Cycle offset, const std::vector<isa::OpOrigin>* names = nullptr) {
    if (program.instructions.empty()) return;
    if (pieces_) {
      // A piece from its first issue on; chains of the same shape (a collective's part, microbatch
      // after microbatch) share one body.
      Cycle first = program.instructions.front().issue;
      for (const auto& inst : program.instructions) first = std::min(first, inst.issue);
      isa::Program relative = program;
      for (auto& inst : relative.instructions) inst.issue -= first;
      isa::canonicalize(relative);
      relative.predictedCycles = std::max<Cycle>(0, program.predictedCycles - first);
      auto body = intern(std::move(relative.instructions), std::move(relative.originOf));
      return append(c, body, relative, offset + first, names);
    }
    const auto map = originMap(c, names ? *names : program.origins);
    for (size_t k = 0; k < program.instructions.size(); ++k) {
      isa::Instruction inst = program.instructions[k];
      inst.issue += offset;
      programs_[c].instructions.push_back(inst);
      const std::int32_t local = k < program.originOf.size() ? program.originOf[k] : -1;
      programs_[c].originOf.push_back(local >= 0 && static_cast<size_t>(local) < map->size() ? (*map)[local] : -1);
    }
    settle(c, program, offset, streamDrain(program.instructions));
  }
  /// Appends `body` (the instructions of `program`, shared with other chips and passes) as a piece
  /// of chip c's program at `offset` (with `pieces`; without, its instructions are copied).
  void append(int c, const std::shared_ptr<const isa::InstructionBody>& body, const isa::Program& program,
              Cycle offset, const std::vector<isa::OpOrigin>* names = nullptr) {
    if (body->instructions.empty()) return;
    if (!pieces_) return append(c, program, offset, names);
    programs_[c].pieces.push_back({body, offset, originMap(c, names ? *names : program.origins)});
    auto drain = drains_.find(body.get());
    if (drain == drains_.end()) drain = drains_.emplace(body.get(), streamDrain(body->instructions)).first;
    settle(c, program, offset, drain->second);
  }
  /// The cycle the instructions' last stream value has passed the chip's edge: a value keeps moving
  /// along its stream after its last reader, and the next program's values must not meet it.
  Cycle streamDrain(const std::vector<isa::Instruction>& instructions) const {
    Cycle drain = 0;
    const int slices = chip_.sliceCount();
    for (const auto& inst : instructions)
      if (inst.dst.valid()) {
        const int slice = units_[inst.unit].slice;
        const int distance = inst.dst.dir == isa::Direction::kEast ? slices - slice : slice + 1;
        drain = std::max(drain, isa::completion(chip_, inst) + distance);
      }
    return drain;
  }
  /// Keeps chip c idle for `cycles` more cycles (its next work starts no earlier).
  void idle(int c, Cycle cycles) { free_[c] += cycles; }
  /// Keeps chip c's next work from starting before `at` (its links still carry what it sent).
  void holdUntil(int c, Cycle at) { free_[c] = std::max(free_[c], at); }
  /// The programs, canonical, with their predicted cycles and lower bounds. Pieces that are not
  /// in (issue, unit) order one after another are written out into the instructions and sorted.
  std::vector<isa::Program> finish() {
    for (auto& p : programs_) {
      if (!p.pieces.empty() && !piecesInOrder(p)) p = isa::expanded(p);
      if (std::all_of(p.originOf.begin(), p.originOf.end(), [](std::int32_t id) { return id < 0; })) p.originOf.clear();
      isa::canonicalize(p);
      const isa::InstructionSequence sequence(p);
      if (sequence.size() == 0) continue;
      Cycle last = 0;
      std::map<int, Cycle> busy;
      for (size_t i = 0; i < sequence.size(); ++i) {
        const isa::Instruction inst = sequence[i];
        last = std::max(last, isa::completion(chip_, inst));
        busy[inst.unit] += isa::busyPerIssue(chip_, inst) * inst.repeat;
      }
      Cycle busiest = 0;
      for (const auto& [unit, cycles] : busy) busiest = std::max(busiest, cycles);
      p.predictedCycles = last + chip_.rippleCycles;
      p.lowerBoundCycles = busiest + chip_.rippleCycles;
    }
    return std::move(programs_);
  }

 private:
  // The body of these instructions: one made before with the same instructions, else a new one.
  std::shared_ptr<const isa::InstructionBody> intern(std::vector<isa::Instruction> instructions,
                                                     std::vector<std::int32_t> originOf) {
    auto& same = interned_[isa::instructionsHash(instructions)];
    for (const auto& body : same)
      if (body->instructions == instructions && body->originOf == originOf) return body;
    same.push_back(isa::makeBody(std::move(instructions), std::move(originOf)));
    return same.back();
  }
  // The ids in chip c's origins table (Program::origins, grown as needed) of the names, in order.
  std::shared_ptr<const std::vector<std::int32_t>> originMap(int c, const std::vector<isa::OpOrigin>& names) {
    auto map = std::make_shared<std::vector<std::int32_t>>();
    map->reserve(names.size());
    auto& table = programs_[c].origins;
    for (const auto& name : names) {
      auto [it, added] = originIds_[c].try_emplace(name, static_cast<std::int32_t>(table.size()));
      if (added) table.push_back(name);
      map->push_back(it->second);
    }
    return map;
  }
  // What an appended program leaves: the chip's SRAM peak, its end, and when it is free again.
  void settle(int c, const isa::Program& program, Cycle offset, Cycle drain) {
    programs_[c].sramBytes = std::max(programs_[c].sramBytes, program.sramBytes);
    end_[c] = std::max(end_[c], offset + program.predictedCycles);
    free_[c] = std::max(free_[c], offset + std::max(program.predictedCycles, drain));
  }
  // True when the pieces' instructions, one after another, are in (issue, unit) order.
  bool piecesInOrder(const isa::Program& p) {
    const auto before = [](const isa::Instruction& a, Cycle aOffset, const isa::Instruction& b, Cycle bOffset) {
      return a.issue + aOffset != b.issue + bOffset ? a.issue + aOffset < b.issue + bOffset : a.unit < b.unit;
    };
    const isa::ProgramPiece* previous = nullptr;
    for (const auto& piece : p.pieces) {
      const auto& list = piece.body->instructions;
      if (previous && before(list.front(), piece.offset, previous->body->instructions.back(), previous->offset))
        return false;
      if (!checked_.count(piece.body.get())) {
        for (size_t i = 1; i < list.size(); ++i)
          if (before(list[i], 0, list[i - 1], 0)) return false;
        checked_.insert(piece.body.get());
      }
      previous = &piece;
    }
    return true;
  }

  const topology::ChipSpec& chip_;
  std::vector<topology::UnitInfo> units_;
  std::vector<Cycle> free_;
  std::vector<Cycle> end_;
  std::vector<isa::Program> programs_;
  std::vector<std::map<isa::OpOrigin, std::int32_t>> originIds_;  // per chip: its origins table's ids
  bool pieces_ = false;
  std::map<const isa::InstructionBody*, Cycle> drains_;  // per shared body: its streamDrain
  std::map<std::uint64_t, std::vector<std::shared_ptr<const isa::InstructionBody>>> interned_;  // by instructionsHash
  std::set<const isa::InstructionBody*> checked_;         // bodies found in (issue, unit) order
};


/// A tensor sent by a segment over a direct link, its receives left to the consumer.
struct InFlight {
  int port = 0;                 ///< the receiver's port
  int interval = 1;             ///< cycles between vectors
  std::vector<Cycle> arrivals;  ///< absolute, one burst per tile
  Cycle lastVector = 0;         ///< arrival of the last vector of the last burst
  Cycle released = 0;           ///< the consumer starts no earlier (a training pass released at its end)
};

/// Adds the compile report of one segment to its chip's report (sums, and the SRAM peak).
void accumulateReport(CompileReport& report, const CompileReport& part);

/// Schedules a collective (or one step of messages) at the earliest cycles the chips and links
/// allow, appends every touched chip's chain to its timeline and records the transfers.
Status appendCollective(const CollectivePlan& plan, const topology::Cluster& cluster, ChipTimelines& timelines,
                        LinkCalendar& calendar, ClusterSchedule& result);

/// Books the bursts of a segment placed on `chip` at `offset`: send i (interface.sends[i], `rows[i]`
/// vectors per tile) on the direct link links[i]. Records the transfers; returns each send's arrivals.
Expected<std::vector<InFlight>> bookSegmentSends(const topology::Cluster& cluster, LinkCalendar& calendar, int chip,
                                                 Cycle offset, const lower::ShardInterface& interface,
                                                 const std::vector<int>& links, const std::vector<std::int64_t>& rows,
                                                 const CompiledShard& shard, ClusterSchedule& result);

}  // namespace tsp::schedule::detail
