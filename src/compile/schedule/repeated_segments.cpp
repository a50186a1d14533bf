// A shard's repeated layers: its tasks cut at layer boundaries, and the
// segments that repeat one another.
#include "compile/schedule/repeated_segments.h"

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>

namespace tsp::schedule {

using topology::UnitKind;

namespace {

void put(std::string &key, std::int64_t v) {
  key.append(reinterpret_cast<const char *>(&v), sizeof v);
}

} // namespace

int ShardSegments::distinct() const {
  int n = 0;
  for (int s = 0; s < count(); ++s)
    n += representative[s] == s;
  return n;
}

std::string
segmentTaskKey(const Problem &problem,
               const std::vector<std::vector<lower::PlaneRun>> &planeRuns,
               int begin, int end) {
  std::string key;
  const auto &chip = problem.chip();
  const int mxmFirst = chip.firstUnit(UnitKind::kMxm);
  // A unit by its kind (an MXM unit by its role, install or compute): which MEM
  // slice, plane, SXM hemisphere or ALU group a layer's step uses is where the
  // lowering placed it in the whole shard.
  const auto unitKey = [&](int unit) -> std::int64_t {
    const UnitKind kind = problem.units()[unit].kind;
    return kind == UnitKind::kMxm ? 100 + (unit - mxmFirst) % 2
                                  : static_cast<std::int64_t>(kind);
  };
  for (int t = begin; t < end; ++t) {
    const Task &task = problem.tasks()[t];
    put(key, -1);
    put(key, task.release);
    put(key, task.deadline);
    put(key, task.untimed);
    for (const Step &s : task.steps) {
      const isa::Instruction &i = s.inst;
      for (std::int64_t v :
           {unitKey(i.unit), std::int64_t{static_cast<int>(i.op)},
            std::int64_t{static_cast<int>(i.func)},
            std::int64_t{static_cast<int>(i.sxm)}, std::int64_t{i.timingOnly},
            std::int64_t{i.repeat}, std::int64_t{i.interval},
            std::int64_t{i.stride}, std::int64_t{i.port},
            std::int64_t{s.producer}, std::int64_t{s.producer2},
            std::int64_t{s.follows}, s.followGap, std::bit_cast<std::int64_t>(s.linkSpacing), s.linkFrom})
        put(key, v);
    }
  }
  put(key, -2);
  std::vector<std::tuple<int, int, int>> runs;
  for (const auto &plane : planeRuns)
    for (const lower::PlaneRun &run : plane)
      if (run.firstInstall >= begin && run.firstInstall < end)
        runs.emplace_back(run.firstInstall - begin, run.firstCompute - begin,
                          run.lastCompute - begin);
  std::sort(runs.begin(), runs.end());
  for (const auto &[install, first, last] : runs)
    for (std::int64_t v : {install, first, last})
      put(key, v);
  return key;
}

ShardSegments shardSegments(const lower::LoweredShard &shard) {
  ShardSegments segments;
  const auto &tasks = shard.problem.tasks();
  const int n = static_cast<int>(tasks.size());
  int layer = -1;
  for (int t = 0; t < n; ++t) {
    const int origin = tasks[t].origin;
    const int l =
        origin >= 0 && static_cast<size_t>(origin) < shard.origins.size()
            ? shard.origins[origin].layer
            : -1;
    if (t == 0 || (origin >= 0 && l != layer)) {
      segments.begin.push_back(t);
      layer = l;
    }
  }
  segments.begin.push_back(n);
  // A plane run that crosses a cut keeps its tasks in one segment (a run is one
  // op's, so this is a guard): the cut moves past the run's last compute.
  for (const auto &runs : shard.planeRuns)
    for (const auto &run : runs) {
      const int first =
          std::min({run.firstInstall, run.firstCompute, run.lastCompute});
      const int last =
          std::max({run.firstInstall, run.firstCompute, run.lastCompute});
      for (size_t s = 1; s + 1 < segments.begin.size(); ++s)
        if (segments.begin[s] > first && segments.begin[s] <= last)
          segments.begin[s] = last + 1;
    }
  segments.begin.erase(
      std::unique(segments.begin.begin(), segments.begin.end()),
      segments.begin.end());
  for (size_t s = 1; s < segments.begin.size(); ++s)
    segments.begin[s] = std::max(segments.begin[s], segments.begin[s - 1]);
  segments.begin.erase(
      std::unique(segments.begin.begin(), segments.begin.end()),
      segments.begin.end());
  std::map<std::string, int> first;
  for (size_t s = 0; s + 1 < segments.begin.size(); ++s) {
    const std::string key =
        segmentTaskKey(shard.problem, shard.planeRuns, segments.begin[s],
                       segments.begin[s + 1]);
    segments.representative.push_back(
        first.try_emplace(key, static_cast<int>(s)).first->second);
  }
  return segments;
}

std::unique_ptr<lower::LoweredShard>
segmentShard(const lower::LoweredShard &shard, int begin, int end) {
  const Problem &whole = shard.problem;
  auto sub = std::make_unique<lower::LoweredShard>(whole.chip());
  for (int t = begin; t < end; ++t)
    sub->problem.addTask(whole.tasks()[t]);
  for (const Dependence &d : whole.dependences())
    if (d.from >= begin && d.from < end && d.to >= begin && d.to < end)
      sub->problem.addDependence(
          {d.from - begin, d.fromStep, d.to - begin, d.toStep, d.latency});
  sub->problem.finalize();
  const auto &chip = whole.chip();
  std::vector<Cycle> planeBusy(static_cast<size_t>(chip.mxmPlanes), 0);
  for (int t = begin; t < end; ++t)
    for (const auto &s : whole.tasks()[t].steps)
      if (s.inst.op == isa::Opcode::kMxmCompute)
        planeBusy[static_cast<size_t>(
            (s.inst.unit - chip.firstUnit(UnitKind::kMxm)) / 2)] +=
            Cycle{s.inst.repeat} * s.inst.interval;
  sub->matmulLowerBound =
      planeBusy.empty() ? 0
                        : *std::max_element(planeBusy.begin(), planeBusy.end());
  sub->planeRuns.resize(shard.planeRuns.size());
  for (size_t p = 0; p < shard.planeRuns.size(); ++p)
    for (const lower::PlaneRun &run : shard.planeRuns[p])
      if (run.firstInstall >= begin && run.firstInstall < end)
        sub->planeRuns[p].push_back({run.firstInstall - begin,
                                     run.firstCompute - begin,
                                     run.lastCompute - begin});
  sub->origins = shard.origins;
  return sub;
}

} // namespace tsp::schedule
