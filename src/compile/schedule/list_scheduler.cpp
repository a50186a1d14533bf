// List scheduling: earliest feasible start per task over unit, link and stream-register timelines.
#include "compile/schedule/list_scheduler.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <queue>

#include <fmt/format.h>

namespace tsp::schedule {

using isa::Opcode;
using topology::UnitKind;

namespace {

// Busy windows of one resource: sorted, disjoint, touching windows merged.
class Timeline {
 public:
  // End of the first busy window overlapping [begin, end), or nullopt when the range is free
  // (moving-frame coordinates may be negative, so no sentinel value will do).
  std::optional<Cycle> conflictEnd(Cycle begin, Cycle end) const {
    auto it = std::upper_bound(windows_.begin(), windows_.end(), begin,
                               [](Cycle b, const std::pair<Cycle, Cycle>& w) { return b < w.second; });
    if (it != windows_.end() && it->first < end) return it->second;
    return std::nullopt;
  }
  void insert(Cycle begin, Cycle end) {
    auto it = std::lower_bound(windows_.begin(), windows_.end(), std::make_pair(begin, end));
    it = windows_.insert(it, {begin, end});
    // Merge with the next and the previous window when they touch.
    if (it + 1 != windows_.end() && (it + 1)->first <= it->second) {
      it->second = std::max(it->second, (it + 1)->second);
      windows_.erase(it + 1);
    }
    if (it != windows_.begin() && (it - 1)->second >= it->first) {
      (it - 1)->second = std::max((it - 1)->second, it->second);
      windows_.erase(it);
    }
  }

 private:
  std::vector<std::pair<Cycle, Cycle>> windows_;
};

}  // namespace

std::vector<double> priorities(const Problem& problem, const Options& options) {
  const auto& tasks = problem.tasks();
  const size_t n = tasks.size();
  const auto& deps = problem.dependences();
  const DependenceRows succ = dependenceRows(deps, n, false);
  // CP(v): longest path from v's start to the end of the program.
  std::vector<Cycle> tail(n, 0);
  const auto& topo = problem.topologicalOrder();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const int t = *it;
    Cycle best = problem.span(t);
    for (int k = succ.begin[t]; k < succ.begin[t + 1]; ++k) {
      const Dependence& d = deps[succ.index[k]];
      best = std::max(best, tasks[t].steps[d.fromStep].offset + d.latency - tasks[d.to].steps[d.toStep].offset + tail[d.to]);
    }
    tail[t] = best;
  }
  std::vector<double> r(n, 0.0);
  double total = 0;
  for (size_t t = 0; t < n; ++t) {
    for (size_t k = 0; k < tasks[t].steps.size(); ++k)
      r[t] += static_cast<double>(problem.unitEnd(static_cast<int>(t), static_cast<int>(k)) - tasks[t].steps[k].offset);
    total += r[t];
  }
  const double avg = n > 0 && total > 0 ? total / static_cast<double>(n) : 1.0;
  std::vector<double> p(n);
  for (size_t t = 0; t < n; ++t)
    p[t] = options.alpha * static_cast<double>(tail[t]) + options.beta * r[t] / avg +
           options.gamma * static_cast<double>(succ.begin[t + 1] - succ.begin[t]);
  return p;
}

std::vector<std::int64_t> priorityRank(const Problem& problem, const Options& options) {
  const auto p = priorities(problem, options);
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  std::vector<std::int64_t> rank(p.size());
  for (size_t i = 0; i < order.size(); ++i) rank[order[i]] = static_cast<std::int64_t>(i);
  return rank;
}

