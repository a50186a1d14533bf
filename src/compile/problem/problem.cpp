// The one-chip scheduling problem: offsets from the time of flight, well-formedness, verification.
#include "compile/problem/problem.h"

#include <algorithm>
#include <queue>
#include <cstdlib>
#include <limits>
#include <optional>
#include <tuple>

#include <fmt/format.h>

namespace tsp::schedule {

using isa::Direction;
using isa::Opcode;
using topology::UnitKind;

UnitPool unitPool(const topology::ChipSpec& chip, int unit) {
  const int vxm = chip.firstUnit(UnitKind::kVxm);
  if (unit >= vxm && unit < vxm + chip.vxmAluGroups) return {vxm, chip.vxmAluGroups};
  const int sxm = chip.firstUnit(UnitKind::kSxm), west = chip.sxmUnits / 2;
  if (unit >= sxm && unit < sxm + west) return {sxm, west};
  if (unit >= sxm + west && unit < sxm + chip.sxmUnits) return {sxm + west, chip.sxmUnits - west};
  return {unit, 1};
}

void dependenceRows(const std::vector<Dependence>& deps, size_t tasks, bool byTarget, DependenceRows& rows,
                    const std::vector<int>* subset) {
  rows.begin.assign(tasks + 1, 0);
  auto side = [&](int i) { return byTarget ? deps[i].to : deps[i].from; };
  const size_t count = subset ? subset->size() : deps.size();
  auto at = [&](size_t k) { return subset ? (*subset)[k] : static_cast<int>(k); };
  for (size_t k = 0; k < count; ++k) ++rows.begin[side(at(k)) + 1];
  for (size_t t = 0; t < tasks; ++t) rows.begin[t + 1] += rows.begin[t];
  rows.index.resize(count);
  std::vector<int> fill(rows.begin.begin(), rows.begin.end() - 1);
  for (size_t k = 0; k < count; ++k) rows.index[fill[side(at(k))]++] = at(k);
}

DependenceRows dependenceRows(const std::vector<Dependence>& deps, size_t tasks, bool byTarget,
                              const std::vector<int>* subset) {
  DependenceRows rows;
  dependenceRows(deps, tasks, byTarget, rows, subset);
  return rows;
}

Problem::Problem(const topology::ChipSpec& chip) : chip_(&chip), units_(chip.units()) {}

int Problem::addTask(Task task) {
  tasks_.push_back(std::move(task));
  return static_cast<int>(tasks_.size()) - 1;
}

void Problem::addDataDependence(int from, int fromStep, int to, int toStep) {
  const isa::Instruction& w = tasks_[from].steps[fromStep].inst;
  const Cycle done = Cycle{w.repeat - 1} * w.interval + isa::resultLatency(*chip_, w);
  deps_.push_back({from, fromStep, to, toStep, done});
}

Cycle Problem::unitEnd(int task, int step) const {
  const Step& s = tasks_[task].steps[step];
  return s.offset + Cycle{s.inst.repeat - 1} * s.inst.interval + isa::busyPerIssue(*chip_, s.inst);
}

Cycle Problem::completionOffset(int task, int step) const {
  const Step& s = tasks_[task].steps[step];
  return s.offset + Cycle{s.inst.repeat - 1} * s.inst.interval + isa::resultLatency(*chip_, s.inst);
}

std::int64_t Problem::instructionCount() const {
  std::int64_t n = 0;
  for (const auto& t : tasks_) n += static_cast<std::int64_t>(t.steps.size());
  return n;
}

void Problem::finalize() {
  edges_.clear();
  edgeBegin_.assign(1, 0);
  span_.clear();
  for (size_t ti = 0; ti < tasks_.size(); ++ti) {
    auto& steps = tasks_[ti].steps;
    const size_t n = steps.size();
    std::vector<std::optional<Cycle>> offset(n);
    auto flight = [&](int p, int k) {
      return isa::resultLatency(*chip_, steps[p].inst) + std::abs(sliceOf(steps[p].inst.unit) - sliceOf(steps[k].inst.unit));
    };
    // Propagate along stream edges in both directions until every step of the tree has an offset.
    if (n > 0) offset[0] = 0;
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t k = 0; k < n; ++k)
        for (int p : {steps[k].producer, steps[k].producer2}) {
          if (p < 0 || p >= static_cast<int>(n)) continue;
          if (offset[p] && !offset[k]) offset[k] = *offset[p] + flight(p, static_cast<int>(k)), changed = true;
          if (offset[k] && !offset[p]) offset[p] = *offset[k] - flight(p, static_cast<int>(k)), changed = true;
        }
      for (size_t k = 0; k < n; ++k) {
        const int f = steps[k].follows;
        if (f < 0 || f >= static_cast<int>(n)) continue;
        if (offset[f] && !offset[k]) offset[k] = *offset[f] + steps[k].followGap, changed = true;
        if (offset[k] && !offset[f]) offset[f] = *offset[k] - steps[k].followGap, changed = true;
      }
      if (!changed)
        for (size_t k = 0; k < n; ++k)
          if (!offset[k]) {  // a second tree in one task: starts at 0 too
            offset[k] = 0;
            changed = true;
            break;
          }
    }
    Cycle lo = 0;
    for (auto& o : offset) lo = std::min(lo, *o);
    for (size_t k = 0; k < n; ++k) steps[k].offset = *offset[k] - lo;

