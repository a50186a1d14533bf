// A plan's training step: batch block, training graph, stage split, chips and pipeline orders for the training scheduler.
#include "partition/training_step.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "partition/plan_shards.h"

namespace tsp::partition {

std::map<ir::TensorId, ir::Attrs> partialGradients(const ir::Graph& device, const ir::Graph& block, int tp) {
  std::map<std::string, ir::TensorId> blockWeights;
  for (ir::TensorId w : block.weights()) blockWeights[block.tensor(w).name] = w;
  auto columnSplit = [&](ir::TensorId w) {
    const ir::Tensor& t = device.tensor(w);
    auto global = blockWeights.find(t.name);
    return t.role == ir::TensorRole::kWeight && global != blockWeights.end() && t.shape.size() >= 2 &&
           t.shape.back() < block.tensor(global->second).shape.back();
  };
  std::vector<std::int64_t> devices(tp);
  std::iota(devices.begin(), devices.end(), 0);
  std::map<ir::TensorId, ir::Attrs> partial;
  for (ir::TensorId id = 0; id < static_cast<ir::TensorId>(device.tensors().size()); ++id) {
    const ir::Tensor& t = device.tensor(id);
    if (t.users.empty() || !ir::isFloat(t.dtype)) continue;
    bool all = true;
    for (ir::OpId user : t.users) {
      const ir::Op& op = device.op(user);
      all = all && (op.kind == ir::OpKind::kMatMul || op.kind == ir::OpKind::kFusedMatMul) && op.inputs[0] == id &&
            columnSplit(op.inputs[1]);
    }
    if (all)
      partial[id] = {{"group", std::int64_t{tp}}, {"devices", devices},
                     {"tag", std::int64_t{1000000 + static_cast<std::int64_t>(partial.size())}}};
  }
  return partial;
}


Expected<std::unique_ptr<TrainingStep>> buildTrainingStep(const ir::Graph& forward, const Plan& plan,
                                                          const TrainingConfig& config, bool withLoss) {
  if (plan.tp > 1 && plan.split != TensorSplit::kMegatron)
    return makeError(ExitCode::kConfig, fmt::format("training steps split tensors the Megatron way (split: megatron), "
                                                    "the plan's split is {}", tensorSplitName(plan.split)));
  const int p = plan.pp, v = plan.interleave, m = plan.microbatches, tp = plan.tp;
  PipelineSchedule schedule = config.schedule;
  if (v > 1 && schedule != PipelineSchedule::kInterleaved)
    return makeError(ExitCode::kConfig, fmt::format("the plan interleaves v = {} chunks per stage, training.schedule "
                                                    "must be interleaved", v));
  if (v == 1 && schedule == PipelineSchedule::kInterleaved) schedule = PipelineSchedule::k1F1B;
  auto order = buildPipelineOrder(schedule, p, m, v);
  if (!order) return order.error();
  auto block = batchBlockGraph(forward, plan.dp * m);
  if (!block) return block.error();
  std::vector<ir::Graph> devices;
  if (tp > 1) {
    auto group = tensorParallelGraphs(*block, plan);
    if (!group) return group.error();
    // Every TP rank runs rank 0's device graph: the ranks' graphs differ only in the block their
    // Slices take (whose gradients then pad on different sides), with the same shapes and costs.
    devices.push_back(std::move(group->graphs.front()));
  } else {
    devices.push_back(*block);
  }
  auto step = std::make_unique<TrainingStep>();
  for (const ir::Graph& device : devices) {
    ir::TrainingOptions options;
    options.optimizer = config.optimizer;
    options.recompute = config.recompute;
    options.inputGradients = config.inputGradients;
    if (tp > 1) options.partialGradients = partialGradients(device, *block, tp);
    auto training = withLoss ? ir::buildTrainingGraph(device, options) : ir::differentiate(device, options);
    if (!training) return training.error();
    step->training.push_back(std::move(*training));
  }
  // Every microbatch adds its weight gradients into accumulators kept on chip (state tensors), in the
  // backward pass of the layer that made them: the ops after the training graph's own.
  const auto trainingOps = static_cast<ir::OpId>(step->training.front().graph.ops().size());
  for (auto& t : step->training)
    for (ir::TensorId grad : t.tensors.gradients) {
      if (grad < 0) continue;
      ir::Graph& tg = t.graph;
      const ir::Tensor gradient = tg.tensor(grad);
      const ir::TensorId sum = tg.addState(gradient.name + ".accumulated", gradient.shape, gradient.dtype);
      auto added = tg.addOp(ir::OpKind::kAdd, gradient.name + ".accumulate", {grad, sum}, tg.op(gradient.producer).layer);
      if (!added) return added.error();
    }
  const ir::Graph& g = step->training.front().graph;
  schedule::TrainingWorkload& work = step->workload;
  for (int t = 0; t < tp; ++t) work.graphs.push_back(&step->training.front().graph);
  work.stages = p;
  work.chunks = v;
  work.microbatches = m;
  work.bucketBytes = config.bucketBytes;
  work.shardOptimizer = config.shardOptimizer;
  work.sendAfterPass = config.sendAfterPass;
  const size_t stages = static_cast<size_t>(p) * v;
  work.forward.resize(stages);
  work.backward.resize(stages);
  work.update.resize(stages);
  work.gradients.resize(stages);
  // Forward: the device graph's ops and the loss after them; update: the ops after the last gradient.
  const auto forwardOps = static_cast<ir::OpId>(devices.front().ops().size() + (withLoss ? 1 : 0));
  ir::OpId firstUpdate = static_cast<ir::OpId>(g.ops().size());
  if (config.optimizer != ir::Optimizer::kNone) {
    ir::OpId lastGradient = forwardOps - 1;
    for (ir::TensorId grad : step->training.front().tensors.gradients)
      if (grad >= 0) lastGradient = std::max(lastGradient, g.tensor(grad).producer);
    firstUpdate = lastGradient + 1;
  }
  const auto chunks = plan.layerChunks(g.layerCount());
  for (ir::OpId op = 0; op < static_cast<ir::OpId>(g.ops().size()); ++op) {
    const int layer = std::clamp(g.op(op).layer, 0, static_cast<int>(chunks.size()) - 1);
    const int chunk = chunks[layer];
    if (chunk < 0 || static_cast<size_t>(chunk) >= stages)
      return makeError(ExitCode::kInternal, fmt::format("layer {} is in chunk {} of a plan of {} chunks",
                                                        g.op(op).layer, chunk, stages));
    auto& to = op < forwardOps ? work.forward : op < firstUpdate || op >= trainingOps ? work.backward : work.update;
    to[chunk].push_back(op);
  }
  for (ir::TensorId grad : step->training.front().tensors.gradients)
    if (grad >= 0) {
      const int layer = std::clamp(g.op(g.tensor(grad).producer).layer, 0, static_cast<int>(chunks.size()) - 1);
      work.gradients[chunks[layer]].push_back(grad);
    }
  for (int d = 0; d < plan.dp; ++d) {
    std::vector<std::vector<int>> stagesChips;
    for (int s = 0; s < p; ++s) {
      std::vector<int> group;
      for (int t = 0; t < tp; ++t)
        group.push_back(plan.placement.empty() ? plan.stageChip[s] : plan.placement.at((d * p + s) * tp + t));
      stagesChips.push_back(std::move(group));
    }
    work.chips.push_back(std::move(stagesChips));
  }
  work.order.resize(p);
  for (int s = 0; s < p; ++s)
    for (const PipelineTask& task : order->tasks[s])
      work.order[s].push_back({task.microbatch, task.backward, task.chunk});
  return step;
}

}  // namespace tsp::partition
