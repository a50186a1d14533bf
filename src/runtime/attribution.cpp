// Attribution of instructions to ops and layers, and the static work tables of /summary/ops and /summary/layers.
#include "runtime/attribution.h"

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>
#include <tuple>

namespace tsp::runtime {

std::int64_t WorkRow::busyTotal() const { return std::accumulate(busy.begin(), busy.end(), std::int64_t{0}); }

namespace {

// The intervals [first, last) as sorted disjoint intervals (empty ones dropped).
std::vector<std::pair<Cycle, Cycle>> merged(std::vector<std::pair<Cycle, Cycle>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<std::pair<Cycle, Cycle>> out;
  for (const auto& [a, b] : intervals) {
    if (b <= a) continue;
    if (!out.empty() && a <= out.back().second) out.back().second = std::max(out.back().second, b);
    else out.push_back({a, b});
  }
  return out;
}

// Cycles in sorted disjoint intervals.
Cycle length(const std::vector<std::pair<Cycle, Cycle>>& disjoint) {
  Cycle n = 0;
  for (const auto& [a, b] : disjoint) n += b - a;
  return n;
}

// Cycles covered by the (non-empty list of) intervals [first, last), and the first and last cycle.
struct Cover {
  Cycle active = 0, first = 0, last = 0;
};
Cover cover(const std::vector<std::pair<Cycle, Cycle>>& intervals) {
  Cover c{0, intervals.front().first, intervals.front().first};
  for (const auto& [a, b] : intervals) {
    c.first = std::min(c.first, a);
    c.last = std::max(c.last, b);
  }
  c.last = std::max(c.last, c.first);
  c.active = length(merged(intervals));
  return c;
}

// One chip's active span of a row: its cover and the busy fraction of its busiest C2C queue.
struct Span {
  Cover cover;
  double linkBusy = 0;
};
Span spanOf(const std::vector<std::pair<Cycle, Cycle>>& intervals,
            const std::map<int, std::vector<std::pair<Cycle, Cycle>>>& queues) {
  Span s{cover(intervals), 0};
  for (const auto& [unit, used] : queues)
    if (s.cover.active > 0)
      s.linkBusy = std::max(s.linkBusy, static_cast<double>(cover(used).active) / static_cast<double>(s.cover.active));
  return s;
}

// Adds one chip's span of a row to the row.
void addChip(WorkRow& row, const Span& s) {
  const Cover& c = s.cover;
  row.linkBusy = std::max(row.linkBusy, s.linkBusy);
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

// The names and every chip's ids; the op rows and a row per named layer (in layer order, idle ones
// too, so that ranks' rows line up) from the programs of `chips` alone.
Attribution attributeChips(const topology::ChipSpec& spec, const std::vector<std::shared_ptr<const isa::Program>>& programs,
                           const std::vector<int>& chips) {
  Attribution a;
  // One row per op, whichever microbatch's copies (OpOrigin::instance) or input its instructions read.
  std::map<std::tuple<std::string, std::string, std::int32_t, std::string>, std::int32_t> ids;
  a.idOf.resize(programs.size());
  for (size_t c = 0; c < programs.size(); ++c)
    for (const auto& origin : programs[c]->origins) {
      auto [it, added] = ids.try_emplace(std::tuple(origin.op, origin.kind, origin.layer, origin.tensor),
                                         static_cast<std::int32_t>(a.names.size()));
      if (added) a.names.push_back(origin);
      a.idOf[c].push_back(it->second);
    }
  a.ops.resize(a.names.size());
  for (size_t i = 0; i < a.ops.size(); ++i) a.ops[i].id = static_cast<std::int32_t>(i);
  std::map<std::int32_t, WorkRow> layers;
  for (const auto& origin : a.names) layers[origin.layer].id = origin.layer;

  // What one chip's program adds to the op and layer rows: the same for every chip running it.
  struct ChipWork {
    std::map<std::int32_t, WorkRow> ops;  // its instructions, busy cycles, bytes and SRAM
    std::map<std::int32_t, Span> opSpans, layerSpans;
    std::map<std::int32_t, std::int64_t> layerSram;
  };
  const auto units = spec.units();
  auto workOf = [&](const isa::Program& program, int c) {
    ChipWork work;
    const isa::InstructionSequence sequence(program);
    // Per op and per layer of this chip: the cycles each instruction keeps its unit busy.
    std::map<std::int32_t, std::vector<std::pair<Cycle, Cycle>>> opBusy, layerBusy;
    // Per op and per layer, per C2C queue: the cycles its instructions occupy the queue.
    std::map<std::int32_t, std::map<int, std::vector<std::pair<Cycle, Cycle>>>> opQueues, layerQueues;
    // Per op and per layer, per MEM queue: the address ranges its writes touch.
    using Writes = std::map<std::int32_t, std::map<int, std::vector<std::pair<Cycle, Cycle>>>>;
    Writes opWrites, layerWrites;
    for (size_t i = 0; i < sequence.size(); ++i) {
      const std::int32_t op = a.opOf(c, sequence.originOf(i));
      if (op < 0) continue;
      const isa::Instruction inst = sequence[i];
      WorkRow& row = work.ops[op];
      ++row.instructions;
      const Cycle busy = isa::busyPerIssue(spec, inst) * inst.repeat;
      row.busy[static_cast<int>(units[inst.unit].kind)] += busy;
      const Bytes bytes = Bytes{inst.repeat} * spec.vectorBytes;
      if (inst.op == isa::Opcode::kMemRead || inst.op == isa::Opcode::kMemWrite) row.memBytes += bytes;
      if (inst.op == isa::Opcode::kC2cSend || inst.op == isa::Opcode::kC2cForward) row.c2cBytes += bytes;
      const Cycle end = isa::unitFreeAt(spec, inst);
      opBusy[op].push_back({inst.issue, end});
      layerBusy[a.names[op].layer].push_back({inst.issue, end});
      if (units[inst.unit].kind == topology::UnitKind::kC2c) {
        opQueues[op][inst.unit].push_back({inst.issue, end});
        layerQueues[a.names[op].layer][inst.unit].push_back({inst.issue, end});
      }
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
    for (auto& [op, intervals] : opBusy) work.opSpans[op] = spanOf(intervals, opQueues[op]);
    for (auto& [layer, intervals] : layerBusy) work.layerSpans[layer] = spanOf(intervals, layerQueues[layer]);
    // The SRAM each op and layer writes here: the distinct addresses of its MEM writes, per slice.
    for (auto* written : {&opWrites, &layerWrites}) {
      for (auto& [key, intervals] : *written) {
        Cycle addresses = 0;
        for (auto& [slice, list] : intervals) addresses += cover(list).active;
        if (written == &opWrites) work.ops[key].sramBytes += Bytes{addresses} * spec.vectorBytes;
        else work.layerSram[key] += Bytes{addresses} * spec.vectorBytes;
      }
    }
    return work;
  };
  // Chips running one program (shared by the driver) share its work.
  std::map<const isa::Program*, ChipWork> known;
  for (const int c : chips) {
    auto it = known.find(programs[c].get());
    if (it == known.end()) it = known.emplace(programs[c].get(), workOf(*programs[c], c)).first;
    const ChipWork& work = it->second;
    for (const auto& [op, part] : work.ops) {
      addWork(a.ops[op], part);
      a.ops[op].sramBytes += part.sramBytes;
    }
    for (const auto& [op, span] : work.opSpans) addChip(a.ops[op], span);
    for (const auto& [layer, span] : work.layerSpans) addChip(layers[layer], span);
    for (const auto& [layer, bytes] : work.layerSram) layers[layer].sramBytes += bytes;
  }
  for (const auto& row : a.ops) addWork(layers[a.names[row.id].layer], row);
  for (auto& [layer, row] : layers) a.layers.push_back(row);
  return a;
}

void dropIdleLayers(Attribution& a) {
  std::erase_if(a.layers, [](const WorkRow& row) { return row.instructions == 0; });
}

}  // namespace

Attribution attribute(const topology::ChipSpec& spec, const std::vector<std::shared_ptr<const isa::Program>>& programs) {
  std::vector<int> chips(programs.size());
  std::iota(chips.begin(), chips.end(), 0);
  Attribution a = attributeChips(spec, programs, chips);
  dropIdleLayers(a);
  return a;
}

Attribution attribute(const topology::ChipSpec& spec, const std::vector<std::shared_ptr<const isa::Program>>& programs,
                      const std::vector<int>& chips, MPI_Comm comm) {
  Attribution a = attributeChips(spec, programs, chips);
  // Every figure of a row is a sum, a maximum or a minimum over chips: exact whichever rank adds which chip.
  constexpr size_t kSums = 6 + topology::kUnitKindCount, kMaxima = 3;
  const size_t rows = a.ops.size() + a.layers.size();
  std::vector<long long> sums(rows * kSums), maxima(rows * kMaxima);
  std::vector<double> linkBusy(rows);
  auto rowAt = [&](size_t i) -> WorkRow& { return i < a.ops.size() ? a.ops[i] : a.layers[i - a.ops.size()]; };
  for (size_t i = 0; i < rows; ++i) {
    const WorkRow& r = rowAt(i);
    long long* sum = &sums[i * kSums];
    sum[0] = r.instructions;
    sum[1] = r.memBytes;
    sum[2] = r.c2cBytes;
    sum[3] = r.sramBytes;
    sum[4] = r.chipCycles;
    sum[5] = r.chips;
    for (size_t k = 0; k < r.busy.size(); ++k) sum[6 + k] = r.busy[k];
    long long* max = &maxima[i * kMaxima];
    max[0] = r.firstCycle < 0 ? LLONG_MIN : -r.firstCycle;  // the earliest first cycle, as a maximum
    max[1] = r.lastCycle;
    max[2] = r.cycles;
    linkBusy[i] = r.linkBusy;
  }
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_LONG_LONG, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, maxima.data(), static_cast<int>(maxima.size()), MPI_LONG_LONG, MPI_MAX, comm);
  MPI_Allreduce(MPI_IN_PLACE, linkBusy.data(), static_cast<int>(rows), MPI_DOUBLE, MPI_MAX, comm);
  for (size_t i = 0; i < rows; ++i) {
    WorkRow& r = rowAt(i);
    const long long* sum = &sums[i * kSums];
    r.instructions = sum[0];
    r.memBytes = sum[1];
    r.c2cBytes = sum[2];
    r.sramBytes = sum[3];
    r.chipCycles = sum[4];
    r.chips = static_cast<std::int32_t>(sum[5]);
    for (size_t k = 0; k < r.busy.size(); ++k) r.busy[k] = sum[6 + k];
    const long long* max = &maxima[i * kMaxima];
    r.firstCycle = max[0] == LLONG_MIN ? -1 : -max[0];
    r.lastCycle = max[1];
    r.cycles = max[2];
    r.linkBusy = linkBusy[i];
  }
  dropIdleLayers(a);
  return a;
}

TimeSplit timeSplit(const topology::ChipSpec& spec, const isa::Program& program, Cycle chipCycles, Cycle makespan) {
  TimeSplit split;
  const isa::InstructionSequence sequence(program);
  const auto units = spec.units();
  // Busy intervals of computing and of communicating; the cycles at which a transfer's instructions issue,
  // and whether it is a pipeline transfer (an op's Send/Receive) or part of a collective.
  // An op that moves data between chips (a pipeline Send or Receive, a collective, a gradient bucket's
  // all-reduce) communicates with every instruction it has, its reductions paced by the links included.
  std::vector<char> moves(program.origins.size(), 0);
  for (size_t i = 0; i < sequence.size(); ++i)
    if (const std::int32_t origin = sequence.originOf(i);
        origin >= 0 && static_cast<size_t>(origin) < moves.size() && units[sequence[i].unit].kind == topology::UnitKind::kC2c)
      moves[origin] = 1;
  std::vector<std::pair<Cycle, Cycle>> compute, communicate;
  std::vector<std::pair<Cycle, bool>> transfers;
  for (size_t i = 0; i < sequence.size(); ++i) {
    const isa::Instruction inst = sequence[i];
    if (inst.op == isa::Opcode::kNop) continue;
    const std::pair<Cycle, Cycle> busy{inst.issue, isa::unitFreeAt(spec, inst)};
    const std::int32_t origin = sequence.originOf(i);
    const bool moving = origin >= 0 && static_cast<size_t>(origin) < moves.size() && moves[origin];
    if (units[inst.unit].kind != topology::UnitKind::kC2c && !moving) {
      compute.push_back(busy);
      continue;
    }
    communicate.push_back(busy);
    const bool pipeline = origin >= 0 && static_cast<size_t>(origin) < program.origins.size() &&
                          (program.origins[origin].kind == "Send" || program.origins[origin].kind == "Receive");
    transfers.push_back({inst.issue, pipeline});
  }
  // The chip's cycles as disjoint pieces: compute first, then communication, then idle gaps.
  const auto computeCover = merged(compute);
  auto all = compute;
  all.insert(all.end(), communicate.begin(), communicate.end());
  const auto busyCover = merged(all);
  split.compute = length(computeCover);
  split.communication = length(busyCover) - split.compute;
  std::sort(transfers.begin(), transfers.end());
  // Each idle gap [a, b) by what issues at b: a collective's transfer, a pipeline transfer, or compute.
  Cycle idleFrom = 0;
  auto gap = [&](Cycle a, Cycle b) {
    if (b <= a) return;
    const auto at = std::lower_bound(transfers.begin(), transfers.end(), std::make_pair(b, false));
    const bool transferAtEnd = at != transfers.end() && at->first == b;
    bool pipelineAtEnd = false;
    for (auto it = at; it != transfers.end() && it->first == b; ++it) pipelineAtEnd = pipelineAtEnd || it->second;
    if (a == 0 || pipelineAtEnd) split.bubble += b - a;
    else if (transferAtEnd) split.communication += b - a;
    else split.other += b - a;
  };
  for (const auto& [a, b] : busyCover) {
    gap(idleFrom, a);
    idleFrom = b;
  }
  const Cycle end = std::max(chipCycles, idleFrom);
  split.other += end - idleFrom;  // the last results draining after the last issue
  split.bubble += std::max<Cycle>(0, makespan - end);
  return split;
}

}  // namespace tsp::runtime