    for (size_t p = 0; p < n; ++p) {
      StreamEdge e;
      bool used = false;
      for (size_t k = 0; k < n; ++k)
        if (steps[k].producer == static_cast<int>(p) || steps[k].producer2 == static_cast<int>(p)) {
          const int delta = sliceOf(steps[k].inst.unit) - sliceOf(steps[p].inst.unit);
          e.dir = delta >= 0 ? Direction::kEast : Direction::kWest;
          e.reach = std::max(e.reach, std::abs(delta));
          used = true;
        }
      if (!used) continue;
      e.task = static_cast<int>(ti);
      e.step = static_cast<int>(p);
      e.slice = sliceOf(steps[p].inst.unit);
      e.firstValue = steps[p].offset + isa::resultLatency(*chip_, steps[p].inst);
      e.lastValue = e.firstValue + Cycle{steps[p].inst.repeat - 1} * steps[p].inst.interval;
      edges_.push_back(e);
    }
    edgeBegin_.push_back(static_cast<int>(edges_.size()));
    Cycle span = 0;
    for (size_t k = 0; k < n; ++k)
      span = std::max({span, completionOffset(static_cast<int>(ti), static_cast<int>(k)),
                       unitEnd(static_cast<int>(ti), static_cast<int>(k))});
    span_.push_back(span);
  }
}

Diagnostic Problem::taskError(int task, const std::string& what) const {
  return makeError(ExitCode::kInternal, fmt::format("scheduling problem: task {} ('{}'): {}", task,
                                                    task < static_cast<int>(tasks_.size()) ? tasks_[task].name : "?", what));
}

