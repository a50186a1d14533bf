// What the cluster schedulers share (sharded plans, training steps): segment keys for sharing compiled segments, the chips' timelines.
#pragma once

#include <algorithm>
#include <cassert>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

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

/// Rows x tiles of tensors as the lowering stores them (lower::storageGeometry), which is what a
/// segment sends and receives and a message carries: a CNN's feature map [N, C, H, W] is
/// channels-last, N*H*W rows of C. Each graph's layouts (lower::channelsLastTensors) are found once.
class StoredShapes {
 public:
  explicit StoredShapes(const topology::ChipSpec& chip) : chip_(chip) {}
  /// Rows x tiles of `tensor` of `graph` (the graph must outlive this object).
  std::pair<std::int64_t, int> operator()(const ir::Graph& graph, ir::TensorId tensor) {
    auto layout = layouts_.find(&graph);
    if (layout == layouts_.end()) layout = layouts_.emplace(&graph, lower::channelsLastTensors(graph)).first;
    return lower::storageGeometry(chip_, graph, tensor, layout->second[static_cast<size_t>(tensor)]);
  }
  /// Vectors of `tensor` of `graph`: rows x tiles.
  std::int64_t vectors(const ir::Graph& graph, ir::TensorId tensor) {
    const auto [rows, tiles] = (*this)(graph, tensor);
    return rows * tiles;
  }

 private:
  const topology::ChipSpec& chip_;
  std::map<const ir::Graph*, std::vector<bool>> layouts_;
};

