// A plan's per-chip graphs: the sharding annotations that realise dp x tp x pp, and the workload of the cluster scheduler.
#pragma once

#include <map>

#include "compile/ir/graph.h"
#include "compile/schedule/cluster_schedule.h"
#include "partition/plan.h"
#include "partition/sharding.h"
#include "support/expected.h"

namespace tsp::partition {

/// The mesh of a plan: axis "dp" of dp x microbatches devices (replica d, microbatch i is batch
/// block d m + i) and axis "tp" of tp devices; axes of size 1 are left out (one axis at least).
Mesh planMesh(const Plan& plan);

/// Annotations that realise the plan's splits on planMesh: graph inputs split on their leading
/// (batch) dim over dp; Megatron tensor parallel by column-splitting the weight of every weight
/// MatMul whose activation is not split over tp (propagation then makes its partner row-parallel,
/// splits attention heads, and inserts the all-reduces); spatial by splitting 4-D inputs on their
/// height over tp. Errors name the tensor that cannot be split.
Expected<std::map<ir::TensorId, TensorSharding>> planAnnotations(const ir::Graph& graph, const Plan& plan,
                                                                 const Mesh& mesh);

/// The plan's per-device graphs (shardGraph of the propagated annotations), the chip of every op
/// (its layer's stage, the device's replica and TP rank through the placement), and the waves
/// (one per microbatch and replica, microbatch-major) for schedule::scheduleCluster.
Expected<schedule::ShardedWorkload> shardPlan(const ir::Graph& graph, const Plan& plan);

}  // namespace tsp::partition