Status Problem::check() const {
  if (static_cast<int>(span_.size()) != static_cast<int>(tasks_.size()))
    return makeError(ExitCode::kInternal, "scheduling problem: finalize() was not called after the last change");
  for (size_t ti = 0; ti < tasks_.size(); ++ti) {
    const int t = static_cast<int>(ti);
    const auto& steps = tasks_[ti].steps;
    if (steps.empty()) return taskError(t, "has no instructions");
    if (tasks_[ti].deadline >= 0 && tasks_[ti].deadline < tasks_[ti].release)
      return taskError(t, fmt::format("deadline {} is before its release {}", tasks_[ti].deadline, tasks_[ti].release));
    std::vector<int> consumers(steps.size(), 0);
    for (size_t k = 0; k < steps.size(); ++k) {
      const auto& inst = steps[k].inst;
      if (inst.unit < 0 || inst.unit >= static_cast<int>(units_.size()))
        return taskError(t, fmt::format("step {} names unit {}, which does not exist", k, inst.unit));
      if (inst.op != Opcode::kNop && isa::unitKindOf(inst.op) != units_[inst.unit].kind)
        return taskError(t, fmt::format("step {}: {} cannot run on a {} unit", k, isa::opcodeName(inst.op),
                                        topology::unitKindName(units_[inst.unit].kind)));
      if (inst.repeat < 1 || inst.interval < 1)
        return taskError(t, fmt::format("step {}: repeat and interval must be >= 1", k));
      if (inst.op == Opcode::kMemRead || inst.op == Opcode::kMemWrite) {
        const std::int64_t last = inst.address + std::int64_t{inst.stride} * (inst.repeat - 1);
        if (inst.address < 0 || last < 0 || inst.address >= chip_->addressesPerSlice || last >= chip_->addressesPerSlice)
          return taskError(t, fmt::format("step {}: SRAM addresses {}..{} outside [0, {})", k, inst.address, last,
                                          chip_->addressesPerSlice));
      }
      // A step reading one stream as both operands (x * x) is one consumer of it.
      const int second = steps[k].producer2 == steps[k].producer ? -1 : steps[k].producer2;
      for (int p : {steps[k].producer, second}) {
        if (p < 0) continue;
        if (p >= static_cast<int>(steps.size()) || p == static_cast<int>(k))
          return taskError(t, fmt::format("step {} reads step {}, which is not another step of the task", k, p));
        ++consumers[p];
        const auto& src = steps[p].inst;
        if (src.repeat != inst.repeat || src.interval != inst.interval)
          return taskError(t, fmt::format("step {} reads {} values every {} cycles from step {}, which makes {} every {}",
                                          k, inst.repeat, inst.interval, p, src.repeat, src.interval));
        const Cycle expected = steps[p].offset + isa::resultLatency(*chip_, src) +
                               std::abs(sliceOf(src.unit) - sliceOf(inst.unit));
        if (steps[k].offset != expected)
          return taskError(t, fmt::format("step {} issues at offset {}, but the time of flight from step {} gives {}",
                                          k, steps[k].offset, p, expected));
      }
    }
    for (size_t k = 0; k < steps.size(); ++k) {
      const int f = steps[k].follows;
      if (f < 0) continue;
      if (f >= static_cast<int>(steps.size()) || f == static_cast<int>(k))
        return taskError(t, fmt::format("step {} follows step {}, which is not another step of the task", k, f));
      if (steps[k].offset != steps[f].offset + steps[k].followGap)
        return taskError(t, fmt::format("step {} issues at offset {}, but following step {} by {} gives {}", k,
                                        steps[k].offset, f, steps[k].followGap, steps[f].offset + steps[k].followGap));
    }
    // A value may feed several consumers (a result written by two MEM slices), all downstream of
    // its producer in one direction: a stream travels one way.
    for (size_t p = 0; p < steps.size(); ++p) {
      if (consumers[p] < 2) continue;
      int east = -1, west = -1;
      for (size_t k = 0; k < steps.size(); ++k)
        if (steps[k].producer == static_cast<int>(p) || steps[k].producer2 == static_cast<int>(p))
          (sliceOf(steps[k].inst.unit) >= sliceOf(steps[p].inst.unit) ? east : west) = static_cast<int>(k);
      if (east >= 0 && west >= 0)
        return taskError(t, fmt::format("step {} feeds step {} eastward and step {} westward; a stream value travels "
                                        "one way",
                                        p, east, west));
    }
    // A task needing more registers at once than a direction has can never be placed.
    const auto [eb, ee] = edgesOf(t);
    for (int e = eb; e < ee; ++e) {
      int live = 0;
      for (int f = eb; f < ee; ++f)
        live += edges_[f].dir == edges_[e].dir && edges_[f].tauFirst() <= edges_[e].tauFirst() &&
                edges_[e].tauFirst() <= edges_[f].tauLast();
      if (live > chip_->streamsPerDirection)
        return taskError(t, fmt::format("needs {} stream registers {} at once, the chip has {}", live,
                                        edges_[e].dir == Direction::kEast ? "eastward" : "westward",
                                        chip_->streamsPerDirection));
    }
    // A task that collides with itself can never be placed.
    for (size_t a = 0; a < steps.size(); ++a)
      for (size_t b = a + 1; b < steps.size(); ++b) {
        if (steps[a].inst.unit != steps[b].inst.unit || pooledUnit(*chip_, steps[a].inst.unit)) continue;
        if (steps[a].offset < unitEnd(t, static_cast<int>(b)) && steps[b].offset < unitEnd(t, static_cast<int>(a)))
          return taskError(t, fmt::format("steps {} and {} use unit {} at the same time", a, b, steps[a].inst.unit));
      }
  }
  return checkDependences();
}

