// A plan's per-chip graphs: the sharding annotations that realise dp x tp x pp, and the workload of the cluster scheduler.
#pragma once

#include <map>

#include "compile/ir/graph.h"
#include "compile/schedule/cluster_schedule.h"
#include "partition/plan.h"
#include "partition/sharding.h"
#include "partition/sharding_spmd.h"
#include "partition/tensor_split.h"
#include "support/expected.h"

namespace tsp::partition {

/// The TP group's device graphs of a batch block: planAnnotations, their propagation and shardGraph.
Expected<DeviceGraphs> tensorParallelGraphs(const ir::Graph& block, const Plan& plan);

/// The plan's per-device graphs (device b tp + t: batch block b = d m + i, TP rank t; shardGraph
/// of the propagated annotations on the batch block), the chip of every op (its layer's stage, the
/// device's replica and TP rank through the placement), and the waves (one per microbatch and
/// replica, microbatch-major) for schedule::scheduleCluster.
Expected<schedule::ShardedWorkload> shardPlan(const ir::Graph& graph, const Plan& plan);

}  // namespace tsp::partition
