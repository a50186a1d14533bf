// A plan's per-chip graphs: annotations from the plan's splits, propagation, materialisation, chips and waves.
#include "partition/plan_shards.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "partition/pipeline_schedule.h"
#include "partition/sharding_spmd.h"

namespace tsp::partition {

Expected<DeviceGraphs> tensorParallelGraphs(const ir::Graph& block, const Plan& plan) {
  const Mesh mesh = tensorMesh(plan.split, plan.tp);
  auto annotations = planAnnotations(block, plan.split, mesh);
  if (!annotations) return annotations.error();
  auto propagated = propagateShardings(block, mesh, *annotations);
  if (!propagated) return propagated.error();
  return shardGraph(block, *propagated);
}

Expected<schedule::ShardedWorkload> shardPlan(const ir::Graph& graph, const Plan& plan) {
  // Two levels: one batch block (all blocks have its shapes and weights), then its TP group.
  const int blocks = plan.dp * plan.microbatches, tp = plan.tp;
  auto block = batchBlockGraph(graph, blocks);
  if (!block) return block.error();
  auto group = tensorParallelGraphs(*block, plan);
  if (!group) return group.error();
  schedule::ShardedWorkload work;
  const auto chunks = plan.layerChunks(graph.layerCount());
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < tp; ++t) {
      // Device b tp + t runs TP rank t's graph; its collectives name TP ranks, positions in its wave.
      ir::Graph g = group->graphs[t];
      const int d = b / plan.microbatches;
      std::vector<int> chips;
      for (const auto& op : g.ops()) {
        const int layer = std::clamp(op.layer, 0, static_cast<int>(chunks.size()) - 1);
        const int stage = chunks[layer] % plan.pp;
        const int rank = (d * plan.pp + stage) * tp + t;
        chips.push_back(plan.placement.empty() ? plan.stageChip[stage] : plan.placement.at(rank));
      }
      work.graphs.push_back(std::move(g));
      work.opChip.push_back(std::move(chips));
    }
  for (int i = 0; i < plan.microbatches; ++i)
    for (int d = 0; d < plan.dp; ++d) {
      std::vector<int> wave;
      for (int t = 0; t < tp; ++t) wave.push_back((d * plan.microbatches + i) * tp + t);
      work.waves.push_back(std::move(wave));
    }
  // Each replica's stage runs its chunks in the order of an interleaved inference pipeline.
  for (const auto& op : group->graphs.front().ops())
    work.opChunk.push_back(chunks[std::clamp(op.layer, 0, static_cast<int>(chunks.size()) - 1)]);
  const auto order = forwardOrder(plan.pp, plan.microbatches, plan.interleave);
  for (int d = 0; d < plan.dp; ++d)
    for (int s = 0; s < plan.pp; ++s) {
      std::vector<schedule::WaveChunk> lane;
      for (const PipelineTask& task : order[s])
        lane.push_back({task.microbatch * plan.dp + d, task.chunk * plan.pp + s});
      work.lanes.push_back(std::move(lane));
    }
  return work;
}

}  // namespace tsp::partition