Status Problem::checkDependences() const {
  // Acyclic dependences (Kahn, smallest index first so the order is canonical).
  std::vector<int> indegree(tasks_.size(), 0);
  std::vector<std::vector<int>> succ(tasks_.size());
  for (const auto& d : deps_) {
    if (d.from < 0 || d.to < 0 || d.from >= static_cast<int>(tasks_.size()) || d.to >= static_cast<int>(tasks_.size()) ||
        d.fromStep < 0 || d.toStep < 0 || d.fromStep >= static_cast<int>(tasks_[d.from].steps.size()) ||
        d.toStep >= static_cast<int>(tasks_[d.to].steps.size()))
      return makeError(ExitCode::kInternal,
                       fmt::format("scheduling problem: dependence {}.{} -> {}.{} names a missing step", d.from,
                                   d.fromStep, d.to, d.toStep));
    if (d.from == d.to) return taskError(d.from, "depends on itself");
    ++indegree[d.to];
    succ[d.from].push_back(d.to);
  }
  std::vector<int> ready;
  for (size_t t = 0; t < tasks_.size(); ++t)
    if (indegree[t] == 0) ready.push_back(static_cast<int>(t));
  std::make_heap(ready.begin(), ready.end(), std::greater<>());
  topo_.clear();
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), std::greater<>());
    const int t = ready.back();
    ready.pop_back();
    topo_.push_back(t);
    for (int s : succ[t])
      if (--indegree[s] == 0) {
        ready.push_back(s);
        std::push_heap(ready.begin(), ready.end(), std::greater<>());
      }
  }
  if (topo_.size() != tasks_.size()) {
    for (size_t t = 0; t < tasks_.size(); ++t)
      if (indegree[t] > 0) return taskError(static_cast<int>(t), "lies on a dependence cycle");
  }
  return {};
}

