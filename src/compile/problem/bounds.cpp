// Lower bounds of the one-chip scheduling problem: critical path, busiest resource, one-machine windows with heads and tails raised by what each resource can have done, serial groups.
#include <algorithm>
#include <limits>
#include <queue>
#include <tuple>

#include "compile/problem/problem.h"

namespace tsp::schedule {

namespace {

constexpr Cycle kNone = std::numeric_limits<Cycle>::min();

// The dependences kept when `relaxed` are left out (one occurrence each), as indices.
std::vector<int> keptDependences(const Problem& problem, const std::vector<Dependence>& relaxed) {
  const auto& deps = problem.dependences();
  auto key = [](const Dependence& d) { return std::tie(d.from, d.fromStep, d.to, d.toStep, d.latency); };
  auto less = [&](const Dependence& a, const Dependence& b) { return key(a) < key(b); };
  std::vector<Dependence> leftOut = relaxed;
  std::sort(leftOut.begin(), leftOut.end(), less);
  std::vector<char> used(leftOut.size(), 0);
  std::vector<int> kept;
  kept.reserve(deps.size());
  for (size_t i = 0; i < deps.size(); ++i) {
    bool skip = false;
    if (!leftOut.empty())
      for (auto it = std::lower_bound(leftOut.begin(), leftOut.end(), deps[i], less); it != leftOut.end() && *it == deps[i]; ++it)
        if (const size_t j = static_cast<size_t>(it - leftOut.begin()); !used[j]) {
          used[j] = 1, skip = true;
          break;
        }
    if (!skip) kept.push_back(static_cast<int>(i));
  }
  return kept;
}

// The least start of dependence `d`'s target given its source's start (issue(to) >= issue(from) + latency).
Cycle across(const Problem& problem, const Dependence& d) {
  return problem.tasks()[d.from].steps[d.fromStep].offset + d.latency - problem.tasks()[d.to].steps[d.toStep].offset;
}

// Each task's earliest start from the releases (and `floor`, when given) over the dependences in `preds`.
std::vector<Cycle> earliestStarts(const Problem& problem, const DependenceRows& preds, const std::vector<Cycle>* floor = nullptr) {
  const auto& tasks = problem.tasks();
  const auto& deps = problem.dependences();
  std::vector<Cycle> earliest(tasks.size(), 0);
  // Leaving dependences out keeps the topological order valid.
  for (int t : problem.topologicalOrder()) {
    Cycle e = tasks[t].release;
    if (floor) e = std::max(e, (*floor)[t]);
    for (int k = preds.begin[t]; k < preds.begin[t + 1]; ++k) {
      const Dependence& d = deps[preds.index[k]];
      e = std::max(e, earliest[d.from] + across(problem, d));
    }
    earliest[t] = e;
  }
  return earliest;
}

// Each task's tail: the least time from its start to the end of the program, over its own span, the
// dependences in `succ` and `floor` (when given).
std::vector<Cycle> tails(const Problem& problem, const DependenceRows& succ, const std::vector<Cycle>* floor = nullptr) {
  const auto& deps = problem.dependences();
  std::vector<Cycle> tail(problem.tasks().size(), 0);
  const auto& topo = problem.topologicalOrder();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    Cycle best = problem.span(*it);
    if (floor) best = std::max(best, (*floor)[*it]);
    for (int k = succ.begin[*it]; k < succ.begin[*it + 1]; ++k) {
      const Dependence& d = deps[succ.index[k]];
      best = std::max(best, across(problem, d) + tail[d.to]);
    }
    tail[*it] = best;
  }
  return tail;
}

Cycle longestFinish(const Problem& problem, const std::vector<Cycle>& earliest) {
  Cycle cp = 0;
  for (size_t t = 0; t < earliest.size(); ++t) cp = std::max(cp, earliest[t] + problem.span(static_cast<int>(t)));
  return cp;
}

// ceil(a / b) for b > 0 and a of any sign.
Cycle ceilQuotient(Cycle a, Cycle b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// A job of a one-machine relaxation: it may start at `head`, keeps its unit `busy` cycles, and `tail`
// cycles must pass after it before the program (or whatever the tails count to) ends.
struct Job {
  Cycle head, busy, tail;
};

// The least max(finish + tail) of any schedule of `jobs` on a pool of `units` interchangeable units:
// Jackson's preemptive schedule (at every moment the released job with the longest tail runs) on one
// machine `units` times as fast (time counted in 1 / units cycles), which no schedule on the pool can
// beat, and each job alone (one job holds one unit). Reorders `jobs`.
Cycle preemptiveBound(std::vector<Job>& jobs, Cycle units) {
  if (jobs.empty()) return kNone;
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.head < b.head; });
  Cycle alone = kNone, best = kNone;
  for (const Job& j : jobs) alone = std::max(alone, j.head + j.busy + j.tail);
  std::priority_queue<std::pair<Cycle, Cycle>> ready;  // (tail, busy cycles left), scaled
  Cycle now = kNone;
  size_t next = 0;
  while (next < jobs.size() || !ready.empty()) {
    if (ready.empty()) now = std::max(now, jobs[next].head * units);
    for (; next < jobs.size() && jobs[next].head * units <= now; ++next) ready.push({jobs[next].tail * units, jobs[next].busy});
    auto [tailOf, left] = ready.top();
    ready.pop();
    const Cycle until = next < jobs.size() ? std::min(now + left, jobs[next].head * units) : now + left;
    left -= until - now;
    now = until;
    if (left > 0) ready.push({tailOf, left});
    else best = std::max(best, now + tailOf);
  }
  return std::max(alone, ceilQuotient(best, units));
}