/// The chips' programs as they are built: instructions at absolute cycles, each chip's next free cycle.
class ChipTimelines {
 public:
  /// Empty programs for `chips` chips of the spec, every chip free from cycle 0. With `pieces`
  /// each appended program becomes a piece of the chip's program (isa::ProgramPiece) instead of
  /// being copied into its instructions, so that a body appended many times is held once.
  ChipTimelines(const topology::ChipSpec& chip, int chips, bool pieces = false)
      : chip_(chip), units_(chip.units()), free_(chips, 0), end_(chips, 0), firstFree_(chips, 0), floor_(chips, 0), busy_(chips), taken_(chips),
        programs_(chips), originIds_(chips), pieces_(pieces) {
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
    append(c, program, offset, streamDrain(program.instructions), footprint(program.instructions), names);
  }
  /// Appends `body` (the instructions of `program`, shared with other chips and passes) as a piece
  /// of chip c's program at `offset` (with `pieces`; without, its instructions are copied).
  void append(int c, const std::shared_ptr<const isa::InstructionBody>& body, const isa::Program& program,
              Cycle offset, const std::vector<isa::OpOrigin>* names = nullptr) {
    if (body->instructions.empty()) return;
    if (!pieces_) return append(c, program, offset, names);
    programs_[c].pieces.push_back({body, offset, originMap(c, names ? *names : program.origins)});
    auto drain = drains_.find(body.get());
    if (drain == drains_.end())
      drain = drains_.emplace(body.get(), std::pair(streamDrain(body->instructions), footprint(body->instructions))).first;
    settle(c, program, offset, drain->second.first, drain->second.second);
  }
  /// The earliest offset at which a copy of `program` may start on a chip that ran `program` at 0
  /// and nothing else (earliestStart, its stream registers renamed): its period when it repeats.
  static Cycle followsAt(const topology::ChipSpec& chip, const isa::Program& program) {
    ChipTimelines alone(chip, 1);
    alone.append(0, program, 0);
    const Footprint f = alone.footprint(program.instructions);
    return alone.earliestStart(0, alone.renamedFootprint(f, alone.streamRenaming(0, f)));
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
  /// What a program occupies, cycles relative to its start. Ordered resources (MXM planes with
  /// their weights, C2C ports with their arrival queues, and each block of kAddressBlock SRAM
  /// addresses of a MEM slice) are used by one program after the other: the first use and the
  /// cycle it is free again. Shared resources (MEM slices', VXM ALUs' and SXM units' busy cycles;
  /// each stream register of each direction: its values' moving-frame points, the cycle a value is,
  /// or would be, at the stream's upstream end) take the next program in their gaps: merged
  /// [from, to) intervals. A MEM slice's whole span (first to last use of any of its addresses) is
  /// kept as a slice span: not a constraint, it is what the chip's next compile is released by
  /// (releases) and when the chip first frees a unit (firstFreeAt).
  struct Footprint {
    struct Span {
      int resource = 0;
      Cycle first = 0, end = 0;
    };
    std::vector<Span> ordered;                                        ///< by resource
    std::vector<Span> slices;                                         ///< MEM slices, by resource
    std::vector<std::pair<int, std::vector<std::pair<Cycle, Cycle>>>> shared;  ///< (resource, sorted intervals)
  };
  /// append (without pieces) of a program whose streamDrain and footprint are known.
  void append(int c, const isa::Program& program, Cycle offset, Cycle drain, const Footprint& f,
              const std::vector<isa::OpOrigin>* names = nullptr) {
    assert(!pieces_ && "a piece's footprint is its body's");
    if (program.instructions.empty()) return;
    const auto map = originMap(c, names ? *names : program.origins);
    auto& instructions = programs_[c].instructions;
    const size_t base = instructions.size();
    instructions.insert(instructions.end(), program.instructions.begin(), program.instructions.end());
    for (size_t k = base; k < instructions.size(); ++k) instructions[k].issue += offset;
    auto& originOf = programs_[c].originOf;
    originOf.resize(instructions.size(), -1);
    for (size_t k = 0; k < program.instructions.size() && k < program.originOf.size(); ++k) {
      const std::int32_t local = program.originOf[k];
      if (local >= 0 && static_cast<size_t>(local) < map->size()) originOf[base + k] = (*map)[local];
    }
    settle(c, program, offset, drain, f);
  }
  /// SRAM addresses per ordered address block of a MEM slice.
  static constexpr int kAddressBlock = 128;
  Footprint footprint(const std::vector<isa::Instruction>& instructions) const {
    const int unitCount = static_cast<int>(units_.size());
    // Shared resources are units and stream registers; the ordered ones' uses are gathered as a
    // list, since a program touches few of the chip's thousands of address blocks.
    const size_t resources = units_.size() + 2 * static_cast<size_t>(chip_.streamsPerDirection);
    std::vector<Footprint::Span> spans;
    std::vector<std::vector<std::pair<Cycle, Cycle>>> intervals(resources);
    const auto use = [&](int resource, Cycle first, Cycle end) { spans.push_back({resource, first, end}); };
    for (const auto& inst : instructions) {
      const auto& unit = units_[inst.unit];
      if (unit.kind == topology::UnitKind::kVxm || unit.kind == topology::UnitKind::kSxm) {
        intervals[inst.unit].push_back({inst.issue, isa::unitFreeAt(chip_, inst)});
      } else if (unit.kind == topology::UnitKind::kMem) {
        const Cycle end = isa::unitFreeAt(chip_, inst);
        intervals[inst.unit].push_back({inst.issue, end});
        use(inst.unit, inst.issue, end);
        if (inst.address >= 0) {
          const std::int64_t last = inst.address + std::int64_t{inst.repeat - 1} * inst.stride;
          const int lo = static_cast<int>(std::min<std::int64_t>(inst.address, last) / kAddressBlock);
          const int hi = static_cast<int>(std::max<std::int64_t>(inst.address, last) / kAddressBlock);
          for (int block = lo; block <= hi && block < blocksPerSlice(); ++block)
            use(addressBlock(unit.indexInKind, block), inst.issue, end);
        }
      } else {
        const int resource = unit.kind == topology::UnitKind::kMxm ? inst.unit - unit.indexInKind % 2 : inst.unit;
        use(resource, inst.issue, isa::unitFreeAt(chip_, inst));
      }
      if (!inst.dst.valid()) continue;
      // A value emitted at e from slice s is at the upstream end at e - s (east) or e + s (west).
      const Cycle emitted = inst.issue + isa::resultLatency(chip_, inst);
      const Cycle frame = inst.dst.dir == isa::Direction::kEast ? -unit.slice : unit.slice;
      intervals[unitCount + static_cast<int>(inst.dst.dir) * chip_.streamsPerDirection + inst.dst.id].push_back(
          {emitted + frame, emitted + Cycle{inst.repeat - 1} * inst.interval + frame + 1});
    }
    Footprint f;
    std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.resource < b.resource; });
    for (size_t i = 0; i < spans.size();) {
      Footprint::Span span = spans[i];
      for (++i; i < spans.size() && spans[i].resource == span.resource; ++i) {
        span.first = std::min(span.first, spans[i].first);
        span.end = std::max(span.end, spans[i].end);
      }
      (isMem(span.resource) ? f.slices : f.ordered).push_back(span);
    }
    for (size_t r = 0; r < resources; ++r) {
      auto& list = intervals[r];
      if (list.empty()) continue;
      std::sort(list.begin(), list.end());
      std::vector<std::pair<Cycle, Cycle>> merged;
      for (const auto& iv : list)
        if (!merged.empty() && iv.first <= merged.back().second) merged.back().second = std::max(merged.back().second, iv.second);
        else merged.push_back(iv);
      f.shared.emplace_back(static_cast<int>(r), std::move(merged));
    }
    return f;
  }
  /// The earliest offset from `from` on at which chip c may start a program of footprint f: no earlier than the
  /// chip's last program started or its fence, each ordered resource free of what the chip ran
  /// before, and each shared one's intervals in gaps of the chip's (so that no unit is busy twice
  /// and no two values on a stream ever meet). No stream needs to drain.
  Cycle earliestStart(int c, const Footprint& f, Cycle from = 0) const {
    Cycle at = std::max(floor_[c], from);
    if (busy_[c].empty()) return at;
    for (const auto& span : f.ordered)
      if (busy_[c][span.resource] > kUnused) at = std::max(at, busy_[c][span.resource] - span.first);
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto& [resource, list] : f.shared) {
        const auto& taken = taken_[c][resource];
        for (const auto& [from, to] : list) {
          // The first interval of the chip's that ends after this one starts; past it while they overlap.
          auto it = std::upper_bound(taken.begin(), taken.end(), from + at,
                                     [](Cycle x, const std::pair<Cycle, Cycle>& iv) { return x < iv.second; });
          while (it != taken.end() && it->first < to + at) {
            at = it->second - from;
            moved = true;
            ++it;
          }
        }
      }
    }
    return at;
  }
  /// The cycle chip c's last program first left one of its units, MEM slices, MXM planes or ports
  /// (or its fence, when later): where a program that waits for the rest (Options::unitRelease) starts.
  Cycle firstFreeAt(int c) const { return std::max(floor_[c], firstFree_[c]); }
  /// The ordered resources chip c's earlier programs still use at `offset`: (resource, cycles from
  /// `offset` until it is free), for Options::unitRelease.
  std::vector<std::pair<int, Cycle>> releases(int c, Cycle offset) const {
    std::vector<std::pair<int, Cycle>> out;
    for (size_t r = 0; r < busy_[c].size() && r < units_.size(); ++r)
      if (busy_[c][r] > offset) out.push_back({static_cast<int>(r), busy_[c][r] - offset});
    return out;
  }
  /// A renaming of the stream registers of a program of footprint f for chip c, per direction
  /// (old id -> new id): the registers the program fills first take the registers the chip's
  /// earlier programs left first, so that it may start while their last values still pass.
  std::vector<std::int16_t> streamRenaming(int c, const Footprint& f) const {
    const int n = chip_.streamsPerDirection, unitCount = static_cast<int>(units_.size());
    std::vector<std::int16_t> map(2 * static_cast<size_t>(n));
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<std::pair<Cycle, int>> wanted, left;  // (first value, id), (chip's last value end, id)
      std::vector<bool> used(n, false);
      for (const auto& [resource, list] : f.shared)
        if (resource >= unitCount + dir * n && resource < unitCount + (dir + 1) * n) {
          wanted.push_back({list.front().first, resource - unitCount - dir * n});
          used[wanted.back().second] = true;
        }
      for (int id = 0; id < n; ++id) {
        const auto* taken = taken_[c].empty() ? nullptr : &taken_[c][unitCount + dir * n + id];
        left.push_back({taken && !taken->empty() ? taken->back().second : kUnused, id});
      }
      std::sort(wanted.begin(), wanted.end());
      std::stable_sort(left.begin(), left.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = 0; k < wanted.size(); ++k) map[dir * n + wanted[k].second] = static_cast<std::int16_t>(left[k].second);
      size_t next = wanted.size();  // registers the program does not use keep distinct ids
      for (int id = 0; id < n; ++id)
        if (!used[id]) map[dir * n + id] = static_cast<std::int16_t>(left[next++].second);
    }
    return map;
  }
  /// The footprint of a program of footprint f with its stream registers renamed by `map`
  /// (streamRenaming, a permutation per direction): footprint(renamed(instructions, map)).
  Footprint renamedFootprint(Footprint f, const std::vector<std::int16_t>& map) const {
    const int n = chip_.streamsPerDirection, first = static_cast<int>(units_.size());
    for (auto& [resource, list] : f.shared)
      if (resource >= first && resource < first + 2 * n) {
        const int dir = (resource - first) / n;
        resource = first + dir * n + map[resource - first];
      }
    std::sort(f.shared.begin(), f.shared.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return f;
  }
  /// The instructions with their stream registers renamed by `map` (streamRenaming).
  std::vector<isa::Instruction> renamed(std::vector<isa::Instruction> instructions,
                                        const std::vector<std::int16_t>& map) const {
    const int n = chip_.streamsPerDirection;
    for (auto& inst : instructions)
      for (isa::StreamRef* ref : {&inst.src, &inst.src2, &inst.dst})
        if (ref->valid()) ref->id = map[static_cast<int>(ref->dir) * n + ref->id];
    return instructions;
  }
  /// Keeps chip c's next work from starting before everything appended so far is done and its
  /// streams have drained (work that must not overlap what came before: a collective's chains).
  void fence(int c) { floor_[c] = std::max(floor_[c], free_[c]); }
  /// Keeps chip c's next work from starting before `at` (its links still carry what it sent).
  void holdUntil(int c, Cycle at) {
    free_[c] = std::max(free_[c], at);
    floor_[c] = std::max(floor_[c], at);
  }
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
  // Units, then stream registers (2 directions), then MEM slices' address blocks.
  int blocksPerSlice() const { return (chip_.addressesPerSlice + kAddressBlock - 1) / kAddressBlock; }
  size_t resourceCount() const {
    return units_.size() + 2 * static_cast<size_t>(chip_.streamsPerDirection) +
           static_cast<size_t>(chip_.memSlices) * blocksPerSlice();
  }
  int addressBlock(int slice, int block) const {
    return static_cast<int>(units_.size()) + 2 * chip_.streamsPerDirection + slice * blocksPerSlice() + block;
  }
  bool isMem(int resource) const {
    return resource < static_cast<int>(units_.size()) && units_[resource].kind == topology::UnitKind::kMem;
  }
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
  // What an appended program leaves: the chip's SRAM peak, its end, when it is free again, and
  // each resource's next free cycle; the chip's next program starts no earlier than this one.
  void settle(int c, const isa::Program& program, Cycle offset, Cycle drain, const Footprint& f) {
    programs_[c].sramBytes = std::max(programs_[c].sramBytes, program.sramBytes);
    end_[c] = std::max(end_[c], offset + program.predictedCycles);
    free_[c] = std::max(free_[c], offset + std::max(program.predictedCycles, drain));
    floor_[c] = std::max(floor_[c], offset);
    auto& busy = busy_[c];
    if (busy.empty()) {
      busy.assign(resourceCount(), kUnused);
      taken_[c].resize(busy.size());
    }
    Cycle first = std::numeric_limits<Cycle>::max();
    for (const auto* spans : {&f.ordered, &f.slices})
      for (const auto& span : *spans) {
        busy[span.resource] = std::max(busy[span.resource], offset + span.end);
        if (span.resource < static_cast<int>(units_.size())) first = std::min(first, offset + span.end);
      }
    if (first != std::numeric_limits<Cycle>::max()) firstFree_[c] = first;
    // Intervals before the floor less a chip's width can meet no later program's; they are dropped.
    const Cycle stale = floor_[c] - 2 * chip_.sliceCount();
    for (const auto& [resource, list] : f.shared) {
      auto& taken = taken_[c][resource];
      taken.erase(taken.begin(), std::lower_bound(taken.begin(), taken.end(), stale,
                                                  [](const std::pair<Cycle, Cycle>& iv, Cycle x) { return iv.second < x; }));
      for (const auto& [from, to] : list) {
        auto it = taken.insert(std::lower_bound(taken.begin(), taken.end(), std::pair{from + offset, to + offset}),
                               {from + offset, to + offset});
        // Kept disjoint and sorted by both ends: merged with the neighbours it touches.
        if (it != taken.begin() && std::prev(it)->second >= it->first) {
          std::prev(it)->second = std::max(std::prev(it)->second, it->second);
          it = std::prev(taken.erase(it));
        }
        while (std::next(it) != taken.end() && std::next(it)->first <= it->second) {
          it->second = std::max(it->second, std::next(it)->second);
          taken.erase(std::next(it));
        }
      }
    }
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
  std::vector<Cycle> firstFree_;          // per chip: the first ordered resource its last program left
  std::vector<Cycle> floor_;              // per chip: its next program starts no earlier (earliestStart)
  static constexpr Cycle kUnused = std::numeric_limits<Cycle>::min();
  std::vector<std::vector<Cycle>> busy_;  // per chip (empty until used): each ordered resource's next free cycle
  std::vector<std::vector<std::vector<std::pair<Cycle, Cycle>>>> taken_;  // per chip, shared resource: sorted busy intervals
  std::vector<isa::Program> programs_;
  std::vector<std::map<isa::OpOrigin, std::int32_t>> originIds_;  // per chip: its origins table's ids
  bool pieces_ = false;
  std::map<const isa::InstructionBody*, std::pair<Cycle, Footprint>> drains_;  // per shared body: streamDrain, footprint
  std::map<std::uint64_t, std::vector<std::shared_ptr<const isa::InstructionBody>>> interned_;  // by instructionsHash
  std::set<const isa::InstructionBody*> checked_;         // bodies found in (issue, unit) order
};


/// A tensor sent by a segment over a direct link, its receives left to the consumer.
struct InFlight {
  int port = 0;                 ///< the receiver's port
  int interval = 1;             ///< cycles between the vectors the send hands over
  double spacing = 0;           ///< cycles between the vectors on the link, its exact rate (0: interval)
  std::int64_t rows = 0;        ///< vectors per burst (one burst per tile)
  std::vector<Cycle> arrivals;  ///< absolute, one burst per tile
  Cycle lastVector = 0;         ///< arrival of the last vector of the last burst
  Cycle released = 0;           ///< the consumer starts no earlier (a training pass released at its end)

  /// Cycles from a burst's first arrival to its last vector's.
  Cycle tail() const {
    return topology::pacedSerializationCycles(rows - 1, spacing, interval);
  }
};

/// A C2C pace in a segment key: the interval, and the link's spacing where it is the slower (the
/// key seeds the segment's compile, so a pace that does not change the program keeps its key).
inline std::string paceKey(int interval, double spacing) {
  return spacing > interval ? fmt::format("{}/{}", interval, spacing) : fmt::format("{}", interval);
}

/// Per device (or replica, TP rank and microbatch): the tensors sent to a chip, keyed by (tensor, chip).
using InFlightMap = std::map<std::pair<ir::TensorId, int>, InFlight>;

/// Adds the compile report of one segment to its chip's report (sums, and the SRAM peak).
void accumulateReport(CompileReport& report, const CompileReport& part);

/// Schedules a collective (or one step of messages) at the earliest cycles the chips and links
/// allow, appends every touched chip's chain to its timeline and records the transfers. Its
/// receives take each burst whole once its last vector is in (scheduleCollective): a port hands
/// bursts over in arrival order, and receiveWaiting has taken the segments' bursts that waited on
/// its ports; the calendar keeps later bursts behind its own (LinkCalendar's inOrder).
Status appendCollective(const CollectivePlan& plan, const topology::Cluster& cluster, ChipTimelines& timelines,
                        LinkCalendar& calendar, ClusterSchedule& result);

/// A tensor receiveWaiting took off its port: entry `map` of the maps it was given, the tensor, the chip.
struct TakenFlight {
  size_t map = 0;
  ir::TensorId tensor = -1;
  int chip = 0;
};

/// The (chip, port) pairs where the plan's messages arrive (its receivers' and transit chips'
/// ports), each with the cycle std::numeric_limits<Cycle>::max() for receiveWaiting.
std::map<std::pair<int, int>, Cycle> messagePorts(const CollectivePlan& plan, const topology::Cluster& cluster);

/// A port hands bursts over in arrival order. Before receives or forwards are placed on the
/// (chip, port) pairs of `ports`, the bursts that segments sent and that still wait there for their
/// receiver, having arrived before the pair's cycle, would be handed to them first: each is
/// received now instead, into SRAM, in arrival order, after what its chip ran before (its
/// receiver then finds the tensor on the chip); named by `originOf(map, tensor)`. Returns the
/// tensors taken; their entries are erased from `flights`.
std::vector<TakenFlight> receiveWaiting(const std::map<std::pair<int, int>, Cycle>& ports,
                                        const topology::Cluster& cluster, ChipTimelines& timelines,
                                        const std::vector<InFlightMap*>& flights,
                                        const std::function<isa::OpOrigin(size_t, ir::TensorId)>& originOf);

/// Keeps the release times of the receives' bursts (ReceivePlan::arrivals, relative) on each port
/// in the order the bursts arrive (`absolute`: per receive, per tile): a burst released no later
/// than one that arrived before it on its port is released a cycle after that one. The lowering
/// chains each port's receives in release order, and the port hands the bursts over in arrival order.
void orderArrivals(std::vector<lower::ReceivePlan>& receives, const std::vector<std::vector<Cycle>>& absolute);

/// Books the bursts of a segment placed on `chip` at `offset`: send i (interface.sends[i], `rows[i]`
/// vectors per tile) on the direct link links[i]. Records the transfers; returns each send's arrivals.
Expected<std::vector<InFlight>> bookSegmentSends(const topology::Cluster& cluster, LinkCalendar& calendar, int chip,
                                                 Cycle offset, const lower::ShardInterface& interface,
                                                 const std::vector<int>& links, const std::vector<std::int64_t>& rows,
                                                 const CompiledShard& shard, ClusterSchedule& result);

}  // namespace tsp::schedule::detail
