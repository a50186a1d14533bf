// SPMD materialisation of a sharding plan (one graph per device, with explicit collectives and
// Send/Recv) and a multi-device reference run that checks it against the unsharded graph.
#pragma once

#include <vector>

#include "compile/ir/graph.h"
#include "compile/ir/interpreter.h"
#include "partition/sharding.h"
#include "support/expected.h"

namespace tsp::partition {

/// One graph per mesh device, and how the global graph's inputs and outputs are split over them.
struct DeviceGraphs {
  Mesh mesh;
  std::vector<ir::Graph> graphs;
  std::vector<TensorSharding> inputShardings;   ///< per graph input, then per state
  std::vector<TensorSharding> outputShardings;  ///< per graph output (never partial)
  std::vector<std::vector<std::int64_t>> outputShapes;  ///< per graph output, its global shape
  /// Bytes each device receives: from halo exchanges, and from all collectives (nccl-tests
  /// accounting of the algorithm-independent minimum: (g-1)/g of the data per device and step).
  std::vector<std::int64_t> haloBytes, collectiveBytes;
};

/// Builds every device's graph: local shapes, weights and constants sliced (their data too), each
/// reshard as its collective (attrs group, devices, tag, axis), Slice, or Send/Recv halo exchange.
Expected<DeviceGraphs> shardGraph(const ir::Graph& graph, const ShardingPlan& plan);

/// Device `device`'s graph alone, as shardGraph builds it; without the weights' values when
/// weightValues is false (shapes, ops and constants: what a figure of the shard needs).
Expected<ir::Graph> shardDevice(const ir::Graph& graph, const ShardingPlan& plan, int device, bool weightValues);

/// Device `device`'s block of a global value under sharding.
ir::Value sliceValue(const ir::Value& global, const TensorSharding& sharding, const Mesh& mesh, int device);

/// Runs every device's graph on the reference interpreter's kernels, performing collectives and
/// Send/Recv between devices; inputs are the global graph's, outputs are reassembled globally.
/// Replicas that disagree, or a deadlock, are errors.
Expected<std::vector<ir::Value>> interpretSharded(const DeviceGraphs& devices, const std::vector<ir::Value>& inputs);

}  // namespace tsp::partition