// The resources every step holds, per task (compressed rows), as dense keys: units (a pool by its
// first unit), then C2C links, then MEM ports (2 per slice). A MEM access holds its port; a C2C send
// holds its unit and its link.
struct ResourceUses {
  struct Use {
    int key;
    Cycle offset, end;  // relative to the task's start
  };
  std::vector<int> begin;
  std::vector<Use> uses;
  std::vector<Cycle> units;  // per key: how many interchangeable units
};

ResourceUses resourceUses(const Problem& problem) {
  const auto& tasks = problem.tasks();
  const auto& chip = problem.chip();
  const size_t links = problem.units().size(), memPorts = links + static_cast<size_t>(chip.c2cPorts);
  ResourceUses r;
  r.units.assign(memPorts + 2 * static_cast<size_t>(chip.memSlices), 1);
  r.begin.reserve(tasks.size() + 1);
  for (size_t t = 0; t < tasks.size(); ++t) {
    r.begin.push_back(static_cast<int>(r.uses.size()));
    for (size_t k = 0; k < tasks[t].steps.size(); ++k) {
      const Step& s = tasks[t].steps[k];
      const Cycle end = problem.unitEnd(static_cast<int>(t), static_cast<int>(k));
      size_t key = static_cast<size_t>(s.inst.unit);
      if (const UnitPool pool = unitPool(chip, s.inst.unit); pool.count > 1) {
        key = static_cast<size_t>(pool.first);
        r.units[key] = pool.count;
      } else if (isMemAccess(s.inst)) {
        key = memPorts + static_cast<size_t>(memPortOf(chip, s.inst));
      }
      r.uses.push_back({static_cast<int>(key), s.offset, end});
      if (s.inst.op == isa::Opcode::kC2cSend)
        r.uses.push_back({static_cast<int>(links) + s.inst.port, s.offset,
                          s.offset + linkCycles(s)});
    }
  }
  r.begin.push_back(static_cast<int>(r.uses.size()));
  return r;
}

