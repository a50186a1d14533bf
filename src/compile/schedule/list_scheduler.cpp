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
  // The search gallops from the window the previous query found: a list schedule asks each
  // resource about times near those it asked before, so this takes a few steps where a binary
  // search over all windows takes log n (same answer either way).
  std::optional<Cycle> conflictEnd(Cycle begin, Cycle end) const {
    const size_t i = firstEndingAfter(begin);
    hint_ = i;
    if (i != windows_.size() && windows_[i].first < end) return windows_[i].second;
    return std::nullopt;
  }
  void clear() {
    windows_.clear();
    hint_ = 0;
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
  // The first window that ends after `begin` (windows end in increasing order, being disjoint).
  size_t firstEndingAfter(Cycle begin) const {
    const size_t n = windows_.size();
    const auto after = [&](size_t i) { return windows_[i].second > begin; };
    size_t lo = 0, hi = n;  // the answer is in [lo, hi]
    const size_t h = std::min(hint_, n);
    if (h == n || after(h)) {  // at or before the hint: gallop down
      hi = h;
      for (size_t step = 1;; step *= 2) {
        if (hi < step) break;
        if (!after(hi - step)) {
          lo = hi - step + 1;
          break;
        }
        hi -= step;
      }
    } else {  // after the hint: gallop up
      lo = h + 1;
      for (size_t step = 1;; step *= 2) {
        if (lo + step - 1 >= n) break;
        if (after(lo + step - 1)) {
          hi = lo + step - 1;
          break;
        }
        lo += step;
      }
    }
    return static_cast<size_t>(std::partition_point(windows_.begin() + static_cast<std::ptrdiff_t>(lo),
                                                    windows_.begin() + static_cast<std::ptrdiff_t>(hi),
                                                    [begin](const std::pair<Cycle, Cycle>& w) { return w.second <= begin; }) -
                               windows_.begin());
  }

  std::vector<std::pair<Cycle, Cycle>> windows_;
  mutable size_t hint_ = 0;  // where the last query ended its search
};

// A MEM port's run: its first and last access, and the instruction (for its banks).
struct PortRun {
  Cycle first, last;
  const isa::Instruction* inst;
};

// What one list schedule builds and drops: kept from call to call on each thread, so that the
// annealer's and the plane-order search's hundreds of schedules reuse their memory instead of
// faulting fresh pages in.
struct Workspace {
  DependenceRows preds, succ;
  std::vector<int> predFrom, succTo, waiting;
  std::vector<Cycle> predDistance;
  std::vector<Timeline> unitLine, linkLine, portLine, streamLine[2];
  std::vector<std::vector<PortRun>> portRuns;
};

template <typename T>
void resetAll(std::vector<T>& lines, size_t count) {
  lines.resize(count);
  for (auto& l : lines) l.clear();
}

}  // namespace

