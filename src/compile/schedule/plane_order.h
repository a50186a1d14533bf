// The order of each MXM plane's runs, chosen from a schedule in which the runs are not chained.
#pragma once

#include "compile/lower/lowering.h"
#include "compile/schedule/list_scheduler.h"
#include "support/expected.h"

namespace tsp::schedule {

/// The dependences that chain a plane's runs in the given order: run j+1's first install and first
/// compute wait for run j's last compute (the install is issued after it, so the compute sees its
/// own weights; the compute follows once the plane's previous compute has streamed).
std::vector<Dependence> planeChain(const Problem& problem, const std::vector<lower::PlaneRun>& runs);
/// The chains of every plane (LoweredShard::planeRuns): the dependences an order of the runs adds,
/// which the order-free lower bound leaves out.
std::vector<Dependence> planeChains(const Problem& problem, const std::vector<std::vector<lower::PlaneRun>>& planes);
/// Every plane's runs as serial groups (lowerBound): in any order the next run's first install
/// issues after the previous run's last compute, and its first compute after that compute's stream,
/// so the runs' install-to-last-compute and compute-to-compute stretches never overlap.
std::vector<std::vector<SerialSegment>> planeSegments(const Problem& problem,
                                                      const std::vector<std::vector<lower::PlaneRun>>& planes);

/// Chains every plane's runs in the order `planes` gives (the same runs as shard.planeRuns, each
/// plane's in any order) instead of the shard's: its chain dependences are replaced.
void setPlaneOrder(lower::LoweredShard& shard, std::vector<std::vector<lower::PlaneRun>> planes);
/// Is `makespan` within 2 % of the shard's busiest plane's computes (LoweredShard::matmulLowerBound)?
/// No plane order or priority weighting can then gain more than that, so neither is searched.
bool nearBusiestPlane(const lower::LoweredShard& shard, Cycle makespan);
/// Lets every MXM plane take its runs in an order chosen by list makespan, starting from `listed`,
/// the list schedule of the problem as lowered (check() succeeded). Candidates: the chains are cut,
/// the relaxed problem is list-scheduled (each plane's install and compute units still serialise its
/// work) with the seed's priority and with the critical path alone, and each plane's runs are
/// ordered by the relaxed start of their first compute and of their last one; the best of these and
/// the lowering's order is then improved by up to `planeOrderMoves` moves of one run by one to four
/// places (capped at planeOrderWork / tasks), kept when the list makespan drops. A plane so runs
/// later row blocks or later ops while an earlier block waits for its inputs. Nothing changes when
/// `listed` is within 2 % of the busiest plane's computes, nor in a shard with C2C sends or receives
/// (their timing, not the makespan alone, matters to the cluster schedule). Returns whether the
/// order changed.
Expected<bool> orderPlaneRuns(lower::LoweredShard& shard, const Schedule& listed, const Options& options);

}  // namespace tsp::schedule