// Heads and tails raised by resource-constrained reasoning. Before a task starts, all its ancestors'
// uses of a resource must have run on it; after its start, all its descendants' uses. So the least
// start of a task is at least the one-machine bound (preemptiveBound) of its ancestors' uses of any
// one resource, each with its head and, as its tail, the longest dependence path from its end to the
// task's start; and a task's tail at least that of its descendants' uses, each with its least start
// after the task's (the longest path) as head and its own tail to the end of the program.
class ResourceReasoning {
 public:
  ResourceReasoning(const Problem& problem, const DependenceRows& preds, const DependenceRows& succ)
      : problem_(problem), preds_(preds), succ_(succ), uses_(resourceUses(problem)), stamp_(problem.tasks().size(), 0),
        dist_(problem.tasks().size(), 0), position_(problem.tasks().size(), 0), jobs_(uses_.units.size()),
        reach_(uses_.units.size()) {
    const auto& topo = problem.topologicalOrder();
    for (size_t i = 0; i < topo.size(); ++i) position_[topo[i]] = static_cast<int>(i);
  }

  // At most this many tasks in the set of one task's ancestors or descendants, the nearest first (a
  // subset of the jobs bounds no higher, so a smaller set is still a bound).
  void limitSets(size_t tasks) { cap_ = std::max<size_t>(tasks, 1); }

  // The least start of `task` that its ancestors' uses of every resource allow, given every task's
  // earliest start (before), or the least tail of `task` (from its start) that its descendants' uses
  // allow, given every task's tail (after): `value` is that task's earliest start or tail unchanged
  // when no resource raises it, kNone when no task of the set is marked in `moved` (nothing new).
  Cycle bound(int task, bool before, const std::vector<Cycle>& value, const std::vector<char>& moved) {
    const DependenceRows& inward = before ? preds_ : succ_;   // towards the set
    const DependenceRows& outward = before ? succ_ : preds_;  // from a member back towards the task
    if (!collect(task, inward, before, moved)) return kNone;
    // Nearest the task first in the topological order, so that the paths to the task are known.
    std::sort(set_.begin(), set_.end(), [&](int a, int b) { return before ? position_[a] > position_[b] : position_[a] < position_[b]; });
    const auto& deps = problem_.dependences();
    for (int m : set_) {  // the longest path between m's start and the task's
      Cycle d = m == task ? 0 : kNone;
      for (int k = outward.begin[m]; m != task && k < outward.begin[m + 1]; ++k) {
        const Dependence& dep = deps[outward.index[k]];
        if (const int other = before ? dep.to : dep.from; stamp_[other] == generation_) d = std::max(d, across(problem_, dep) + dist_[other]);
      }
      dist_[m] = d;
    }
    for (int m : set_)
      for (int u = uses_.begin[m]; u < uses_.begin[m + 1]; ++u) {
        const auto& use = uses_.uses[u];
        // Before: the use's own head, and the path from its end to the task as its tail. After: the
        // path from the task as its head, and its own tail to the end.
        if (before) add(use.key, {value[m] + use.offset, use.end - use.offset, dist_[m] - use.end});
        else add(use.key, {dist_[m] + use.offset, use.end - use.offset, value[m] - use.end});
      }
    return solve(value[task]);
  }

  // Every use of each resource from every task's earliest start to its tail: the largest one-machine
  // bound over the resources (the program cannot end earlier).
  Cycle windowBound(const std::vector<Cycle>& earliest, const std::vector<Cycle>& tail) {
    for (size_t t = 0; t < earliest.size(); ++t)
      for (int u = uses_.begin[t]; u < uses_.begin[t + 1]; ++u) {
        const auto& use = uses_.uses[u];
        add(use.key, {earliest[t] + use.offset, use.end - use.offset, tail[t] - use.end});
      }
    return solve();
  }