Cycle firstSharedBankCycle(const topology::ChipSpec& chip, const isa::Instruction& a, Cycle issueA,
                           const isa::Instruction& b, Cycle issueB) {
  const Cycle lastA = issueA + Cycle{a.repeat - 1} * a.interval, lastB = issueB + Cycle{b.repeat - 1} * b.interval;
  const Cycle lo = std::max(issueA, issueB), hi = std::min(lastA, lastB);
  if (lo > hi) return -1;
  // In lockstep (one interval, aligned, strides 0 or 1) the pair of banks is periodic in the common
  // cycles: prime-modulo repeats after P, XOR (bits 0, 1, 7) after 256, and linear changes bank only
  // at multiples of addresses / banks, so the walk jumps from one bank boundary to the next.
  const bool lockstep = a.interval == b.interval && (issueA - issueB) % a.interval == 0 && a.stride >= 0 &&
                        a.stride <= 1 && b.stride >= 0 && b.stride <= 1;
  const Cycle period = !lockstep ? std::numeric_limits<Cycle>::max()
                       : chip.bankMapping == topology::BankMapping::kPrimeModulo ? chip.bankPrime
                       : chip.bankMapping == topology::BankMapping::kXor        ? 256
                                                                                 : std::numeric_limits<Cycle>::max();
  const Cycle half = std::max(1, chip.addressesPerSlice / std::max(1, chip.banksPerSlice));
  const bool jump = lockstep && chip.bankMapping == topology::BankMapping::kLinear;
  Cycle walked = 0;
  // Walk a's iterations inside the common window; b must issue an iteration in the same cycle.
  for (Cycle i = std::max<Cycle>(0, ceilDiv(lo - issueA, a.interval)); issueA + i * a.interval <= hi && walked < period;
       ++walked) {
    const Cycle x = issueA + i * a.interval;
    if ((x - issueB) % b.interval != 0) {
      ++i;
      continue;
    }
    const Cycle j = (x - issueB) / b.interval;
    const Cycle addrA = a.address + i * a.stride, addrB = b.address + j * b.stride;
    if (chip.bankOf(static_cast<int>(addrA)) == chip.bankOf(static_cast<int>(addrB))) return x;
    if (!jump) {
      ++i;
      continue;
    }
    // Linear: the next iteration at which either address enters another bank.
    Cycle step = std::numeric_limits<Cycle>::max();
    if (a.stride == 1) step = std::min(step, (addrA / half + 1) * half - addrA);
    if (b.stride == 1) step = std::min(step, (addrB / half + 1) * half - addrB);
    if (step == std::numeric_limits<Cycle>::max()) return -1;  // both constant: never another bank
    i += step;
  }
  return -1;
}

bool streamEdgesConflict(const StreamEdge& a, Cycle startA, const StreamEdge& b, Cycle startB) {
  return a.dir == b.dir && startA + a.tauFirst() <= startB + b.tauLast() && startB + b.tauFirst() <= startA + a.tauLast();
}

