// The plan a run simulates: a plan file, the config's fixed plan or the search over the ranks.
#include "runtime/plan_choice.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <type_traits>

#include <fmt/format.h>

#include "compile/frontend/builtin_models.h"
#include "partition/plan_shards.h"
#include "partition/training_cost.h"
#include "runtime/shared_compile.h"

namespace tsp::runtime {

namespace {

// Every rank's evaluated candidates, gathered on every rank (the search itself has no MPI).
std::vector<partition::EvaluatedCandidate> gatherCandidates(MPI_Comm comm,
                                                            const std::vector<partition::EvaluatedCandidate>& mine) {
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  static_assert(std::is_trivially_copyable_v<partition::EvaluatedCandidate>, "gathered as bytes");
  const int bytes = static_cast<int>(mine.size() * sizeof(partition::EvaluatedCandidate));
  std::vector<int> counts(ranks), offsets(ranks, 0);
  MPI_Allgather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  for (int r = 1; r < ranks; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<partition::EvaluatedCandidate> all((offsets.back() + counts.back()) / sizeof(partition::EvaluatedCandidate));
  MPI_Allgatherv(mine.data(), bytes, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, comm);
  return all;
}

// A plan's factors and split, as the search names candidates ("dp1-tp8-pp2-m4-v1, megatron split").
std::string factorsName(const partition::Candidate& c) {
  return c.tp > 1 ? fmt::format("{}, {} split", c.canonical(), partition::tensorSplitName(c.split)) : c.canonical();
}

// The first entry where two lists differ (a missing entry counts as a difference), or npos.
size_t firstDifference(const std::vector<int>& a, const std::vector<int>& b) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i)
    if (i >= a.size() || i >= b.size() || a[i] != b[i]) return i;
  return std::string::npos;
}

// The first way the programs' plan differs from the one asked for, as (what the programs have, what
// was asked), or empty strings when they are the same plan.
std::pair<std::string, std::string> planDifference(const partition::Plan& programs, const partition::Plan& asked,
                                                   int layers) {
  if (factorsName(programs.candidate()) != factorsName(asked.candidate()))
    return {"plan " + factorsName(programs.candidate()), "plan " + factorsName(asked.candidate())};
  auto entry = [](const std::vector<int>& v, size_t i) { return i < v.size() ? fmt::format("{}", v[i]) : "none"; };
  if (size_t i = firstDifference(programs.stageFirstLayer, asked.stageFirstLayer); i != std::string::npos)
    return {fmt::format("stage {} starting at layer {}", i, entry(programs.stageFirstLayer, i)),
            fmt::format("stage {} starting at layer {}", i, entry(asked.stageFirstLayer, i))};
  if (size_t i = firstDifference(programs.stageChip, asked.stageChip); i != std::string::npos)
    return {fmt::format("stage {} on chip {}", i, entry(programs.stageChip, i)),
            fmt::format("stage {} on chip {}", i, entry(asked.stageChip, i))};
  const auto programsChunks = programs.layerChunks(layers), askedChunks = asked.layerChunks(layers);
  if (size_t i = firstDifference(programsChunks, askedChunks); i != std::string::npos)
    return {fmt::format("layer {} in chunk {}", i, entry(programsChunks, i)),
            fmt::format("layer {} in chunk {}", i, entry(askedChunks, i))};
  if (size_t i = firstDifference(programs.placement, asked.placement); i != std::string::npos)
    return {fmt::format("rank {} on chip {}", i, entry(programs.placement, i)),
            fmt::format("rank {} on chip {}", i, entry(asked.placement, i))};
  return {};
}

}  // namespace

std::string requestedPlanFile(const RunConfig& config, const RunOptions& options) {
  std::string file = options.planFile && *options.planFile != "auto" ? *options.planFile : "";
  if (file.empty() && !options.planFile) file = config.parallelism.planFile;
  return file;
}