 private:
  // The task and its ancestors (or descendants) over `rows`, into set_, marked with a new generation;
  // whether any of them is marked in `moved`.
  bool collect(int task, const DependenceRows& rows, bool byTarget, const std::vector<char>& moved) {
    ++generation_;
    set_.clear();
    set_.push_back(task);
    stamp_[task] = generation_;
    const auto& deps = problem_.dependences();
    for (size_t i = 0; i < set_.size() && set_.size() < cap_; ++i) {
      const int t = set_[i];
      for (int k = rows.begin[t]; k < rows.begin[t + 1]; ++k) {
        const Dependence& d = deps[rows.index[k]];
        const int other = byTarget ? d.from : d.to;
        if (stamp_[other] != generation_) stamp_[other] = generation_, set_.push_back(other);
      }
    }
    return std::any_of(set_.begin(), set_.end(), [&](int t) { return moved[t] != 0; });
  }

  void add(int key, const Job& job) {
    Reach& r = reach_[key];
    if (jobs_[key].empty()) touched_.push_back(key), r = {kNone, 0, 0, kNone};
    jobs_[key].push_back(job);
    r.head = std::max(r.head, job.head), r.busy += job.busy, r.longest = std::max(r.longest, job.busy);
    r.tail = std::max(r.tail, job.tail);
  }

  // The largest one-machine bound over the touched resources, or `above` when none exceeds it (a
  // resource whose jobs, all from the latest head, could not pass it is not solved).
  Cycle solve(Cycle above = kNone) {
    Cycle best = above;
    for (int key : touched_) {
      const Reach& r = reach_[key];
      if (r.head + std::max(ceilQuotient(r.busy, uses_.units[key]), r.longest) + r.tail > best)
        best = std::max(best, preemptiveBound(jobs_[key], uses_.units[key]));
      jobs_[key].clear();
    }
    touched_.clear();
    return best;
  }

  const Problem& problem_;
  const DependenceRows& preds_;
  const DependenceRows& succ_;
  ResourceUses uses_;
  std::vector<int> stamp_;
  std::vector<Cycle> dist_;
  std::vector<int> position_;
  std::vector<std::vector<Job>> jobs_;
  struct Reach {
    Cycle head, busy, longest, tail;  // the latest head, the busy cycles, the longest job, the longest tail
  };
  std::vector<Reach> reach_;
  std::vector<int> touched_, set_;
  int generation_ = 0;
  size_t cap_ = std::numeric_limits<size_t>::max();
};

}  // namespace

Cycle criticalPath(const Problem& problem, const std::vector<Dependence>& relaxed) {
  if (problem.tasks().empty()) return 0;
  const std::vector<int> kept = keptDependences(problem, relaxed);
  const DependenceRows preds = dependenceRows(problem.dependences(), problem.tasks().size(), true, &kept);
  return longestFinish(problem, earliestStarts(problem, preds)) + problem.chip().rippleCycles;
}

