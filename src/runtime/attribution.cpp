// Attribution of instructions to ops and layers, and the static work tables of /summary/ops and /summary/layers.
#include "runtime/attribution.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace tsp::runtime {

std::int64_t WorkRow::busyTotal() const { return std::accumulate(busy.begin(), busy.end(), std::int64_t{0}); }

namespace {

// Cycles covered by the intervals [first, last) (sorted here), and the first and last cycle.
struct Cover {
  Cycle active = 0, first = 0, last = 0;
};
Cover cover(std::vector<std::pair<Cycle, Cycle>>& intervals) {
  std::sort(intervals.begin(), intervals.end());
  Cover c{0, intervals.front().first, intervals.front().first};
  Cycle end = intervals.front().first;
  for (const auto& [a, b] : intervals) {
    c.active += std::max<Cycle>(0, b - std::max(a, end));
    end = std::max(end, b);
  }
  c.last = end;
  return c;
}

// Adds one chip's busy intervals of a row's instructions to the row.
void addChip(WorkRow& row, std::vector<std::pair<Cycle, Cycle>>& intervals) {
  const Cover c = cover(intervals);
  row.firstCycle = row.firstCycle < 0 ? c.first : std::min(row.firstCycle, c.first);
  row.lastCycle = std::max(row.lastCycle, c.last);
  row.cycles = std::max(row.cycles, c.active);
  row.chipCycles += c.active;
  ++row.chips;
}

// Adds `from`'s figures to `to` (a layer's spans and SRAM are its own, computed per chip).
void addWork(WorkRow& to, const WorkRow& from) {
  to.instructions += from.instructions;
  for (size_t k = 0; k < to.busy.size(); ++k) to.busy[k] += from.busy[k];
  to.memBytes += from.memBytes;
  to.c2cBytes += from.c2cBytes;
}

}  // namespace

Attribution attribute(const topology::ChipSpec& spec, const std::vector<std::shared_ptr<const isa::Program>>& programs) {
  Attribution a;
  std::map<isa::OpOrigin, std::int32_t> ids;
  a.idOf.resize(programs.size());
  for (size_t c = 0; c < programs.size(); ++c)
    for (const auto& origin : programs[c]->origins) {
      auto [it, added] = ids.try_emplace(origin, static_cast<std::int32_t>(a.names.size()));
      if (added) a.names.push_back(origin);
      a.idOf[c].push_back(it->second);
    }
  a.ops.resize(a.names.size());
  for (size_t i = 0; i < a.ops.size(); ++i) a.ops[i].id = static_cast<std::int32_t>(i);
  std::map<std::int32_t, WorkRow> layers;
  for (const auto& origin : a.names) layers[origin.layer].id = origin.layer;

  const auto units = spec.units();
  for (size_t c = 0; c < programs.size(); ++c) {
    const isa::Program& program = *programs[c];
    const isa::InstructionSequence sequence(program);
    // Per op and per layer of this chip: the cycles each instruction keeps its unit busy.
    std::map<std::int32_t, std::vector<std::pair<Cycle, Cycle>>> opBusy, layerBusy;
    // Per op and per layer, per MEM queue: the address ranges its writes touch.
    using Writes = std::map<std::int32_t, std::map<int, std::vector<std::pair<Cycle, Cycle>>>>;
    Writes opWrites, layerWrites;
    for (size_t i = 0; i < sequence.size(); ++i) {
      const std::int32_t op = a.opOf(static_cast<int>(c), sequence.originOf(i));
      if (op < 0) continue;
      const isa::Instruction inst = sequence[i];
      WorkRow& row = a.ops[op];
      ++row.instructions;
      const Cycle busy = isa::busyPerIssue(spec, inst) * inst.repeat;
      row.busy[static_cast<int>(units[inst.unit].kind)] += busy;
      const Bytes bytes = Bytes{inst.repeat} * spec.vectorBytes;
      if (inst.op == isa::Opcode::kMemRead || inst.op == isa::Opcode::kMemWrite) row.memBytes += bytes;
      if (inst.op == isa::Opcode::kC2cSend || inst.op == isa::Opcode::kC2cForward) row.c2cBytes += bytes;
      const Cycle end = isa::unitFreeAt(spec, inst);
      opBusy[op].push_back({inst.issue, end});
      layerBusy[a.names[op].layer].push_back({inst.issue, end});
      if (inst.op == isa::Opcode::kMemWrite)
        for (auto* written : {&opWrites[op][inst.unit], &layerWrites[a.names[op].layer][inst.unit]}) {
          if (inst.stride == 1 || inst.repeat == 1) {
            written->push_back({inst.address, Cycle{inst.address} + (inst.stride == 1 ? inst.repeat : 1)});
            continue;
          }
          for (std::int32_t r = 0; r < inst.repeat; ++r) {
            const Cycle address = Cycle{inst.address} + Cycle{r} * inst.stride;
            written->push_back({address, address + 1});
          }
        }
    }
    for (auto& [op, intervals] : opBusy) addChip(a.ops[op], intervals);
    for (auto& [layer, intervals] : layerBusy) addChip(layers[layer], intervals);
    // The SRAM each op and layer writes here: the distinct addresses of its MEM writes, per slice.
    for (auto* written : {&opWrites, &layerWrites}) {
      for (auto& [key, intervals] : *written) {
        Cycle addresses = 0;
        for (auto& [slice, list] : intervals) addresses += cover(list).active;
        (written == &opWrites ? a.ops[key] : layers[key]).sramBytes += Bytes{addresses} * spec.vectorBytes;
      }
    }
  }
  for (const auto& row : a.ops) addWork(layers[a.names[row.id].layer], row);
  for (auto& [layer, row] : layers)
    if (row.instructions > 0) a.layers.push_back(row);
  return a;
}

}  // namespace tsp::runtime