Status checkProgramsPlan(const RunConfig& config, const RunOptions& options, const partition::Plan& plan,
                         const std::string& dir, int layers) {
  const auto& parallelism = config.parallelism;
  if (const std::string file = requestedPlanFile(config, options); !file.empty()) {
    auto asked = partition::loadPlanFile(file);
    if (!asked) return asked.error();
    if (auto [have, want] = planDifference(plan, *asked, layers); !have.empty())
      return configError({file, 0, 0, ""}, fmt::format("the programs in {} were compiled for {}; this plan file has {}",
                                                       dir, have, want));
    return {};
  }
  if (parallelism.plan != "fixed" || options.planFile) return {};  // plan auto: the programs' plan is the search's
  // A fixed plan gives the factors; its stages come from the pipeline planner (pp 0: one stage per chip).
  const partition::Candidate asked{parallelism.split, parallelism.dp, parallelism.tp,
                                   parallelism.pp > 0 ? parallelism.pp : plan.pp, parallelism.microbatches,
                                   parallelism.interleave};
  partition::Candidate have = plan.candidate();
  if (asked.tp == 1) have.split = asked.split;  // a plan without tensor parallelism splits nothing
  if (factorsName(have) != factorsName(asked))
    return configError(parallelism.planWhere, fmt::format("the programs in {} were compiled for plan {}; the config's "
                                                          "fixed plan is {}",
                                                          dir, factorsName(plan.candidate()), factorsName(asked)));
  return {};
}

Expected<PlanChoice> choosePlan(const RunConfig& config, const RunOptions& options, const ir::Graph& graph,
                                MPI_Comm comm, CancelWatch& cancel, PhaseProgress& progress) {
  const topology::Cluster& cluster = *config.cluster;
  const auto& parallelism = config.parallelism;
  PlanChoice choice;
  choice.planFile = requestedPlanFile(config, options);
  std::optional<partition::Plan> filePlan;
  if (!choice.planFile.empty()) {
    auto plan = partition::loadPlanFile(choice.planFile);
    if (!plan) return plan.error();
    filePlan = std::move(*plan);
  }
  // The widest TP group any plan of this run is costed at: the search's, a fixed plan's or the file's.
  // A given plan (the file's or a fixed one) is costed at its own split and width only, so the
  // compiler measures that width alone; a search measures every width it tries.
  const int costedTp = std::max({std::min(parallelism.maxTp, cluster.chipCount()), parallelism.tp,
                                 filePlan ? filePlan->tp : 1});
  const partition::CostedWidths costed =
      filePlan ? partition::planWidths(filePlan->split, filePlan->tp, costedTp)
      : parallelism.plan == "fixed" ? partition::planWidths(parallelism.split, parallelism.tp, costedTp)
                                    : partition::searchedWidths(costedTp);
  auto profile = partition::profileModel(graph, cluster.chip(), frontend::samplesPerIteration(config.model, graph),
                                         [&](std::int64_t done, std::int64_t total) {
                                           progress.update(done, total, "layer compiles profiled");
                                         },
                                         costed, sharedLayerCompiler(comm));
  if (!profile) return profile.error();
  if (auto s = partition::applyTraining(*profile, graph, config.training, &cluster.chip()); !s) return s.error();
  choice.training = config.training;
  const support::ProgressFn layersEstimated = [&](std::int64_t done, std::int64_t total) {
    progress.update(done, total, "layers estimated");
  };
  if (filePlan) {
    if (auto s = partition::checkPlan(*filePlan, static_cast<int>(profile->layers.size()), cluster, choice.planFile);
        !s)
      return s.error();
    choice.plan = *filePlan;
  } else if (parallelism.plan != "fixed" && !options.planFile && config.simulation.mode == "functional" &&
             !options.searchOnly && !graph.ops().empty()) {
    // Functional mode executes pure pipelines only: plan auto is the pipeline over the chips.
    auto plan = partition::planPipeline(graph, cluster, parallelism, layersEstimated);
    if (!plan) return plan.error();
    choice.plan = *plan;
  } else if (parallelism.plan == "fixed" && !options.planFile) {
    const partition::Candidate c{parallelism.split, parallelism.dp, parallelism.tp,
                                 parallelism.pp > 0 ? parallelism.pp : 1, parallelism.microbatches,
                                 parallelism.interleave};
    if (c.dp == 1 && c.tp == 1 && c.microbatches == 1 && c.interleave == 1) {
      auto plan = partition::planPipeline(graph, cluster, parallelism, layersEstimated);
      if (!plan) return plan.error();
      choice.plan = *plan;
    } else {
      auto order = partition::localityOrder(cluster);
      if (!order) return order.error();
      auto plan = partition::buildPlan(cluster, *profile, c, *order);
      if (!plan) return plan.error();
      choice.plan = *plan;
      auto placement = partition::refinePlacement(cluster, *profile, choice.plan, *order);
      if (!placement) return placement.error();
      choice.placement = *placement;
    }
  } else {
    partition::SearchOptions search;
    search.objective = parallelism.objective;
    search.budget = parallelism.searchBudget;
    search.maxTp = parallelism.maxTp;
    search.widen = [&](const partition::ModelProfile& costed) {
      partition::ModelProfile wide = costed;
      partition::widenProfile(graph, cluster.chip(), wide);
      return wide;
    };
    partition::SearchParallel parallel;
    MPI_Comm_rank(comm, &parallel.rank);
    MPI_Comm_size(comm, &parallel.size);
    parallel.progress = [&](std::int64_t done, std::int64_t total) {
      progress.update(done, total, "candidates evaluated");
    };
    if (parallel.size > 1)
      parallel.gather = [comm, &cancel](const std::vector<partition::EvaluatedCandidate>& mine)
          -> std::optional<std::vector<partition::EvaluatedCandidate>> {
        // Stopping: every rank's search ends at this gather, interrupted.
        if (cancel.agree()) return std::nullopt;
        return gatherCandidates(comm, mine);
      };
    auto result = partition::searchPlans(cluster, *profile, search, parallel);
    if (!result) return result.error();
    choice.search = std::move(*result);
    choice.plan = choice.search->best;
  }
  if (choice.search) choice.placement = choice.search->placement;
  else if (choice.placement.method.empty()) choice.placement = partition::reportPlanPlacement(cluster, *profile, choice.plan);
  // The plan carries the cost model's stage times, whichever way it was made.
  std::vector<Cycle> stageCycles;
  if (!choice.search) {
    auto given = partition::evaluatePlan(cluster, *profile, choice.plan, &stageCycles);
    if (!given) return given.error();
    choice.given = *given;
    choice.runPrediction = *given;
    choice.plan.stageCycles = stageCycles;
  } else {
    choice.runPrediction = choice.search->bestCost;  // buildPlan's evaluatePlan, stage cycles in the plan
  }
  choice.profile = std::make_shared<const partition::ModelProfile>(std::move(*profile));
  return choice;
}