LowerBound lowerBound(const Problem& problem, const std::vector<Dependence>& relaxed,
                      const std::vector<std::vector<SerialSegment>>& serial, int rounds) {
  const auto& tasks = problem.tasks();
  const auto& chip = problem.chip();
  const auto& deps = problem.dependences();
  LowerBound bound;
  if (tasks.empty()) return bound;
  const std::vector<int> kept = keptDependences(problem, relaxed);
  const DependenceRows preds = dependenceRows(deps, tasks.size(), true, &kept);
  const DependenceRows succ = dependenceRows(deps, tasks.size(), false, &kept);
  std::vector<Cycle> earliest = earliestStarts(problem, preds);
  std::vector<Cycle> tail = tails(problem, succ);
  const Cycle cp = longestFinish(problem, earliest);
  // The busiest resource: its busy cycles over its units.
  const ResourceUses uses = resourceUses(problem);
  std::vector<Cycle> load(uses.units.size(), 0);
  for (const auto& use : uses.uses) load[use.key] += use.end - use.offset;
  Cycle busiest = 0;
  for (size_t key = 0; key < load.size(); ++key) busiest = std::max(busiest, ceilQuotient(load[key], uses.units[key]));

  // The serial groups' segments that are well formed (a stale one, e.g. after a spill renumbered its
  // tasks, makes no claim).
  std::vector<std::vector<SerialSegment>> groups;
  for (const auto& group : serial) {
    groups.emplace_back();
    for (const SerialSegment& g : group) {
      const int count = static_cast<int>(tasks.size());
      if (g.first < 0 || g.last >= count || g.first > g.last || g.firstStep >= static_cast<int>(tasks[g.first].steps.size()) ||
          g.lastStep >= static_cast<int>(tasks[g.last].steps.size()))
        continue;
      groups.back().push_back(g);
    }
  }
  // Serial groups: a segment's shortest length is its longest dependence path from its first step
  // to its last (over the kept dependences inside it); its head and tail from `head` and `after`.
  auto sequenceOf = [&](const std::vector<Cycle>& head, const std::vector<Cycle>& after) {
    Cycle sequence = 0;
    std::vector<Cycle> reach(tasks.size(), kNone);
    struct Piece {
      Cycle head, length, gap, tail;
    };
    std::vector<Piece> pieces;
    std::vector<Job> jobs;
    for (const auto& group : groups) {
      if (group.empty()) continue;
      pieces.clear();
      for (const SerialSegment& g : group) {
        const auto offset = [&](int t, int k) { return tasks[t].steps[k].offset; };
        reach[g.first] = 0;  // task starts relative to the first task's
        for (int t = g.first + 1; t <= g.last; ++t) {
          Cycle r = kNone;
          for (int k = preds.begin[t]; k < preds.begin[t + 1]; ++k) {
            const Dependence& d = deps[preds.index[k]];
            if (d.from >= g.first && d.from < t && reach[d.from] != kNone) r = std::max(r, reach[d.from] + across(problem, d));
          }
          reach[t] = r;
        }
        const Cycle end = reach[g.last] != kNone ? reach[g.last] + offset(g.last, g.lastStep) : offset(g.first, g.firstStep);
        for (int t = g.first; t <= g.last; ++t) reach[t] = kNone;
        pieces.push_back({head[g.first] + offset(g.first, g.firstStep),
                          std::max<Cycle>(0, end - offset(g.first, g.firstStep)) + g.gap, g.gap,
                          after[g.last] - offset(g.last, g.lastStep)});
      }
      // The segments as jobs on one machine with heads and tails, each job its length with its gap
      // and its tail less the gap (consecutive segments are then jobs that do not overlap): Jackson's
      // preemptive schedule is the least max(finish + tail) of any preemptive schedule, so of any
      // order of the segments.
      jobs.clear();
      for (const Piece& piece : pieces) jobs.push_back({piece.head, piece.length, piece.tail - piece.gap});
      sequence = std::max(sequence, preemptiveBound(jobs, 1));
      // Any subset of the segments runs one after another: from the least head among them, their
      // lengths, to the least tail among them. Every gap but the last segment's is waited: without
      // the widest, whichever segment is last. The subsets of the latest heads and of the longest
      // tails hold the largest such sums.
      for (int sweep = 0; sweep < 2; ++sweep) {
        std::sort(pieces.begin(), pieces.end(), [&](const Piece& a, const Piece& b) {
          return sweep == 0 ? a.head > b.head : a.tail > b.tail;
        });
        Cycle length = 0, widest = 0, least = std::numeric_limits<Cycle>::max(), shortest = std::numeric_limits<Cycle>::max();
        for (const Piece& piece : pieces) {
          length += piece.length;
          widest = std::max(widest, piece.gap);
          least = std::min(least, piece.head);
          shortest = std::min(shortest, piece.tail);
          if (length > 0) sequence = std::max(sequence, least + length - widest + shortest);
        }
      }
    }
    return sequence;
  };
  // Heads of the segments' first tasks and tails of their last ones raised by what the resources can
  // have done before them and must still do after them, and every head and tail raised with them over
  // the dependences, for `rounds` rounds or until nothing rises.
  ResourceReasoning reasoning(problem, preds, succ);
  std::vector<int> firsts, lasts;
  for (const auto& group : groups)
    for (const SerialSegment& g : group) firsts.push_back(g.first), lasts.push_back(g.last);
  for (auto* list : {&firsts, &lasts}) {
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  // The work is at most kSetWork tasks per round over all the sets (but each set may keep kLeastSet).
  constexpr size_t kSetWork = size_t{1} << 18, kLeastSet = 64;
  reasoning.limitSets(std::max(kLeastSet, kSetWork / std::max<size_t>(1, firsts.size() + lasts.size())));
  std::vector<Cycle> headFloor(tasks.size(), kNone), tailFloor(tasks.size(), kNone);
  // In the first round every set is new; later, a set whose heads (tails) did not move gives nothing new.
  std::vector<char> headMoved(tasks.size(), 1), tailMoved(tasks.size(), 1);
  auto mark = [](std::vector<char>& moved, const std::vector<Cycle>& before, const std::vector<Cycle>& after) {
    for (size_t t = 0; t < before.size(); ++t) moved[t] = before[t] != after[t];
  };
  // Whether a task or any of its ancestors (forward) or descendants moved: its set may give more.
  const auto& topo = problem.topologicalOrder();
  auto spread = [&](const std::vector<char>& moved, bool forward) {
    std::vector<char> dirty = moved;
    const DependenceRows& rows = forward ? preds : succ;
    for (size_t i = 0; i < topo.size(); ++i) {
      const int t = topo[forward ? i : topo.size() - 1 - i];
      for (int k = rows.begin[t]; k < rows.begin[t + 1] && !dirty[t]; ++k) {
        const Dependence& d = deps[rows.index[k]];
        dirty[t] = dirty[forward ? d.from : d.to];
      }
    }
    return dirty;
  };
  // The rounds are skipped where the busiest resource is within 1 % of the bound from the data alone
  // (a matmul stack's planes, busy from start to end): there the sets are largest and no measured
  // shard's bound rose (a bound without them is still one).
  const Cycle dataSequence = sequenceOf(earliest, tail), plain = std::max({cp, busiest, dataSequence});
  if (100 * busiest >= 99 * plain) rounds = 0;
  for (int round = 0; round < rounds; ++round) {
    bool rose = false;
    const std::vector<char> headDirty = spread(headMoved, true), tailDirty = spread(tailMoved, false);
    for (int t : firsts)
      if (!headDirty[t]) continue;
      else if (const Cycle h = reasoning.bound(t, true, earliest, headMoved); h > earliest[t]) headFloor[t] = h, rose = true;
    std::vector<Cycle> raised = rose ? earliestStarts(problem, preds, &headFloor) : earliest;
    mark(headMoved, earliest, raised);
    earliest = std::move(raised);
    bool tailRose = false;
    for (int t : lasts)
      if (!tailDirty[t]) continue;
      else if (const Cycle q = reasoning.bound(t, false, tail, tailMoved); q > tail[t]) tailFloor[t] = q, tailRose = true;
    raised = tailRose ? tails(problem, succ, &tailFloor) : tail;
    mark(tailMoved, tail, raised);
    tail = std::move(raised);
    if (!rose && !tailRose) break;
  }
  const Cycle window = reasoning.windowBound(earliest, tail);

  const Cycle sequence = rounds > 0 ? sequenceOf(earliest, tail) : dataSequence;
  bound.serialSegments = sequence > 0 ? sequence + chip.rippleCycles : 0;
  bound.criticalPath = cp + chip.rippleCycles;
  bound.busiestResource = busiest + chip.rippleCycles;
  bound.resourceWindow = std::max(window + chip.rippleCycles, bound.busiestResource);
  return bound;
}

}  // namespace tsp::schedule
