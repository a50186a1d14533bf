// The plan a run simulates: a plan file, the config's fixed plan or the search over the ranks.
#include "runtime/plan_choice.h"

#include <cstdio>
#include <type_traits>

#include "compile/frontend/builtin_models.h"
#include "partition/plan_shards.h"
#include "partition/training_cost.h"

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

}  // namespace

Expected<PlanChoice> choosePlan(const RunConfig& config, const RunOptions& options, const ir::Graph& graph,
                                MPI_Comm comm, CancelWatch& cancel, PhaseProgress& progress) {
  const topology::Cluster& cluster = *config.cluster;
  const auto& parallelism = config.parallelism;
  PlanChoice choice;
  auto profile = partition::profileModel(graph, cluster.chip(), frontend::samplesPerIteration(config.model, graph),
                                         [&](std::int64_t done, std::int64_t total) {
                                           progress.update(done, total, "distinct layers profiled");
                                         });
  if (!profile) return profile.error();
  if (auto s = partition::applyTraining(*profile, graph, config.training, &cluster.chip()); !s) return s.error();
  choice.training = config.training;
  const support::ProgressFn layersEstimated = [&](std::int64_t done, std::int64_t total) {
    progress.update(done, total, "layers estimated");
  };
  choice.planFile = options.planFile && *options.planFile != "auto" ? *options.planFile : "";
  if (choice.planFile.empty() && !options.planFile) choice.planFile = parallelism.planFile;
  if (!choice.planFile.empty()) {
    auto plan = partition::loadPlanFile(choice.planFile);
    if (!plan) return plan.error();
    if (auto s = partition::checkPlan(*plan, static_cast<int>(profile->layers.size()), cluster, choice.planFile); !s)
      return s.error();
    choice.plan = *plan;
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
    partition::SearchParallel parallel;
    MPI_Comm_rank(comm, &parallel.rank);
    MPI_Comm_size(comm, &parallel.size);
    parallel.progress = [&](std::int64_t done, std::int64_t total) {
      progress.update(done, total, "candidates evaluated");
    };
    if (parallel.size > 1)
      parallel.gather = [comm, &cancel](const std::vector<partition::EvaluatedCandidate>& mine) {
        // Stopping: this rank's candidates only (the search ends early; the caller returns interrupted).
        return cancel.agree() ? mine : gatherCandidates(comm, mine);
      };
    auto result = partition::searchPlans(cluster, *profile, search, parallel);
    if (!result) return result.error();
    choice.search = std::move(*result);
    choice.plan = choice.search->best;
  }
  if (choice.search) choice.placement = choice.search->placement;
  else if (choice.placement.method.empty()) choice.placement = partition::reportPlanPlacement(cluster, *profile, choice.plan);
  if (!choice.search) {
    auto given = partition::evaluatePlan(cluster, *profile, choice.plan);
    if (!given) return given.error();
    choice.given = *given;
    choice.runPrediction = *given;
  } else if (auto predicted = partition::evaluatePlan(cluster, *profile, choice.plan); predicted) {
    choice.runPrediction = *predicted;
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
