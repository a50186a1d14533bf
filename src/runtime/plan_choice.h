// The plan a run simulates: from a plan file, the config's fixed plan, or the search, and its fallbacks.
#pragma once

#include <functional>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "compile/ir/graph.h"
#include "partition/placement.h"
#include "partition/plan.h"
#include "partition/search.h"
#include "partition/training.h"
#include "runtime/cancellation.h"
#include "runtime/driver.h"
#include "runtime/progress.h"
#include "runtime/run_config.h"
#include "runtime/trace_writer.h"
#include "support/expected.h"

namespace tsp::runtime {

// What the planning stage decided: the plan to run, and the search or the given plan's prediction.
struct PlanChoice {
  partition::Plan plan;
  std::optional<partition::SearchResult> search;
  std::optional<partition::RankedPlan> given;  ///< the prediction for a fixed or file plan
  std::string planFile;                        ///< the file the plan came from, if any
  std::optional<partition::RankedPlan> runPrediction;  ///< the cost model's figures for the plan that runs
  partition::TrainingConfig training;                  ///< what the figures cost: a training step when enabled
  partition::PlacementReport placement;                 ///< hops and link load of the plan's placement
  std::shared_ptr<const partition::ModelProfile> profile;  ///< what the plans were costed on
  std::vector<std::string> skipped;                    ///< searched plans that did not compile, with why
};

/// The plan: from --plan FILE or the config's plan file, a fixed plan, or the search (plan: auto).
/// The search's candidates are dealt over the ranks of comm; every rank gets the same choice.
/// The profile's layer compiles are dealt over the ranks too (sharedLayerCompiler).
/// progress shows this rank's layer compiles, then the candidates evaluated. The ranks agree on
/// `cancel` before gathering candidates; once they agreed to stop, the search ends there on every
/// rank and choosePlan returns support::interrupted().
Expected<PlanChoice> choosePlan(const RunConfig& config, const RunOptions& options, const ir::Graph& graph,
                                MPI_Comm comm, CancelWatch& cancel, PhaseProgress& progress);

/// The plan file a run asks for: --plan FILE, else the config's `plan: FILE` (none with --plan auto).
std::string requestedPlanFile(const RunConfig& config, const RunOptions& options);

/// --programs: the plan the programs in `dir` were compiled for against what the run asks for: the
/// same plan as a plan file (factors, stages, chunks of the model's `layers` layers, placement), the
/// same factors as a fixed plan, anything under plan auto (the search's plan). Errors name the plan
/// file or the config's `plan`, and the first difference.
Status checkProgramsPlan(const RunConfig& config, const RunOptions& options, const partition::Plan& plan,
                         const std::string& dir, int layers);

/// A searched plan whose shards do not compile (the cost model's memory check passed, the SRAM
/// allocator did not) is replaced by the next ranked plan that does, at most this many times.
inline constexpr int kMaxPlanFallbacks = 16;

/// The next ranked plan after position `next` that has a Plan (stages and placement) and differs from
/// the current one; updates the choice's placement and prediction, or an error when none is left.
/// `skip`: candidates not to take (a TP width and split whose shards did not fit before).
Expected<partition::Plan> nextRankedPlan(const topology::Cluster& cluster, PlanChoice& choice, size_t& next,
                                         const std::function<bool(const partition::Candidate&)>& skip = {});

/// The ranked plans as rows of the trace's /search/plans.
std::vector<SearchPlanRow> searchRows(const std::vector<partition::RankedPlan>& ranked);

}  // namespace tsp::runtime
