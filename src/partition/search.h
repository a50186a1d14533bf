// Hybrid parallelism search: dp x tp x pp x microbatches x interleave x tensor split, ranked by a cost model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "partition/cost_model.h"
#include "partition/plan_cost.h"
#include "partition/placement.h"
#include "partition/plan.h"
#include "support/expected.h"
#include "support/progress.h"
#include "topology/cluster.h"

namespace tsp::partition {

/// What the search optimises and how much it may evaluate (budgets in candidates, never seconds).
struct SearchOptions {
  std::string objective = "throughput";  ///< throughput | latency | chips
  std::int64_t budget = 20000;           ///< candidates evaluated at most (screening and final)
  int maxTp = 64;                        ///< largest TP group tried (powers of two)
  int finalists = 16;                    ///< best screened candidates re-evaluated with every group's contention
  int keep = 100;                        ///< ranked plans returned
  /// When nothing fits and the profile lacks the figures at the widths the smallest fit tries
  /// (ModelProfile::figuresUpTo): the profile with them (widenProfile). Empty: the profile as it is.
  std::function<ModelProfile(const ModelProfile&)> widen;
};

/// One evaluated candidate (trivially copyable, so that ranks can exchange them as bytes).
struct EvaluatedCandidate {
  std::int64_t index = 0;  ///< position in the phase's candidate list
  PlanCost cost;
};

/// Spreads candidate evaluation over ranks: rank evaluates the indices i with i % size == rank,
/// and gather (given by the runtime, which owns MPI) returns the union of every rank's results, or
/// nothing when the ranks agreed to stop (a signal): then every rank's search ends there, interrupted.
struct SearchParallel {
  int rank = 0, size = 1;
  std::function<std::optional<std::vector<EvaluatedCandidate>>(const std::vector<EvaluatedCandidate>&)> gather;
  /// Told after each candidate this rank evaluates: (done, this rank's share) of the list in hand.
  support::ProgressFn progress;
};

/// A ranked plan: the candidate, its predicted cost, and whether contention counted every group.
struct RankedPlan {
  Candidate candidate;
  PlanCost cost;
  bool exact = false;
};

/// What a search found.
struct SearchResult {
  std::vector<RankedPlan> ranked;  ///< best first (objective, then canonical string)
  Plan best;                        ///< the first ranked plan with stages and placement
  RankedPlan bestCost;              ///< evaluatePlan of best
  PlacementReport placement;        ///< hops and link load of best
  std::int64_t spaceSize = 0;       ///< candidates in the space
  std::int64_t pruned = 0;          ///< left out by the early memory check
  std::int64_t evaluated = 0;       ///< candidates the cost model evaluated
  std::string method;               ///< "exhaustive" or "hierarchical"
  int fallbackLayers = 0;           ///< layers costed by the FLOP-based estimate
  std::string fallbackReason;
};

/// True when a is better than b under the objective; ties by canonical string, so the order is total.
bool betterPlan(const std::string& objective, const RankedPlan& a, const RankedPlan& b);

/// Searches the plans of a profiled model on `cluster`. Errors: kDoesNotFit naming the smallest chip count
/// that would fit when no plan fits; support::interrupted() when support::cancelRequested() stopped it.
Expected<SearchResult> searchPlans(const topology::Cluster& cluster, const ModelProfile& profile,
                                   const SearchOptions& options,
                                   const SearchParallel& parallel = {});

/// Turns a candidate into a plan: stages (DP or METIS), placement, and each stage's cycles as the
/// cost model prices the plan (evaluatePlan's stageCycles).
/// With `costed`, also that evaluatePlan of the plan.
Expected<Plan> buildPlan(const topology::Cluster& cluster, const ModelProfile& profile, const Candidate& candidate,
                         const std::vector<int>& order, RankedPlan* costed = nullptr);

/// Predicts the cost of a given plan (a plan file or a fixed plan) on its own stages and placement.
/// With `stageCycles`, also what each stage's chip is busy with in one iteration as costed (a plan's
/// Plan::stageCycles; evaluateCandidate).
Expected<RankedPlan> evaluatePlan(const topology::Cluster& cluster, const ModelProfile& profile, const Plan& plan,
                                  std::vector<Cycle>* stageCycles = nullptr);

/// Bytes per iteration on each TP ring edge and on each stage-to-stage route of one TP rank.
struct PlanTraffic {
  Bytes ringEdgeBytes = 0;
  std::vector<Bytes> stageBytes;  ///< from stage s to s + 1
};
PlanTraffic planTraffic(const ModelProfile& profile, const Plan& plan);

/// Hops, link load and bytes x hops of a plan's placement on the cluster's routes.
PlacementReport reportPlanPlacement(const topology::Cluster& cluster, const ModelProfile& profile, const Plan& plan);

/// Maps the plan's communication graph onto the chips of its placement (mapCommunicationGraph) and
/// keeps that mapping when it moves fewer bytes x hops than the locality placement; a pure pipeline
/// keeps its path of linked chips. Returns the report of the placement kept.
Expected<PlacementReport> refinePlacement(const topology::Cluster& cluster, const ModelProfile& profile, Plan& plan,
                                          const std::vector<int>& order);

/// Smallest dp = 1 plan (tp x pp chips) whose memory fits one chip's SRAM, ignoring the cluster's
/// size; chips = 0 when none does (a single layer's share is too large even at the widest split).
Candidate smallestFittingPlan(const ModelProfile& profile, const topology::ChipSpec& chip, int maxTp);

}  // namespace tsp::partition
