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

/// Lets every MXM plane take its runs in the order their first computes reach the plane when runs
/// are not chained: the chains are cut, the list scheduler places the relaxed problem (each plane's
/// install and compute units still serialise its work), and each plane's runs are chained again by
/// the start of their first compute (ties: lowering order). A plane so keeps running later row
/// blocks or later ops while an earlier block waits for its inputs. The lowering order stays when
/// the relaxed problem cannot be scheduled or the new chains would close a cycle.
Status orderPlaneRuns(lower::LoweredShard& shard, const Options& options);

}  // namespace tsp::schedule