Expected<Schedule> scheduleInOrder(const Problem& problem, const std::vector<std::int64_t>& rank,
                                   const Options& options) {
  const auto& tasks = problem.tasks();
  const auto& chip = problem.chip();
  const size_t n = tasks.size();
  const int unitCount = static_cast<int>(problem.units().size());
  const auto& edges = problem.streamEdges();

  Schedule s;
  s.start.assign(n, -1);
  s.streamId.assign(edges.size(), -1);
  s.stepBase.resize(n);
  int steps = 0;
  for (size_t t = 0; t < n; ++t) {
    s.stepBase[t] = steps;
    steps += static_cast<int>(tasks[t].steps.size());
  }
  s.unitOf.assign(steps, -1);

  std::vector<Timeline> unitLine(unitCount), linkLine(chip.c2cPorts);
  // MEM: the queue dispatches (unitLine, one cycle), the port holds the run (portLine), and a run
  // may overlap one of the other port only where their banks differ every common cycle.
  std::vector<Timeline> portLine(2 * static_cast<size_t>(chip.memSlices));
  struct PortRun {
    Cycle first, last;
    const isa::Instruction* inst;
  };
  std::vector<std::vector<PortRun>> portRuns(2 * static_cast<size_t>(chip.memSlices));  // sorted by first
  // End of a run of the other port that shares a bank with `inst` issued at b, or nullopt.
  auto bankConflictEnd = [&](const isa::Instruction& inst, Cycle b) -> std::optional<Cycle> {
    const auto& runs = portRuns[memPortOf(chip, inst) ^ 1];
    const Cycle e = b + Cycle{inst.repeat - 1} * inst.interval;
    auto it = std::lower_bound(runs.begin(), runs.end(), b, [](const PortRun& r, Cycle c) { return r.last < c; });
    for (; it != runs.end() && it->first <= e; ++it)
      if (firstSharedBankCycle(chip, inst, b, *it->inst, it->first) >= 0) return it->last + 1;
    return std::nullopt;
  };
  std::vector<Timeline> streamLine[2];
  for (auto& l : streamLine) l.resize(chip.streamsPerDirection);

  const auto& deps = problem.dependences();
  const DependenceRows preds = dependenceRows(deps, n, true), succ = dependenceRows(deps, n, false);
  std::vector<int> waiting(n, 0);
  for (size_t t = 0; t < n; ++t) waiting[t] = preds.begin[t + 1] - preds.begin[t];
  using Entry = std::pair<std::int64_t, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  for (size_t t = 0; t < n; ++t)
    if (waiting[t] == 0) ready.push({rank[t], static_cast<int>(t)});

  std::vector<int> chosenUnit;
  std::vector<int> chosenStream;
  Cycle lastCompletion = 0;
  while (!ready.empty()) {
    const int t = ready.top().second;
    ready.pop();
    const Task& task = tasks[t];
    Cycle earliest = task.release;
    for (int k = preds.begin[t]; k < preds.begin[t + 1]; ++k) {
      const Dependence& d = deps[preds.index[k]];
      earliest = std::max(earliest, s.start[d.from] + tasks[d.from].steps[d.fromStep].offset + d.latency -
                                        task.steps[d.toStep].offset);
    }
    const auto [eb, ee] = problem.edgesOf(t);
    chosenUnit.assign(task.steps.size(), -1);
    chosenStream.assign(ee - eb, -1);

    // MEM accesses that cannot run when their data is ready: their port (or queue) is busy, or the
    // other port's run shares a bank with them (the bank-conflict count).
    for (size_t k = 0; k < task.steps.size(); ++k) {
      const Step& st = task.steps[k];
      if (!isMemAccess(st.inst)) continue;
      ++s.memAccesses;
      const Cycle b = earliest + st.offset;
      if (unitLine[st.inst.unit].conflictEnd(b, b + 1) ||
          portLine[memPortOf(chip, st.inst)].conflictEnd(b, earliest + problem.unitEnd(t, static_cast<int>(k))))
        ++s.delayedMemAccesses;
      else if (bankConflictEnd(st.inst, b))
        ++s.delayedMemAccesses, ++s.bankDelayedMemAccesses;
    }

    Cycle base = earliest;
    for (bool placed = false; !placed;) {
      placed = true;
      Cycle next = base;
      std::fill(chosenUnit.begin(), chosenUnit.end(), -1);
      std::fill(chosenStream.begin(), chosenStream.end(), -1);
      for (size_t k = 0; k < task.steps.size() && placed; ++k) {
        const Step& st = task.steps[k];
        const Cycle b = base + st.offset, e = base + problem.unitEnd(t, static_cast<int>(k));
        if (pooledUnit(chip, st.inst.unit)) {
          // Any free unit of the pool; the earliest-freeing one bounds the retry otherwise.
          std::optional<Cycle> soonest;
          const UnitPool pool = unitPool(chip, st.inst.unit);
          for (int g = 0; g < pool.count; ++g) {
            const int u = pool.first + g;
            bool takenHere = false;
            for (size_t j = 0; j < k; ++j)
              takenHere |= chosenUnit[j] == u && task.steps[j].offset < problem.unitEnd(t, static_cast<int>(k)) &&
                           st.offset < problem.unitEnd(t, static_cast<int>(j));
            if (takenHere) continue;
            const auto c = unitLine[u].conflictEnd(b, e);
            if (!c) {
              chosenUnit[k] = u;
              break;
            }
            soonest = soonest ? std::min(*soonest, *c) : *c;
          }
          if (chosenUnit[k] < 0) {
            placed = false;
            next = std::max(next, soonest ? *soonest - st.offset : base + 1);
          }
        } else if (isMemAccess(st.inst)) {
          std::optional<Cycle> c = unitLine[st.inst.unit].conflictEnd(b, b + 1);
          if (!c) c = portLine[memPortOf(chip, st.inst)].conflictEnd(b, e);
          if (!c) c = bankConflictEnd(st.inst, b);
          if (c) {
            placed = false;
            next = std::max(next, *c - st.offset);
          } else {
            chosenUnit[k] = st.inst.unit;
          }
        } else {
          if (const auto c = unitLine[st.inst.unit].conflictEnd(b, e)) {
            placed = false;
            next = std::max(next, *c - st.offset);
          } else {
            chosenUnit[k] = st.inst.unit;
          }
          if (placed && st.inst.op == Opcode::kC2cSend) {
            const Cycle le = b + Cycle{st.inst.repeat - 1} * st.inst.interval + st.linkBusy;
            if (const auto lc = linkLine[st.inst.port].conflictEnd(b, le)) {
              placed = false;
              next = std::max(next, *lc - st.offset);
            }
          }
        }
      }
      if (placed && options.limitStreamPressure) {
        for (int e = eb; e < ee && placed; ++e) {
          const StreamEdge& edge = edges[e];
          const Cycle b = base + edge.tauFirst(), en = base + edge.tauLast() + 1;
          auto& lines = streamLine[static_cast<int>(edge.dir)];
          std::optional<Cycle> soonest;
          for (int id = 0; id < chip.streamsPerDirection; ++id) {
            bool takenHere = false;
            for (int j = eb; j < e; ++j)
              takenHere |= chosenStream[j - eb] == id && streamEdgesConflict(edges[j], 0, edge, 0);
            if (takenHere) continue;
            const auto c = lines[id].conflictEnd(b, en);
            if (!c) {
              chosenStream[e - eb] = id;
              break;
            }
            soonest = soonest ? std::min(*soonest, *c) : *c;
          }
          if (chosenStream[e - eb] < 0) {
            placed = false;
            next = std::max(next, soonest ? *soonest - edge.tauFirst() : base + 1);
          }
        }
      }
      if (!placed) base = std::max(next, base + 1);
    }
    if (task.deadline >= 0 && base > task.deadline)
      return makeError(ExitCode::kInternal,
                       fmt::format("task '{}' cannot start by its deadline {} (earliest feasible start {})", task.name,
                                   task.deadline, base));

    s.start[t] = base;
    for (size_t k = 0; k < task.steps.size(); ++k) {
      const Step& st = task.steps[k];
      const int u = chosenUnit[k];
      s.unitOf[s.stepBase[t] + k] = u;
      if (isMemAccess(st.inst)) {
        const Cycle b = base + st.offset;
        unitLine[u].insert(b, b + 1);
        portLine[memPortOf(chip, st.inst)].insert(b, base + problem.unitEnd(t, static_cast<int>(k)));
        auto& runs = portRuns[memPortOf(chip, st.inst)];
        const PortRun run{b, b + Cycle{st.inst.repeat - 1} * st.inst.interval, &st.inst};
        runs.insert(std::upper_bound(runs.begin(), runs.end(), run.first,
                                     [](Cycle c, const PortRun& r) { return c < r.first; }),
                    run);
      } else {
        unitLine[u].insert(base + st.offset, base + problem.unitEnd(t, static_cast<int>(k)));
      }
      if (st.inst.op == Opcode::kC2cSend)
        linkLine[st.inst.port].insert(base + st.offset,
                                      base + st.offset + Cycle{st.inst.repeat - 1} * st.inst.interval + st.linkBusy);
      lastCompletion = std::max(lastCompletion, base + problem.completionOffset(t, static_cast<int>(k)));
    }
    for (int e = eb; e < ee; ++e) {
      const StreamEdge& edge = edges[e];
      if (options.limitStreamPressure) {
        s.streamId[e] = chosenStream[e - eb];
        streamLine[static_cast<int>(edge.dir)][s.streamId[e]].insert(base + edge.tauFirst(), base + edge.tauLast() + 1);
      }
    }
    for (int k = succ.begin[t]; k < succ.begin[t + 1]; ++k)
      if (const int to = deps[succ.index[k]].to; --waiting[to] == 0) ready.push({rank[to], to});
  }
  s.makespan = n == 0 ? 0 : lastCompletion + chip.rippleCycles;
  return s;
}

Expected<Schedule> scheduleList(const Problem& problem, const Options& options) {
  return scheduleInOrder(problem, priorityRank(problem, options), options);
}

}  // namespace tsp::schedule
