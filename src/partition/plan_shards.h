// A plan's per-chip graphs: the sharding annotations that realise dp x tp x pp, and the workload of the cluster scheduler.
#pragma once

#include <map>

#include "compile/ir/graph.h"
#include "compile/schedule/cluster_schedule.h"
#include "partition/plan.h"
#include "partition/sharding.h"
#include "partition/sharding_spmd.h"
#include "support/expected.h"

namespace tsp::partition {

/// The mesh of one TP group: axis "tp" of tp devices (one when tp = 1); for the 2D split the
/// q x q grid {r, c} (device r q + c is TP rank r q + c).
Mesh tensorMesh(const Plan& plan);

/// One batch block of the graph: its inputs split on their leading (batch) dim into `blocks`
/// (dp x microbatches) by the sharding mechanism, block 0's graph (every block has its shapes and
/// weights). Errors name the input whose batch does not divide, or the op that would need
/// communication between blocks.
Expected<ir::Graph> batchBlockGraph(const ir::Graph& graph, int blocks);

/// Annotations that realise the plan's tensor split on tensorMesh: Megatron by column-splitting
/// the weight of every weight MatMul whose activation is not split over tp (propagation then
/// makes its partner row-parallel, splits attention heads and inserts the all-reduces); spatial by
/// splitting 4-D inputs on their height; 2D by splitting every weight matmul's weight over both
/// grid axes (K over the axis its activation's last dim is split on, N over the other), so that
/// each chip holds 1/tp of it (tp not a square: kConfig).
/// Errors name the tensor.
Expected<std::map<ir::TensorId, TensorSharding>> planAnnotations(const ir::Graph& graph, const Plan& plan,
                                                                 const Mesh& mesh);

/// The TP group's device graphs of a batch block: planAnnotations, their propagation and shardGraph.
Expected<DeviceGraphs> tensorParallelGraphs(const ir::Graph& block, const Plan& plan);

/// The plan's per-device graphs (device b tp + t: batch block b = d m + i, TP rank t; shardGraph
/// of the propagated annotations on the batch block), the chip of every op (its layer's stage, the
/// device's replica and TP rank through the placement), and the waves (one per microbatch and
/// replica, microbatch-major) for schedule::scheduleCluster.
Expected<schedule::ShardedWorkload> shardPlan(const ir::Graph& graph, const Plan& plan);

}  // namespace tsp::partition
