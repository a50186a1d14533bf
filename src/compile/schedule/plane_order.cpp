// The order of each MXM plane's runs, chosen from a schedule in which the runs are not chained.
#include "compile/schedule/plane_order.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>

namespace tsp::schedule {

namespace {

auto key(const Dependence& d) { return std::tie(d.from, d.fromStep, d.to, d.toStep, d.latency); }

// Removes one occurrence of each of `chain` from the problem's dependences.
void removeDependences(Problem& problem, std::vector<Dependence> chain) {
  auto& deps = problem.mutableDependences();
  // The chain added last (every move below adds one and takes it back): it is the tail. (Which of
  // two equal dependences goes does not matter: the problem is the same set of constraints.)
  if (chain.size() <= deps.size() && std::equal(chain.begin(), chain.end(), deps.end() - static_cast<std::ptrdiff_t>(chain.size()))) {
    deps.resize(deps.size() - chain.size());
    return;
  }
  std::sort(chain.begin(), chain.end(), [](const Dependence& a, const Dependence& b) { return key(a) < key(b); });
  std::vector<char> used(chain.size(), 0);
  deps.erase(std::remove_if(deps.begin(), deps.end(),
                            [&](const Dependence& d) {
                              auto it = std::lower_bound(chain.begin(), chain.end(), d, [](const Dependence& a, const Dependence& b) {
                                return key(a) < key(b);
                              });
                              for (; it != chain.end() && *it == d; ++it) {
                                const size_t i = static_cast<size_t>(it - chain.begin());
                                if (!used[i]) return used[i] = 1, true;
                              }
                              return false;
                            }),
             deps.end());
}

void addDependences(Problem& problem, const std::vector<Dependence>& chain) {
  for (const auto& d : chain) problem.addDependence(d);
}

}  // namespace

std::vector<Dependence> planeChain(const Problem& problem, const std::vector<lower::PlaneRun>& runs) {
  std::vector<Dependence> chain;
  for (size_t j = 1; j < runs.size(); ++j) {
    const int last = runs[j - 1].lastCompute;
    const isa::Instruction& pc = problem.tasks()[last].steps[1].inst;
    chain.push_back({last, 1, runs[j].firstInstall, 0, 1});
    chain.push_back({last, 1, runs[j].firstCompute, 1, Cycle{pc.repeat} * pc.interval});
  }
  return chain;
}

std::vector<Dependence> planeChains(const Problem& problem, const std::vector<std::vector<lower::PlaneRun>>& planes) {
  std::vector<Dependence> chain;
  for (const auto& runs : planes) {
    const auto c = planeChain(problem, runs);
    chain.insert(chain.end(), c.begin(), c.end());
  }
  return chain;
}

std::vector<std::vector<SerialSegment>> planeSegments(const Problem& problem, const std::vector<std::vector<lower::PlaneRun>>& planes) {
  std::vector<std::vector<SerialSegment>> groups;
  for (const auto& runs : planes) {
    // From the first install to the last compute's issue (the next install follows it), and from the
    // first compute to the last one's issue (the next compute follows its stream): both the chain's.
    std::vector<SerialSegment> installs, computes;
    for (const auto& run : runs) {
      installs.push_back({run.firstInstall, 0, run.lastCompute, 1, 1});
      const auto& steps = problem.tasks()[run.lastCompute].steps;
      const Cycle stream = steps.size() > 1 ? Cycle{steps[1].inst.repeat} * steps[1].inst.interval : 1;
      computes.push_back({run.firstCompute, 1, run.lastCompute, 1, stream});
    }
    groups.push_back(std::move(installs));
    groups.push_back(std::move(computes));
  }
  return groups;
}

void setPlaneOrder(lower::LoweredShard& shard, std::vector<std::vector<lower::PlaneRun>> planes) {
  removeDependences(shard.problem, planeChains(shard.problem, shard.planeRuns));
  addDependences(shard.problem, planeChains(shard.problem, planes));
  shard.planeRuns = std::move(planes);
}

bool nearBusiestPlane(const lower::LoweredShard& shard, Cycle makespan) {
  return static_cast<double>(makespan) <= 1.02 * static_cast<double>(shard.matmulLowerBound);
}

Expected<bool> orderPlaneRuns(lower::LoweredShard& shard, const Schedule& listed, const Options& options) {
  Problem& problem = shard.problem;
  auto chainOf = [&](const std::vector<std::vector<lower::PlaneRun>>& planes) { return planeChains(problem, planes); };
  // A shard of a multi-chip plan keeps the lowering's order: when its sends leave matters to the
  // cluster schedule, not the list makespan alone.
  for (const auto& task : problem.tasks())
    for (const auto& step : task.steps)
      if (step.inst.op == isa::Opcode::kC2cSend || step.inst.op == isa::Opcode::kC2cReceive) return false;
  if (nearBusiestPlane(shard, listed.makespan)) return false;
  const std::vector<Dependence> original = chainOf(shard.planeRuns);
  if (original.empty()) return false;
  const std::vector<Dependence> asLowered = problem.dependences();
  Options listOptions = options;
  listOptions.annealMoves = 0;
  // The list schedule of the problem chained in the lowering's order is the one to beat.
  const Schedule* base = &listed;
  removeDependences(problem, original);
  // Relaxed schedules: the seed's priority, and the critical path alone.
  std::vector<std::vector<std::vector<lower::PlaneRun>>> candidates;
  for (const double beta : {options.beta, 0.0}) {
    Options relaxedOptions = listOptions;
    relaxedOptions.beta = beta;
    relaxedOptions.gamma = beta == 0.0 ? 0.0 : options.gamma;
    if (!problem.check()) break;
    const auto relaxed = scheduleList(problem, relaxedOptions);
    if (!relaxed) continue;
    // Runs by the relaxed start of their first compute, and by that of their last one.
    for (const bool byLast : {false, true}) {
      auto planes = shard.planeRuns;
      for (auto& runs : planes)
        std::stable_sort(runs.begin(), runs.end(), [&](const lower::PlaneRun& a, const lower::PlaneRun& b) {
          return byLast ? relaxed->start[a.lastCompute] < relaxed->start[b.lastCompute]
                        : relaxed->start[a.firstCompute] < relaxed->start[b.firstCompute];
        });
      if (std::find(candidates.begin(), candidates.end(), planes) == candidates.end())
        candidates.push_back(std::move(planes));
    }
  }
  Cycle best = base->makespan;
  std::vector<std::vector<lower::PlaneRun>> chosen = shard.planeRuns;
  for (const auto& planes : candidates) {
    const auto chain = chainOf(planes);
    addDependences(problem, chain);
    if (problem.checkDependences())
      if (const auto s = scheduleList(problem, listOptions); s && s->makespan < best) {
        best = s->makespan;
        chosen = planes;
      }
    removeDependences(problem, chain);
  }
  // Then moves of one run to a nearby place in its plane's order, kept when the list makespan drops.
  std::vector<Dependence> current = chainOf(chosen);
  addDependences(problem, current);
  std::mt19937_64 random(options.seed ^ 0x9e3779b97f4a7c15ULL);
  const std::int64_t moves =
      std::min(options.planeOrderMoves, options.planeOrderWork / std::max<std::int64_t>(1, static_cast<std::int64_t>(problem.tasks().size())));
  for (std::int64_t move = 0; move < moves; ++move) {
    const size_t p = random() % chosen.size();
    auto& runs = chosen[p];
    if (runs.size() < 2) continue;
    const size_t from = random() % runs.size();
    const std::int64_t shift = static_cast<std::int64_t>(random() % 8) - 4;
    const size_t to = static_cast<size_t>(std::clamp<std::int64_t>(static_cast<std::int64_t>(from) + (shift >= 0 ? shift + 1 : shift), 0,
                                                                     static_cast<std::int64_t>(runs.size()) - 1));
    if (to == from) continue;
    auto tried = chosen;
    auto& t = tried[p];
    const lower::PlaneRun run = t[from];
    t.erase(t.begin() + static_cast<std::ptrdiff_t>(from));
    t.insert(t.begin() + static_cast<std::ptrdiff_t>(to), run);
    const auto chain = chainOf(tried);
    removeDependences(problem, current);
    addDependences(problem, chain);
    if (problem.checkDependences())
      if (const auto s = scheduleList(problem, listOptions); s && s->makespan < best) {
        best = s->makespan;
        chosen = std::move(tried);
        current = chain;
        continue;
      }
    removeDependences(problem, chain);
    addDependences(problem, current);
  }
  if (best == listed.makespan) {  // nothing better: the problem as lowered, dependences in their order
    problem.mutableDependences() = asLowered;
    if (auto s = problem.check(); !s) return s.error();
    return false;
  }
  shard.planeRuns = std::move(chosen);
  if (auto s = problem.check(); !s) return s.error();
  return true;
}

}  // namespace tsp::schedule