Status verify(const Problem& problem, const Schedule& schedule) {
  const auto& tasks = problem.tasks();
  const auto& chip = problem.chip();
  auto bad = [&](int task, const std::string& what) {
    return makeError(ExitCode::kInternal,
                     fmt::format("schedule: task {} ('{}'): {}", task, tasks[task].name, what));
  };
  if (schedule.start.size() != tasks.size() || schedule.streamId.size() != problem.streamEdges().size())
    return makeError(ExitCode::kInternal, "schedule: sizes do not match the problem");
  for (size_t t = 0; t < tasks.size(); ++t) {
    if (schedule.start[t] < tasks[t].release)
      return bad(static_cast<int>(t), fmt::format("starts at {} before its release {}", schedule.start[t], tasks[t].release));
    if (tasks[t].deadline >= 0 && schedule.start[t] > tasks[t].deadline)
      return bad(static_cast<int>(t), fmt::format("starts at {} after its deadline {}", schedule.start[t], tasks[t].deadline));
  }
  for (const auto& d : problem.dependences()) {
    const Cycle from = schedule.start[d.from] + tasks[d.from].steps[d.fromStep].offset;
    const Cycle to = schedule.start[d.to] + tasks[d.to].steps[d.toStep].offset;
    if (to < from + d.latency)
      return bad(d.to, fmt::format("step {} issues at {}, before task {} step {} allows ({})", d.toStep, to, d.from,
                                   d.fromStep, from + d.latency));
  }
  // Units and links: busy windows on one resource never overlap.
  struct Window { Cycle begin, end; int task; };
  const int links = static_cast<int>(problem.units().size());
  const int memPorts = links + chip.c2cPorts;
  // Per resource, in the order of its index: units, then links, then MEM ports.
  std::vector<std::vector<Window>> busy(static_cast<size_t>(memPorts + 2 * chip.memSlices));
  struct MemRun { Cycle issue; int task, step; };
  std::vector<std::vector<MemRun>> memRuns(static_cast<size_t>(2 * chip.memSlices));  // per MEM port
  for (size_t t = 0; t < tasks.size(); ++t)
    for (size_t k = 0; k < tasks[t].steps.size(); ++k) {
      const Step& s = tasks[t].steps[k];
      const int unit = schedule.unitOf[schedule.stepBase[t] + k];
      if (unit < 0 || unit >= links || (unit != s.inst.unit && unitPool(chip, unit).first != unitPool(chip, s.inst.unit).first))
        return bad(static_cast<int>(t), fmt::format("step {} placed on unit {}, which cannot run it", k, unit));
      const Cycle issue = schedule.start[t] + s.offset;
      const Cycle end = schedule.start[t] + problem.unitEnd(static_cast<int>(t), static_cast<int>(k));
      if (isMemAccess(s.inst)) {
        // The queue dispatches in one cycle; the port holds the run.
        busy[unit].push_back({issue, issue + 1, static_cast<int>(t)});
        busy[memPorts + memPortOf(chip, s.inst)].push_back({issue, end, static_cast<int>(t)});
        memRuns[memPortOf(chip, s.inst)].push_back({issue, static_cast<int>(t), static_cast<int>(k)});
      } else {
        busy[unit].push_back({issue, end, static_cast<int>(t)});
      }
      if (s.inst.op == Opcode::kC2cSend)
        busy[links + s.inst.port].push_back(
            {issue, issue + linkCycles(s), static_cast<int>(t)});
    }
  for (int resource = 0; resource < static_cast<int>(busy.size()); ++resource) {
    auto& windows = busy[static_cast<size_t>(resource)];
    std::sort(windows.begin(), windows.end(), [](const Window& a, const Window& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < windows.size(); ++i)
      if (windows[i].begin < windows[i - 1].end)
        return bad(windows[i].task,
                   fmt::format("{} {} is busy until {} (task {}) when this task needs it at {}",
                               resource < links ? "unit" : resource < memPorts ? "link of port" : "MEM port",
                               resource < links ? resource : resource < memPorts ? resource - links : resource - memPorts,
                               windows[i - 1].end, windows[i - 1].task, windows[i].begin));
  }
  // Banks: a read and a write running at once on one slice never touch one bank in one cycle.
  for (int port = 0; port + 1 < static_cast<int>(memRuns.size()); port += 2) {
    auto& reads = memRuns[static_cast<size_t>(port)];
    auto& writes = memRuns[static_cast<size_t>(port) + 1];
    auto byIssue = [](const MemRun& a, const MemRun& b) { return a.issue < b.issue; };
    std::sort(reads.begin(), reads.end(), byIssue);
    std::sort(writes.begin(), writes.end(), byIssue);
    size_t w0 = 0;
    for (const MemRun& r : reads) {
      const isa::Instruction& ri = tasks[r.task].steps[r.step].inst;
      const Cycle rEnd = r.issue + Cycle{ri.repeat - 1} * ri.interval;
      auto wEnd = [&](const MemRun& w) {
        const isa::Instruction& wi = tasks[w.task].steps[w.step].inst;
        return w.issue + Cycle{wi.repeat - 1} * wi.interval;
      };
      while (w0 < writes.size() && wEnd(writes[w0]) < r.issue) ++w0;  // port runs do not overlap: ends sorted too
      for (size_t w = w0; w < writes.size() && writes[w].issue <= rEnd; ++w) {
        const Cycle x = firstSharedBankCycle(chip, ri, r.issue, tasks[writes[w].task].steps[writes[w].step].inst,
                                             writes[w].issue);
        if (x >= 0)
          return bad(writes[w].task, fmt::format("MEM slice {}: its write and a read of task {} hit one bank in cycle {}",
                                                 port / 2, r.task, x));
      }
    }
  }
  // Stream registers: per (direction, register), no two edges share a moving-frame cell.
  const auto& edges = problem.streamEdges();
  // Per (direction, register), direction first.
  std::vector<std::vector<int>> byRegister(2 * static_cast<size_t>(chip.streamsPerDirection));
  for (size_t e = 0; e < edges.size(); ++e) {
    const int id = schedule.streamId[e];
    if (id < 0 || id >= chip.streamsPerDirection)
      return bad(edges[e].task, fmt::format("step {} has no stream register (id {})", edges[e].step, id));
    byRegister[static_cast<size_t>(static_cast<int>(edges[e].dir) * chip.streamsPerDirection + id)].push_back(static_cast<int>(e));
  }
  for (size_t r = 0; r < byRegister.size(); ++r) {
    auto& list = byRegister[r];
    const std::pair<int, int> reg{static_cast<int>(r) / chip.streamsPerDirection, static_cast<int>(r) % chip.streamsPerDirection};
    auto begin = [&](int e) { return schedule.start[edges[e].task] + edges[e].tauFirst(); };
    std::sort(list.begin(), list.end(), [&](int a, int b) { return begin(a) < begin(b); });
    for (size_t i = 0; i < list.size(); ++i)
      for (size_t j = i + 1; j < list.size(); ++j) {
        const StreamEdge& a = edges[list[i]];
        const StreamEdge& b = edges[list[j]];
        if (begin(list[j]) > schedule.start[a.task] + a.tauLast()) break;  // sorted: no later edge meets a
        if (streamEdgesConflict(a, schedule.start[a.task], b, schedule.start[b.task]))
          return bad(b.task, fmt::format("stream {} {} holds two values at once (task {} step {} and this task step {})",
                                         reg.second, reg.first == 0 ? "east" : "west", a.task, a.step, b.step));
      }
  }
  return {};
}

std::vector<isa::Instruction> emitInstructions(const Problem& problem, const Schedule& schedule,
                                               std::vector<std::int32_t>* originOf) {
  const auto& tasks = problem.tasks();
  const auto& chip = problem.chip();
  isa::Program out;
  out.instructions.reserve(static_cast<size_t>(problem.instructionCount()));
  for (size_t t = 0; t < tasks.size(); ++t) {
    const int eb = problem.edgesOf(static_cast<int>(t)).first, ee = problem.edgesOf(static_cast<int>(t)).second;
    auto streamOf = [&](int step) -> isa::StreamRef {
      for (int e = eb; e < ee; ++e)
        if (problem.streamEdges()[e].step == step)
          return {static_cast<std::int16_t>(schedule.streamId[e]), problem.streamEdges()[e].dir};
      return {};
    };
    for (size_t k = 0; k < tasks[t].steps.size(); ++k) {
      const Step& s = tasks[t].steps[k];
      isa::Instruction inst = s.inst;
      inst.issue = schedule.start[t] + s.offset;
      inst.unit = schedule.unitOf[schedule.stepBase[t] + k];
      inst.dst = streamOf(static_cast<int>(k));
      inst.src = s.producer >= 0 ? streamOf(s.producer) : isa::StreamRef{};
      inst.src2 = s.producer2 >= 0 ? streamOf(s.producer2) : isa::StreamRef{};
      if (inst.address >= 0) inst.bank = chip.bankOf(inst.address);
      if (inst.op == isa::Opcode::kC2cSend) inst.stride = static_cast<std::int32_t>(s.linkFrom);
      out.instructions.push_back(inst);
      if (originOf) out.originOf.push_back(s.origin >= 0 ? s.origin : tasks[t].origin);
    }
  }
  isa::canonicalize(out);
  if (originOf) *originOf = std::move(out.originOf);
  return std::move(out.instructions);
}

}  // namespace tsp::schedule
