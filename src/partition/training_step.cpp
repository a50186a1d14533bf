// A plan's training step: batch block, training graph, stage split, chips and pipeline orders for the training scheduler.
#include "partition/training_step.h"

#include <algorithm>

#include <fmt/format.h>

#include "partition/plan_shards.h"

namespace tsp::partition {

Expected<std::unique_ptr<TrainingStep>> buildTrainingStep(const ir::Graph& forward, const Plan& plan,
                                                          const TrainingConfig& config, bool withLoss) {
  if (plan.tp > 1)
    return makeError(ExitCode::kConfig, fmt::format("training steps run with tp = 1 (pipeline and data parallelism), "
                                                    "the plan has tp = {}", plan.tp));
  const int p = plan.pp, v = plan.interleave, m = plan.microbatches;
  PipelineSchedule schedule = config.schedule;
  if (v > 1 && schedule != PipelineSchedule::kInterleaved)
    return makeError(ExitCode::kConfig, fmt::format("the plan interleaves v = {} chunks per stage, training.schedule "
                                                    "must be interleaved", v));
  if (v == 1 && schedule == PipelineSchedule::kInterleaved) schedule = PipelineSchedule::k1F1B;
  auto order = buildPipelineOrder(schedule, p, m, v);
  if (!order) return order.error();
  auto block = batchBlockGraph(forward, plan.dp * m);
  if (!block) return block.error();
  ir::TrainingOptions options;
  options.optimizer = config.optimizer;
  options.recompute = config.recompute;
  auto training = withLoss ? ir::buildTrainingGraph(*block, options) : ir::differentiate(*block, options);
  if (!training) return training.error();

  auto step = std::make_unique<TrainingStep>();
  step->training = std::move(*training);
  const ir::Graph& g = step->training.graph;
  schedule::TrainingWorkload& work = step->workload;
  work.graph = &g;
  work.stages = p;
  work.chunks = v;
  work.microbatches = m;
  work.bucketBytes = config.bucketBytes;
  const size_t stages = static_cast<size_t>(p) * v;
  work.forward.resize(stages);
  work.backward.resize(stages);
  work.update.resize(stages);
  work.gradients.resize(stages);
  // Forward: the batch block's ops and the loss after them; update: the ops after the last gradient.
  const auto forwardOps = static_cast<ir::OpId>(block->ops().size() + (withLoss ? 1 : 0));
  ir::OpId firstUpdate = static_cast<ir::OpId>(g.ops().size());
  if (config.optimizer != ir::Optimizer::kNone) {
    ir::OpId lastGradient = forwardOps - 1;
    for (ir::TensorId grad : step->training.tensors.gradients)
      if (grad >= 0) lastGradient = std::max(lastGradient, g.tensor(grad).producer);
    firstUpdate = lastGradient + 1;
  }
  const auto chunks = plan.layerChunks(g.layerCount());
  for (ir::OpId op = 0; op < static_cast<ir::OpId>(g.ops().size()); ++op) {
    const int chunk = chunks[g.op(op).layer];
    if (chunk < 0 || static_cast<size_t>(chunk) >= stages)
      return makeError(ExitCode::kInternal, fmt::format("layer {} is in chunk {} of a plan of {} chunks",
                                                        g.op(op).layer, chunk, stages));
    auto& to = op < forwardOps ? work.forward : op < firstUpdate ? work.backward : work.update;
    to[chunk].push_back(op);
  }
  for (ir::TensorId grad : step->training.tensors.gradients)
    if (grad >= 0) work.gradients[chunks[g.op(g.tensor(grad).producer).layer]].push_back(grad);
  for (int d = 0; d < plan.dp; ++d) {
    std::vector<int> chips;
    for (int s = 0; s < p; ++s)
      chips.push_back(plan.placement.empty() ? plan.stageChip[s] : plan.placement[(d * p + s) * plan.tp]);
    work.chips.push_back(std::move(chips));
  }
  work.order.resize(p);
  for (int s = 0; s < p; ++s)
    for (const PipelineTask& task : order->tasks[s])
      work.order[s].push_back({task.microbatch, task.backward, task.chunk});
  return step;
}

}  // namespace tsp::partition