Expected<partition::Plan> nextRankedPlan(const topology::Cluster& cluster, PlanChoice& choice, size_t& next,
                                         const std::function<bool(const partition::Candidate&)>& skip) {
  auto order = partition::localityOrder(cluster);
  if (!order) return order.error();
  const auto& ranked = choice.search->ranked;
  for (; next < ranked.size(); ++next) {
    if (skip && skip(ranked[next].candidate)) continue;
    auto plan = partition::buildPlan(cluster, *choice.profile, ranked[next].candidate, *order);
    if (!plan || plan->canonical() == choice.plan.canonical()) continue;
    auto placement = partition::refinePlacement(cluster, *choice.profile, *plan, *order);
    if (!placement) return placement.error();
    choice.placement = *placement;
    choice.runPrediction = ranked[next];
    ++next;
    return *plan;
  }
  return makeError(ExitCode::kDoesNotFit, "no further ranked plan");
}

std::vector<SearchPlanRow> searchRows(const std::vector<partition::RankedPlan>& ranked) {
  std::vector<SearchPlanRow> rows;
  for (size_t i = 0; i < ranked.size(); ++i) {
    const auto& r = ranked[i];
    SearchPlanRow row{};
    row.rank = static_cast<std::int32_t>(i);
    std::snprintf(row.plan, sizeof row.plan, "%s", r.candidate.canonical().c_str());
    std::snprintf(row.split, sizeof row.split, "%s", partition::tensorSplitName(r.candidate.split));
    row.dp = r.candidate.dp;
    row.tp = r.candidate.tp;
    row.pp = r.candidate.pp;
    row.microbatches = r.candidate.microbatches;
    row.interleave = r.candidate.interleave;
    row.chips = r.candidate.chips();
    row.iterationCycles = r.cost.iterationCycles;
    row.throughputPerSecond = r.cost.throughput;
    row.latencySeconds = r.cost.latencySeconds;
    row.memoryBytes = r.cost.memoryPerChip;
    row.bubbleFraction = r.cost.bubbleFraction;
    row.commShare = r.cost.commShare;
    row.feasible = r.cost.fits ? 1 : 0;
    row.exact = r.exact ? 1 : 0;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace tsp::runtime