std::vector<double> priorities(const Problem& problem, const Options& options) {
  const auto& tasks = problem.tasks();
  const size_t n = tasks.size();
  const auto& deps = problem.dependences();
  const DependenceRows succ = dependenceRows(deps, n, false);
  // CP(v): longest path from v's start to the end of the program, through no untimed task.
  std::vector<Cycle> tail(n, 0);
  const auto& topo = problem.topologicalOrder();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const int t = *it;
    Cycle best = problem.span(t);
    for (int k = succ.begin[t]; k < succ.begin[t + 1]; ++k) {
      const Dependence& d = deps[succ.index[k]];
      if (tasks[d.to].untimed) continue;
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

  thread_local Workspace w;
  auto& unitLine = w.unitLine;
  auto& linkLine = w.linkLine;
  resetAll(unitLine, static_cast<size_t>(unitCount));
  resetAll(linkLine, static_cast<size_t>(chip.c2cPorts));
  // MEM: the queue dispatches (unitLine, one cycle), the port holds the run (portLine), and a run
  // may overlap one of the other port only where their banks differ every common cycle.
  auto& portLine = w.portLine;
  auto& portRuns = w.portRuns;  // sorted by first
  resetAll(portLine, 2 * static_cast<size_t>(chip.memSlices));
  resetAll(portRuns, 2 * static_cast<size_t>(chip.memSlices));
  // A run of the other port that shares a bank with `inst` issued at b, or nullptr.
  auto sharedBankRun = [&](const isa::Instruction& inst, Cycle b) -> const PortRun* {
    const auto& runs = portRuns[memPortOf(chip, inst) ^ 1];
    const Cycle e = b + Cycle{inst.repeat - 1} * inst.interval;
    auto it = std::lower_bound(runs.begin(), runs.end(), b, [](const PortRun& r, Cycle c) { return r.last < c; });
    for (; it != runs.end() && it->first <= e; ++it)
      if (firstSharedBankCycle(chip, inst, b, *it->inst, it->first) >= 0) return &*it;
    return nullptr;
  };
  // When such a run exists: the next issue to try, or nullopt. The first of the next kBankShifts
  // cycles at which the two runs share no bank (a cycle later their addresses pair up differently:
  // under prime-modulo or XOR banks most pairs then differ in every common cycle), else the end of
  // that run. Skipping to the end at once passed over free starts a cycle or two later and left the
  // MEM ports idle (docs/performance.md).
  constexpr Cycle kBankShifts = 4;
  auto bankConflictRetry = [&](const isa::Instruction& inst, Cycle b) -> std::optional<Cycle> {
    const PortRun* run = sharedBankRun(inst, b);
    if (!run) return std::nullopt;
    for (Cycle shift = 1; shift <= kBankShifts; ++shift)
      if (firstSharedBankCycle(chip, inst, b + shift, *run->inst, run->first) < 0) return b + shift;
    return run->last + 1;
  };
  auto& streamLine = w.streamLine;
  for (auto& l : streamLine) resetAll(l, static_cast<size_t>(chip.streamsPerDirection));

  // The dependences in rows: into each task (the predecessor and the least distance of the starts
  // it imposes) and out of each task (the successor), each row in the problem's order.
  const auto& deps = problem.dependences();
  dependenceRows(deps, n, true, w.preds);
  dependenceRows(deps, n, false, w.succ);
  const auto& predBegin = w.preds.begin;
  const auto& succBegin = w.succ.begin;
  w.predFrom.resize(deps.size());
  w.predDistance.resize(deps.size());
  w.succTo.resize(deps.size());
  for (size_t k = 0; k < deps.size(); ++k) {
    const Dependence& d = deps[w.preds.index[k]];
    w.predFrom[k] = d.from;
    w.predDistance[k] = tasks[d.from].steps[d.fromStep].offset + d.latency - tasks[d.to].steps[d.toStep].offset;
    w.succTo[k] = deps[w.succ.index[k]].to;
  }
  const auto& predFrom = w.predFrom;
  const auto& predDistance = w.predDistance;
  const auto& succTo = w.succTo;
  auto& waiting = w.waiting;
  waiting.resize(n);
  for (size_t t = 0; t < n; ++t) waiting[t] = predBegin[t + 1] - predBegin[t];
  using Entry = std::pair<std::int64_t, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  for (size_t t = 0; t < n; ++t)
    if (waiting[t] == 0) ready.push({rank[t], static_cast<int>(t)});

  std::vector<int> chosenUnit;
  std::vector<int> chosenStream;
  struct StepInfo {
    Cycle offset = 0, unitEnd = 0;
    UnitPool pool;
    bool mem = false;
    int port = -1;
  };
  std::vector<StepInfo> stepInfo;
  std::vector<UnitPool> poolOf(static_cast<size_t>(unitCount));
  for (int u = 0; u < unitCount; ++u) poolOf[static_cast<size_t>(u)] = unitPool(chip, u);
  std::vector<char> taken;
  Cycle lastCompletion = 0;
  while (!ready.empty()) {
    const int t = ready.top().second;
    ready.pop();
    const Task& task = tasks[t];
    Cycle earliest = task.release;
    for (int k = predBegin[t]; k < predBegin[t + 1]; ++k)
      earliest = std::max(earliest, s.start[predFrom[k]] + predDistance[k]);
    const auto [eb, ee] = problem.edgesOf(t);
    chosenUnit.assign(task.steps.size(), -1);
    chosenStream.assign(ee - eb, -1);
    // What every retry below asks of the task's steps, worked out once.
    stepInfo.resize(task.steps.size());
    for (size_t k = 0; k < task.steps.size(); ++k) {
      const Step& st = task.steps[k];
      StepInfo& info = stepInfo[k];
      info.offset = st.offset;
      info.unitEnd = problem.unitEnd(t, static_cast<int>(k));
      info.pool = poolOf[static_cast<size_t>(st.inst.unit)];
      info.mem = isMemAccess(st.inst);
      info.port = info.mem ? memPortOf(chip, st.inst) : -1;
    }

    // MEM accesses that cannot run when their data is ready: their port (or queue) is busy, or the
    // other port's run shares a bank with them (the bank-conflict count).
    for (size_t k = 0; k < task.steps.size(); ++k) {
      const Step& st = task.steps[k];
      if (!stepInfo[k].mem) continue;
      ++s.memAccesses;
      const Cycle b = earliest + st.offset;
      if (unitLine[st.inst.unit].conflictEnd(b, b + 1) ||
          portLine[stepInfo[k].port].conflictEnd(b, earliest + stepInfo[k].unitEnd))
        ++s.delayedMemAccesses;
      else if (sharedBankRun(st.inst, b))
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
        const StepInfo& info = stepInfo[k];
        const Cycle b = base + info.offset, e = base + info.unitEnd;
        if (info.pool.count > 1) {
          // Any free unit of the pool; the earliest-freeing one bounds the retry otherwise.
          std::optional<Cycle> soonest;
          const UnitPool pool = info.pool;
          // The pool's units an earlier step of the task holds while this one runs.
          taken.assign(static_cast<size_t>(pool.count), 0);
          for (size_t j = 0; j < k; ++j)
            if (const int g = chosenUnit[j] - pool.first; g >= 0 && g < pool.count &&
                                                          stepInfo[j].offset < info.unitEnd && info.offset < stepInfo[j].unitEnd)
              taken[g] = 1;
          for (int g = 0; g < pool.count; ++g) {
            const int u = pool.first + g;
            if (taken[g]) continue;
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
        } else if (info.mem) {
          std::optional<Cycle> c = unitLine[st.inst.unit].conflictEnd(b, b + 1);
          if (!c) c = portLine[info.port].conflictEnd(b, e);
          if (!c) c = bankConflictRetry(st.inst, b);
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
            const Cycle le = b + linkCycles(st);
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
          // The registers an earlier edge of the task holds while this one lives.
          taken.assign(static_cast<size_t>(chip.streamsPerDirection), 0);
          for (int j = eb; j < e; ++j)
            if (const int id = chosenStream[j - eb]; id >= 0 && !taken[id] && streamEdgesConflict(edges[j], 0, edge, 0))
              taken[id] = 1;
          for (int id = 0; id < chip.streamsPerDirection; ++id) {
            if (taken[id]) continue;
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
                                      base + st.offset + linkCycles(st));
      lastCompletion = std::max(lastCompletion, base + problem.completionOffset(t, static_cast<int>(k)));
    }
    for (int e = eb; e < ee; ++e) {
      const StreamEdge& edge = edges[e];
      if (options.limitStreamPressure) {
        s.streamId[e] = chosenStream[e - eb];
        streamLine[static_cast<int>(edge.dir)][s.streamId[e]].insert(base + edge.tauFirst(), base + edge.tauLast() + 1);
      }
    }
    for (int k = succBegin[t]; k < succBegin[t + 1]; ++k)
      if (const int to = succTo[k]; --waiting[to] == 0) ready.push({rank[to], to});
  }
  s.makespan = n == 0 ? 0 : lastCompletion + chip.rippleCycles;
  return s;
}

Expected<Schedule> scheduleList(const Problem& problem, const Options& options) {
  return scheduleInOrder(problem, priorityRank(problem, options), options);
}

const char* effortName(Effort effort) {
  switch (effort) {
    case Effort::kFast: return "fast";
    case Effort::kMax: return "max";
    default: return "default";
  }
}

std::optional<Effort> parseEffort(std::string_view name) {
  for (Effort e : {Effort::kFast, Effort::kDefault, Effort::kMax})
    if (name == effortName(e)) return e;
  return std::nullopt;
}

Options effortOptions(Effort effort) {
  Options options;
  switch (effort) {
    case Effort::kFast:
      options.reorderPlanes = false;
      options.planeOrderMoves = options.planeOrderShardMoves = 0;
      options.priorityPortfolio = false;
      options.annealMoves = 0;
      break;
    case Effort::kDefault: options.annealMoves = 256; break;
    case Effort::kMax:
      options.annealMoves = 1024;
      options.annealWork *= 4;
      options.planeOrderShardMoves = options.planeOrderMoves;
      options.planeOrderWork *= 4;
      options.shardPortfolio = true;
      break;
  }
  return options;
}

}  // namespace tsp::schedule
