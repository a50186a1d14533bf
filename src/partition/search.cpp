// Hybrid parallelism search: enumerate, prune on memory, screen (exhaustive or hierarchical), re-rank finalists.
#include "partition/search.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "partition/stage_partition.h"
#include "support/cancel.h"

namespace tsp::partition {

namespace {

std::vector<int> divisorsOf(std::int64_t n, std::int64_t cap) {
  std::vector<int> out;
  for (std::int64_t d = 1; d <= n && d <= cap; ++d)
    if (n % d == 0) out.push_back(static_cast<int>(d));
  return out;
}

// The tensor splits the sharding mechanism offers for this model, with their TP group sizes.
std::vector<std::pair<TensorSplit, int>> tensorSplits(const ModelProfile& profile, int maxTp, int chips) {
  std::vector<std::pair<TensorSplit, int>> out{{TensorSplit::kNone, 1}};
  const int cap = std::min(maxTp, chips);
  if (profile.hasWeightMatmul) {
    for (int t = 2; t <= cap; t *= 2) out.push_back({TensorSplit::kMegatron, t});
    for (int q = 2; q * q <= cap; q *= 2) out.push_back({TensorSplit::k2d, q * q});
  }
  if (profile.hasConv)
    for (int t = 2; t <= cap; t *= 2) out.push_back({TensorSplit::kSpatial, t});
  return out;
}

std::vector<Cycle> layerCycles(const ModelProfile& profile) {
  std::vector<Cycle> cost;
  for (const auto& layer : profile.layers) cost.push_back(layer.cycles);
  return cost;
}

// Candidates and their evaluation, with the stage splits, placements and link figures cached.
class Evaluator {
 public:
  Evaluator(const topology::Cluster& cluster, const ModelProfile& profile, std::vector<int> order)
      : cluster_(cluster), profile_(profile), order_(std::move(order)), chain_(layerCycles(profile)) {}

  Expected<const StageAssignment*> stages(int chunks) {
    auto found = stages_.find(chunks);
    if (found == stages_.end()) {
      // Chains share one DP table for every chunk count; DAGs ask METIS per count.
      if (profile_.chain && chunks >= 1 && chunks <= static_cast<int>(profile_.layers.size())) {
        found = stages_.emplace(chunks, chain_.assign(chunks)).first;
      } else {
        auto assigned = assignStages(profile_, chunks);
        if (!assigned) return assigned.error();
        found = stages_.emplace(chunks, std::move(*assigned)).first;
      }
    }
    return &found->second;
  }

  const std::vector<int>& placement(int dp, int tp, int pp) {
    const auto key = std::make_tuple(dp, tp, pp);
    auto found = placements_.find(key);
    if (found == placements_.end()) {
      auto placed = placePlan(cluster_, order_, dp, tp, pp);
      // Candidates never exceed the cluster, so placement cannot fail here.
      assert(placed.ok() && "placement of a candidate within the cluster");
      found = placements_.emplace(key, std::move(*placed)).first;
    }
    return found->second;
  }

  const CandidateLinks& links(const Candidate& c, bool exact) {
    // Screening looks at the first group only, whose chips depend on tp (and pp for the sends).
    // A training step also needs the replicas' ring (its gradient all-reduce), so its key keeps dp.
    const bool replicas = exact || profile_.training.enabled;
    const bool grid = c.split == TensorSplit::k2d;
    const auto key = std::make_tuple(replicas ? c.dp : 0, c.tp, c.pp, c.interleave > 1, exact,
                                     (c.dp == 1 && c.tp == 1 ? 1 : 0) + (grid ? 2 : 0));
    auto found = links_.find(key);
    if (found == links_.end()) {
      const int dp = replicas ? c.dp : 1;
      found = links_.emplace(key, linkFigures(cluster_, placement(dp, c.tp, c.pp), dp, c.tp, c.pp, c.interleave, exact,
                                              grid, profile_.training.enabled, &fits_))
                  .first;
    }
    return found->second;
  }

