// A plan's per-chip graphs: annotations from the plan's splits, propagation, materialisation, chips and waves.
#include "partition/plan_shards.h"

#include <algorithm>

#include <fmt/format.h>

#include "partition/sharding_spmd.h"

namespace tsp::partition {

namespace {

bool usesAxis(const TensorSharding& s, int axis) {
  return std::find(s.dimAxis.begin(), s.dimAxis.end(), axis) != s.dimAxis.end() ||
         std::find(s.partialAxes.begin(), s.partialAxes.end(), axis) != s.partialAxes.end();
}

}  // namespace

Mesh planMesh(const Plan& plan) {
  Mesh mesh;
  const int batchBlocks = plan.dp * plan.microbatches;
  if (batchBlocks > 1) {
    mesh.axisNames.push_back("dp");
    mesh.axisSizes.push_back(batchBlocks);
  }
  if (plan.tp > 1) {
    mesh.axisNames.push_back("tp");
    mesh.axisSizes.push_back(plan.tp);
  }
  if (mesh.axisNames.empty()) mesh = Mesh{{"dp"}, {1}};
  return mesh;
}

Expected<std::map<ir::TensorId, TensorSharding>> planAnnotations(const ir::Graph& graph, const Plan& plan,
                                                                 const Mesh& mesh) {
  std::map<ir::TensorId, TensorSharding> annotations;
  const int dp = mesh.axis("dp"), tp = mesh.axis("tp");
  if (dp >= 0 && mesh.axisSizes[dp] > 1)
    for (ir::TensorId in : graph.inputs()) {
      const auto& t = graph.tensor(in);
      if (t.shape.empty() || t.shape[0] % mesh.axisSizes[dp] != 0)
        return modelError(t.name, fmt::format("the batch dim of input '{}' ({}) does not divide into dp x "
                                              "microbatches = {} blocks", t.name, t.shape.empty() ? 0 : t.shape[0],
                                              mesh.axisSizes[dp]));
      auto s = TensorSharding::replicated(t.shape.size());
      s.dimAxis[0] = dp;
      annotations[in] = s;
    }
  if (tp < 0) return annotations;
  const int size = mesh.axisSizes[tp];
  if (plan.split == TensorSplit::kSpatial) {
    for (ir::TensorId in : graph.inputs()) {
      const auto& t = graph.tensor(in);
      if (t.shape.size() != 4) continue;
      if (t.shape[2] % size != 0)
        return modelError(t.name, fmt::format("the height of input '{}' ({}) does not divide into tp = {} rows",
                                              t.name, t.shape[2], size));
      auto s = annotations.count(in) ? annotations[in] : TensorSharding::replicated(4);
      s.dimAxis[2] = tp;
      annotations[in] = s;
    }
    return annotations;
  }
  if (plan.split != TensorSplit::kMegatron)
    return makeError(ExitCode::kConfig, fmt::format("the {} split is predicted by the search but not executed by "
                                                    "this build (megatron and spatial are)",
                                                    tensorSplitName(plan.split)));
  // Column-split one weight at a time, in topological order, re-propagating in between: whether a
  // matmul's activation is split over tp depends on the splits before it.
  std::vector<bool> tried(graph.tensors().size(), false);
  for (;;) {
    auto propagated = propagateShardings(graph, mesh, annotations);
    if (!propagated) return propagated.error();
    bool added = false;
    for (const auto& op : graph.ops()) {
      if (op.kind != ir::OpKind::kMatMul || op.inputs.size() != 2) continue;
      const ir::TensorId w = op.inputs[1];
      const auto& weight = graph.tensor(w);
      if (weight.role != ir::TensorRole::kWeight || weight.shape.size() != 2 || tried[w]) continue;
      if (usesAxis(propagated->tensors[op.inputs[0]], tp) || usesAxis(propagated->tensors[w], tp)) continue;
      tried[w] = true;
      if (weight.shape[1] % size != 0) continue;
      annotations[w] = TensorSharding{{-1, tp}, {}};
      added = true;
      break;
    }
    if (!added) return annotations;
  }
}

Expected<schedule::ShardedWorkload> shardPlan(const ir::Graph& graph, const Plan& plan) {
  const Mesh mesh = planMesh(plan);
  auto annotations = planAnnotations(graph, plan, mesh);
  if (!annotations) return annotations.error();
  auto propagated = propagateShardings(graph, mesh, *annotations);
  if (!propagated) return propagated.error();
  auto devices = shardGraph(graph, *propagated);
  if (!devices) return devices.error();
  schedule::ShardedWorkload work;
  work.graphs = std::move(devices->graphs);
  const int tp = plan.tp, m = plan.microbatches;
  const auto chunks = plan.layerChunks(graph.layerCount());
  for (size_t device = 0; device < work.graphs.size(); ++device) {
    const int t = static_cast<int>(device) % tp, block = static_cast<int>(device) / tp;
    const int d = block / m;
    const auto& g = work.graphs[device];
    std::vector<int> chips;
    for (const auto& op : g.ops()) {
      const int layer = std::clamp(op.layer, 0, static_cast<int>(chunks.size()) - 1);
      const int stage = chunks[layer] % plan.pp;
      const int rank = (d * plan.pp + stage) * tp + t;
      chips.push_back(plan.placement.empty() ? plan.stageChip[stage] : plan.placement.at(rank));
    }
    work.opChip.push_back(std::move(chips));
  }
  for (int i = 0; i < m; ++i)
    for (int d = 0; d < plan.dp; ++d) {
      std::vector<int> wave;
      for (int t = 0; t < tp; ++t) wave.push_back((d * m + i) * tp + t);
      work.waves.push_back(std::move(wave));
    }
  return work;
}

}  // namespace tsp::partition