  PlanCost evaluate(const Candidate& c, bool exact) {
    const StageAssignment* s = *stages(c.pp * c.interleave);
    return evaluateCandidate(profile_, c, *s, links(c, exact), cluster_.chip(), cluster_.chipCount());
  }

 private:
  const topology::Cluster& cluster_;
  const ModelProfile& profile_;
  std::vector<int> order_;
  ChainStages chain_;
  std::map<int, StageAssignment> stages_;
  std::map<std::tuple<int, int, int>, std::vector<int>> placements_;
  std::map<std::tuple<int, int, int, bool, bool, int>, CandidateLinks> links_;
  GroupFits fits_;
};

// Evaluates a list of candidates, spread over ranks; every rank gets every result. Interrupted when
// the ranks agree to stop (gather), or, alone, when cancelRequested() cut the list short: a search
// stopped early holds only some candidates, so nothing after it can be trusted or is the same on
// every rank.
Expected<std::vector<PlanCost>> evaluateList(Evaluator& evaluator, const std::vector<Candidate>& list, bool exact,
                                             const SearchParallel& parallel) {
  std::vector<EvaluatedCandidate> mine;
  const int size = parallel.gather ? std::max(1, parallel.size) : 1;
  const int rank = size > 1 ? parallel.rank : 0;
  const auto share = static_cast<std::int64_t>(list.size() / size + (static_cast<int>(list.size() % size) > rank ? 1 : 0));
  bool stopped = false;
  for (size_t i = 0; i < list.size(); ++i)
    if (static_cast<int>(i % size) == rank) {
      if ((stopped = support::cancelRequested())) break;
      mine.push_back({static_cast<std::int64_t>(i), evaluator.evaluate(list[i], exact)});
      if (parallel.progress) parallel.progress(static_cast<std::int64_t>(mine.size()), share);
    }
  // With ranks, a rank that stopped still gathers: the gather's agreement stops every rank at once.
  std::optional<std::vector<EvaluatedCandidate>> all;
  if (size > 1) all = parallel.gather(mine);
  else if (!stopped) all = std::move(mine);
  if (!all) return support::interrupted();
  std::vector<PlanCost> out(list.size());
  for (const auto& e : *all) out[e.index] = e.cost;
  return out;
}

int rankOf(int d, int s, int t, int tp, int pp) { return (d * pp + s) * tp + t; }

}  // namespace

bool betterPlan(const std::string& objective, const RankedPlan& a, const RankedPlan& b) {
  if (objective == "latency") {
    if (a.cost.latencySeconds != b.cost.latencySeconds) return a.cost.latencySeconds < b.cost.latencySeconds;
  } else if (objective == "chips") {
    if (a.candidate.chips() != b.candidate.chips()) return a.candidate.chips() < b.candidate.chips();
    if (a.cost.throughput != b.cost.throughput) return a.cost.throughput > b.cost.throughput;
  } else if (a.cost.throughput != b.cost.throughput) {
    return a.cost.throughput > b.cost.throughput;
  }
  return a.candidate.canonical() < b.candidate.canonical();
}

Candidate smallestFittingPlan(const ModelProfile& profile, const topology::ChipSpec& chip, int maxTp) {
  const int layers = static_cast<int>(profile.layers.size());
  Candidate best;
  best.dp = 0;  // none yet
  std::map<int, StageAssignment> cache;
  ChainStages chain(layerCycles(profile));
  for (const auto& [split, tp] : tensorSplits(profile, maxTp, maxTp))
    for (int pp = 1; pp <= layers; ++pp) {
      Candidate c{split, 1, tp, pp, static_cast<int>(std::min<std::int64_t>(profile.samples, 1 << 20)), 1};
      if (best.dp != 0 && c.chips() >= best.chips()) break;
      auto found = cache.find(pp);
      if (found == cache.end()) {
        auto stages = profile.chain ? Expected<StageAssignment>(chain.assign(pp)) : assignStages(profile, pp);
        if (!stages) continue;
        found = cache.emplace(pp, std::move(*stages)).first;
      }
      if (memoryPerChip(profile, c, found->second) > allocatableSramBytes(chip)) continue;
      if (best.dp == 0 || c.chips() < best.chips() || (c.chips() == best.chips() && c.canonical() < best.canonical()))
        best = c;
      break;
    }
  return best;
}

Expected<Plan> buildPlan(const topology::Cluster& cluster, const ModelProfile& profile, const Candidate& c,
                         const std::vector<int>& order, RankedPlan* costed) {
  auto stages = assignStages(profile, c.pp * c.interleave);
  if (!stages) return stages.error();
  auto placed = placePlan(cluster, order, c.dp, c.tp, c.pp);
  if (!placed) return placed.error();
  Plan plan;
  plan.dp = c.dp;
  plan.tp = c.tp;
  plan.pp = c.pp;
  plan.microbatches = c.microbatches;
  plan.interleave = c.interleave;
  plan.split = c.split;
  const int layers = static_cast<int>(profile.layers.size());
  plan.stageFirstLayer.assign(c.pp, -1);
  for (int l = 0; l < layers; ++l) {
    const int s = stages->layerChunk[l] % c.pp;
    if (plan.stageFirstLayer[s] < 0) plan.stageFirstLayer[s] = l;
  }
  for (int s = 0; s < c.pp; ++s) {
    if (plan.stageFirstLayer[s] < 0) plan.stageFirstLayer[s] = s > 0 ? plan.stageFirstLayer[s - 1] : 0;
    plan.stageChip.push_back((*placed)[rankOf(0, s, 0, c.tp, c.pp)]);
  }
  if (!profile.chain || c.interleave > 1) plan.layerChunk = stages->layerChunk;
  if (c.dp > 1 || c.tp > 1) plan.placement = *placed;
  std::vector<Cycle> stageCycles;
  auto ranked = evaluatePlan(cluster, profile, plan, &stageCycles);
  if (!ranked) return ranked.error();
  plan.stageCycles = std::move(stageCycles);
  if (costed) *costed = *ranked;
  return plan;
}

Expected<RankedPlan> evaluatePlan(const topology::Cluster& cluster, const ModelProfile& profile, const Plan& plan,
                                  std::vector<Cycle>* stageCycles) {
  const int layers = static_cast<int>(profile.layers.size());
  const Candidate c = plan.candidate();
  if (c.pp * c.interleave > layers)
    return makeError(ExitCode::kConfig, fmt::format("plan {} has {} pipeline chunks but the model has {} layers",
                                                    c.canonical(), c.pp * c.interleave, layers));
  StageAssignment stages;
  stages.chunks = c.pp * c.interleave;
  if (!plan.layerChunk.empty()) {
    stages.layerChunk = plan.layerChunk;
  } else if (c.interleave == 1 && static_cast<int>(plan.stageFirstLayer.size()) == c.pp) {
    stages.layerChunk.assign(layers, 0);
    for (int s = 0; s < c.pp; ++s)
      for (int l = plan.stageFirstLayer[s]; l < (s + 1 < c.pp ? plan.stageFirstLayer[s + 1] : layers); ++l)
        stages.layerChunk[l] = s;
  } else {
    auto assigned = assignStages(profile, stages.chunks);
    if (!assigned) return assigned.error();
    stages = *assigned;
  }
  std::vector<int> placement = plan.placement;
  if (placement.empty()) {
    if (c.dp == 1 && c.tp == 1 && static_cast<int>(plan.stageChip.size()) == c.pp) {
      placement = plan.stageChip;
    } else {
      auto order = localityOrder(cluster);
      if (!order) return order.error();
      auto placed = placePlan(cluster, *order, c.dp, c.tp, c.pp);
      if (!placed) return placed.error();
      placement = *placed;
    }
  }
  if (static_cast<std::int64_t>(placement.size()) != std::int64_t{c.dp} * c.tp * c.pp || c.chips() > cluster.chipCount())
    return makeError(ExitCode::kDoesNotFit, fmt::format("plan {} needs {} chips; the cluster has {}", c.canonical(),
                                                        c.chips(), cluster.chipCount()));
  const auto links = linkFigures(cluster, placement, c.dp, c.tp, c.pp, c.interleave, true, c.split == TensorSplit::k2d,
                                 profile.training.enabled);
  std::vector<double> stageTimes;
  RankedPlan ranked{c, evaluateCandidate(profile, c, stages, links, cluster.chip(), cluster.chipCount(), &stageTimes),
                    true};
  if (stageCycles) {
    stageCycles->clear();
    for (double t : stageTimes) stageCycles->push_back(static_cast<Cycle>(std::llround(t)));
  }
  return ranked;
}

Expected<SearchResult> searchPlans(const topology::Cluster& cluster, const ModelProfile& profile,
                                   const SearchOptions& options,
                                   const SearchParallel& parallel) {
  SearchResult result;
  result.fallbackLayers = profile.fallbackLayers;
  result.fallbackReason = profile.fallbackReason;
  auto order = localityOrder(cluster);
  if (!order) return order.error();
  Evaluator evaluator(cluster, profile, *order);
  const int chips = cluster.chipCount();
  const int layers = static_cast<int>(profile.layers.size());
  const Bytes sram = cluster.chip().sramBytes();
  const auto dps = divisorsOf(profile.samples, chips);

  // Shapes (split, tp, pp, dp) and their (m, v) variants; a (split, tp, pp) whose memory does not
  // fit even with the most replicas and microbatches is pruned before any variant is built.
  struct Shape {
    TensorSplit split;
    int tp, pp, dp;
    std::vector<int> ms, vs;
  };
  std::vector<Shape> shapes;
  for (const auto& [split, tp] : tensorSplits(profile, options.maxTp, chips))
    for (int pp = 1; pp <= layers && tp * pp <= chips; ++pp) {
      // Thousands of depths on a large cluster: a signal ends the search here too (with ranks, the
      // runtime's next agreement stops the others at their gather).
      if (support::cancelRequested()) return support::interrupted();
      auto stages = evaluator.stages(pp);
      if (!stages) return stages.error();
      std::vector<Shape> variants;
      std::int64_t count = 0;
      for (int dp : dps) {
        if (std::int64_t{dp} * tp * pp > chips) break;
        Shape shape{split, tp, pp, dp, divisorsOf(profile.samples / dp, profile.samples), {1}};
        const TrainingConfig& training = profile.training;
        if (training.enabled && training.microbatches > 0)
          std::erase_if(shape.ms, [&](int m) { return m != training.microbatches; });
        if (shape.ms.empty()) continue;
        const bool interleaves = !training.enabled || training.schedule == PipelineSchedule::kInterleaved;
        for (int v = 2; interleaves && v <= 4 && pp > 1 && pp * v <= layers; v *= 2) shape.vs.push_back(v);
        count += static_cast<std::int64_t>(shape.ms.size() * shape.vs.size());
        variants.push_back(std::move(shape));
      }
      if (variants.empty()) continue;
      result.spaceSize += count;
      const Shape& widest = variants.back();
      const Candidate loosest{split, widest.dp, tp, pp, widest.ms.back(), 1};
      if (memoryPerChip(profile, loosest, **stages) > allocatableSramBytes(cluster.chip())) {
        result.pruned += count;
        continue;
      }
      for (auto& v : variants) shapes.push_back(std::move(v));
    }

  auto expand = [](const Shape& s) {
    std::vector<Candidate> out;
    for (int v : s.vs)
      for (int m : s.ms) out.push_back({s.split, s.dp, s.tp, s.pp, m, v});
    return out;
  };
  std::vector<RankedPlan> screened;
  auto screen = [&](const std::vector<Candidate>& list) -> Status {
    for (const auto& c : list)
      if (c.interleave > 1)
        if (auto s = evaluator.stages(c.pp * c.interleave); !s) return s.error();
    const auto costs = evaluateList(evaluator, list, false, parallel);
    if (!costs) return costs.error();
    result.evaluated += static_cast<std::int64_t>(list.size());
    for (size_t i = 0; i < list.size(); ++i)
      if ((*costs)[i].fits) screened.push_back({list[i], (*costs)[i], false});
    return {};
  };
  const std::int64_t reserve = std::min<std::int64_t>(options.finalists, options.budget / 4);
  const std::int64_t screenBudget = std::max<std::int64_t>(1, options.budget - reserve);
  const std::int64_t feasibleSpace = result.spaceSize - result.pruned;
  if (feasibleSpace <= screenBudget) {
    result.method = "exhaustive";
    std::vector<Candidate> all;
    for (const auto& s : shapes)
      for (const auto& c : expand(s)) all.push_back(c);
    if (auto s = screen(all); !s) return s.error();
  } else {
    // Hierarchical: level 1 screens each shape at one representative (m >= 4 pp, v = 1); level 2
    // expands the best shapes into every (m, v) until the budget is spent.
    result.method = "hierarchical";
    std::vector<const Shape*> levelOne;
    for (const auto& s : shapes) levelOne.push_back(&s);
    std::set<int> grid;  // pipeline depths level 1 looks at (all when the shapes fit the budget)
    for (const auto& s : shapes) grid.insert(s.pp);
    if (static_cast<std::int64_t>(levelOne.size()) > screenBudget / 2) {
      // Too many shapes: level 1 keeps pipeline depths on a geometric grid (1, 2, 3, 4, 5, 6, 7, 8,
      // 10, 12, 15, ...); level 2 fills in the depths between grid points around the best shapes.
      grid.clear();
      for (double p = 1; p <= layers; p = std::max(p + 1, std::floor(p * 1.25))) grid.insert(static_cast<int>(p));
      grid.insert(layers);
      std::vector<const Shape*> kept;
      for (const Shape* s : levelOne)
        if (grid.count(s->pp)) kept.push_back(s);
      levelOne = kept;
      if (static_cast<std::int64_t>(levelOne.size()) > screenBudget / 2) levelOne.resize(screenBudget / 2);
    }
    std::vector<Candidate> reps;
    for (const Shape* s : levelOne) {
      int m = s->ms.back();
      for (int candidate : s->ms)
        if (candidate >= 4 * s->pp) {
          m = candidate;
          break;
        }
      reps.push_back({s->split, s->dp, s->tp, s->pp, m, 1});
    }
    if (auto s = screen(reps); !s) return s.error();
    std::map<std::string, size_t> shapeOf;
    for (size_t i = 0; i < reps.size(); ++i) shapeOf[reps[i].canonical()] = i;
    // Shapes by family (split, tp, dp), in pp order: level 2's neighbourhoods.
    std::map<std::tuple<int, int, int>, std::vector<const Shape*>> family;
    for (const auto& s : shapes) family[{static_cast<int>(s.split), s.tp, s.dp}].push_back(&s);
    std::vector<RankedPlan> firstLevel = screened;
    std::sort(firstLevel.begin(), firstLevel.end(),
              [&](const RankedPlan& a, const RankedPlan& b) { return betterPlan(options.objective, a, b); });
    std::set<std::string> seen;
    for (const auto& c : reps) seen.insert(c.canonical());
    bool spent = false;
    for (const auto& r : firstLevel) {
      const Shape* rep = levelOne[shapeOf[r.candidate.canonical()]];
      // The representative's shape, then the depths between its grid neighbours, nearest first.
      auto next = grid.upper_bound(rep->pp);
      auto prev = grid.lower_bound(rep->pp);
      const int lo = prev == grid.begin() ? 1 : *std::prev(prev) + 1;
      const int hi = next == grid.end() ? layers : *next - 1;
      std::vector<const Shape*> around;
      for (const Shape* s : family[{static_cast<int>(rep->split), rep->tp, rep->dp}])
        if (s->pp >= lo && s->pp <= hi) around.push_back(s);
      std::stable_sort(around.begin(), around.end(), [&](const Shape* a, const Shape* b) {
        return std::abs(a->pp - rep->pp) < std::abs(b->pp - rep->pp);
      });
      for (const Shape* shape : around) {
        std::vector<Candidate> more;
        for (const auto& c : expand(*shape))
          if (!seen.count(c.canonical())) more.push_back(c);
        if (result.evaluated + static_cast<std::int64_t>(more.size()) > screenBudget) {
          spent = true;
          break;
        }
        for (const auto& c : more) seen.insert(c.canonical());
        if (auto s = screen(more); !s) return s.error();
      }
      if (spent) break;
    }
  }

  if (screened.empty()) {
    const int widest = std::max(options.maxTp, kWidestSplit);
    const bool widen = options.widen && profile.figuresUpTo < widest;
    const Candidate smallest =
        smallestFittingPlan(widen ? options.widen(profile) : profile, cluster.chip(), widest);
    if (smallest.dp == 0)
      return makeError(ExitCode::kDoesNotFit,
                       fmt::format("the model does not fit in SRAM ({} MiB per chip) on any plan: one layer's share "
                                   "is too large even split {} ways",
                                   sram >> 20, widest));
    if (smallest.chips() <= chips && smallest.tp > options.maxTp)
      return makeError(ExitCode::kDoesNotFit,
                       fmt::format("the model does not fit in SRAM ({} MiB per chip) on any plan with tp up to {} "
                                   "(parallelism.max_tp): the smallest plan that fits, {} on {} chips, needs tp {}",
                                   sram >> 20, options.maxTp, smallest.canonical(), smallest.chips(), smallest.tp));
    return makeError(ExitCode::kDoesNotFit,
                     fmt::format("the model does not fit in SRAM ({} MiB per chip) on any plan of the cluster's {} "
                                 "chips: the smallest chip count that would fit is {} ({})",
                                 sram >> 20, chips, smallest.chips(), smallest.canonical()));
  }
  auto better = [&](const RankedPlan& a, const RankedPlan& b) { return betterPlan(options.objective, a, b); };
  std::sort(screened.begin(), screened.end(), better);

  // Finalists: contention of every group that communicates at once; repeat until the best is exact.
  std::int64_t finalBudget = std::max<std::int64_t>(1, options.budget - result.evaluated);
  while (finalBudget > 0 && !screened.empty() && !screened.front().exact) {
    std::vector<Candidate> list;
    std::vector<size_t> where;
    for (size_t i = 0; i < screened.size() && static_cast<std::int64_t>(list.size()) < std::min<std::int64_t>(finalBudget, options.finalists); ++i)
      if (!screened[i].exact) {
        list.push_back(screened[i].candidate);
        where.push_back(i);
      }
    const auto costs = evaluateList(evaluator, list, true, parallel);
    if (!costs) return costs.error();
    result.evaluated += static_cast<std::int64_t>(list.size());
    finalBudget -= static_cast<std::int64_t>(list.size());
    for (size_t k = 0; k < list.size(); ++k) {
      screened[where[k]].cost = (*costs)[k];
      screened[where[k]].exact = true;
    }
    screened.erase(std::remove_if(screened.begin(), screened.end(), [](const RankedPlan& r) { return !r.cost.fits; }),
                   screened.end());
    std::sort(screened.begin(), screened.end(), better);
  }
  if (screened.empty()) return makeError(ExitCode::kDoesNotFit, "no plan fits once every group's traffic is counted");
  if (static_cast<int>(screened.size()) > options.keep) screened.resize(options.keep);
  result.ranked = screened;

  const Candidate& bestCandidate = screened.front().candidate;
  auto best = buildPlan(cluster, profile, bestCandidate, *order, &result.bestCost);
  if (!best) return best.error();
  result.best = *best;
  auto placement = refinePlacement(cluster, profile, result.best, *order);
  if (!placement) return placement.error();
  result.placement = *placement;
  return result;
}

PlanTraffic planTraffic(const ModelProfile& profile, const Plan& plan) {
  const Candidate c = plan.candidate();
  const double t = c.tp, q = std::round(std::sqrt(t));
  double ring = 0;
  for (const auto& layer : profile.layers) {
    if (c.split == TensorSplit::kMegatron)
      ring += 2 * (t - 1) / t * static_cast<double>(layer.allReduceBytes) + (t - 1) / t * static_cast<double>(layer.allGatherBytes);
    else if (c.split == TensorSplit::k2d)
      ring += 2 * (q - 1) / q * static_cast<double>(layer.matmulOutBytes) / q;
    else if (c.split == TensorSplit::kSpatial)
      ring += static_cast<double>(layer.haloBytes);
  }
  PlanTraffic traffic;
  traffic.ringEdgeBytes = static_cast<Bytes>(ring / (static_cast<double>(c.dp) * c.pp));
  traffic.stageBytes.assign(c.pp, 0);
  const auto chunks = plan.layerChunks(static_cast<int>(profile.layers.size()));
  for (const auto& e : crossingEdges(profile, chunks)) {
    // Each TP rank sends what it holds: all of a replicated activation, its share of a split one.
    const bool replicated = c.split == TensorSplit::kMegatron && !profile.layers[e.from].outputSplitAt(c.tp);
    const Bytes perRank = e.bytes / (std::int64_t{c.dp} * (replicated ? 1 : c.tp));
    for (int s = 0; s + 1 < c.pp; ++s) {
      const int from = chunks[e.from] % c.pp, to = chunks[e.to] % c.pp;
      if (from <= s && s < to) traffic.stageBytes[s] += perRank;
    }
  }
  return traffic;
}

PlacementReport reportPlanPlacement(const topology::Cluster& cluster, const ModelProfile& profile, const Plan& plan) {
  const PlanTraffic traffic = planTraffic(profile, plan);
  const std::vector<int>& placement = plan.placement.empty() ? plan.stageChip : plan.placement;
  const bool grid = plan.split == TensorSplit::k2d;
  PlacementReport report =
      reportPlacement(cluster, placement, plan.dp, plan.tp, plan.pp, traffic.ringEdgeBytes, traffic.stageBytes, grid);
  report.traffic = placementTraffic(
      cluster, placement, communicationGraph(plan.dp, plan.tp, plan.pp, traffic.ringEdgeBytes, traffic.stageBytes, grid));
  report.method = plan.placement.empty() ? "pipeline path" : "locality order";
  return report;
}

Expected<PlacementReport> refinePlacement(const topology::Cluster& cluster, const ModelProfile& profile, Plan& plan,
                                          const std::vector<int>& order) {
  PlacementReport report = reportPlanPlacement(cluster, profile, plan);
  if (plan.placement.empty()) return report;
  const PlanTraffic traffic = planTraffic(profile, plan);
  const auto graph = communicationGraph(plan.dp, plan.tp, plan.pp, traffic.ringEdgeBytes, traffic.stageBytes,
                                        plan.split == TensorSplit::k2d);
  // The same chips as the locality placement, ranks mapped onto them by the communication graph.
  std::vector<int> chips = plan.placement;
  std::sort(chips.begin(), chips.end(), [&](int a, int b) {
    return std::find(order.begin(), order.end(), a) < std::find(order.begin(), order.end(), b);
  });
  auto mapped = mapCommunicationGraph(graph, chips);
  if (!mapped) return mapped.error();
  if (placementTraffic(cluster, *mapped, graph) < report.traffic) {
    plan.placement = *mapped;
    for (int s = 0; s < plan.pp; ++s) plan.stageChip[s] = plan.placement[s * plan.tp];
    report = reportPlanPlacement(cluster, profile, plan);
    report.method = "metis (communication graph)";
  }
  return report;
}

}  // namespace tsp::partition
