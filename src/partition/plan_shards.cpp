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

namespace {

bool usesAxis(const TensorSharding& s, int axis) {
  return std::find(s.dimAxis.begin(), s.dimAxis.end(), axis) != s.dimAxis.end() ||
         std::find(s.partialAxes.begin(), s.partialAxes.end(), axis) != s.partialAxes.end();
}

}  // namespace

namespace {

// q with q x q = tp, or 0 when tp is not a square.
int gridSide(int tp) {
  const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(tp))));
  return q * q == tp ? q : 0;
}

// A matmul's choice for its weight, made from the shardings of the ops before it: nullopt when the
// op makes no choice; a weight with no sharding when it is tried and left as propagation places it.
using WeightChoice = std::optional<std::pair<ir::TensorId, std::optional<TensorSharding>>>;
using WeightChooser = std::function<WeightChoice(const ir::Op&, const ShardingPlan&,
                                                 const std::map<ir::TensorId, TensorSharding>&)>;

// Weights annotated one at a time in graph order, each choice seeing the propagation of the ones
// before it. Propagation runs in graph order, so an op's view depends only on earlier ops, and one
// propagation choosing each weight as its matmul is reached gives the same annotations. A weight
// that an earlier op reads first would change that op's view: such graphs take the rule
// literally, one propagation per weight.
Expected<std::map<ir::TensorId, TensorSharding>> chooseWeightsInOrder(
    const ir::Graph& graph, const Mesh& mesh, std::map<ir::TensorId, TensorSharding> annotations,
    const WeightChooser& choose) {
  std::vector<ir::OpId> firstReader(graph.tensors().size(), -1);
  for (size_t i = graph.ops().size(); i-- > 0;)
    for (ir::TensorId t : graph.op(i).inputs) firstReader[t] = static_cast<ir::OpId>(i);
  std::vector<bool> tried(graph.tensors().size(), false);
  bool literal = false;
  auto chosen = annotations;
  auto onePass = propagateShardings(graph, mesh, chosen,
                                    [&](ir::OpId id, const ShardingPlan& sofar,
                                        std::map<ir::TensorId, TensorSharding>& added) {
                                      auto choice = choose(graph.op(id), sofar, chosen);
                                      if (!choice || tried[choice->first]) return true;
                                      if (firstReader[choice->first] != id) {
                                        literal = true;
                                        return true;
                                      }
                                      tried[choice->first] = true;
                                      if (choice->second) added.emplace(choice->first, *choice->second);
                                      return true;
                                    });
  if (!onePass) return onePass.error();
  if (!literal) return chosen;
  std::fill(tried.begin(), tried.end(), false);
  for (;;) {
    auto propagated = propagateShardings(graph, mesh, annotations);
    if (!propagated) return propagated.error();
    bool added = false;
    for (size_t i = 0; i < graph.ops().size() && !added; ++i) {
      auto choice = choose(graph.op(i), *propagated, annotations);
      if (!choice || tried[choice->first]) continue;
      tried[choice->first] = true;
      if (!choice->second) continue;
      annotations.emplace(choice->first, *choice->second);
      added = true;
    }
    if (!added) return annotations;
  }
}

// 2D: every weight matmul's weight [K, N] is split over both grid axes, K over the axis its
// activation's last dim is split on (the other one's output partial sums then leave over that
// axis), N over the other, taken one at a time in graph order as for Megatron. Each matmul then
// holds 1/q^2 of its weight and reduces its output over one axis of q chips; lookup tables split
// their rows over r and their columns over c.
Expected<std::map<ir::TensorId, TensorSharding>> gridAnnotations(const ir::Graph& graph, const Mesh& mesh) {
  std::map<ir::TensorId, TensorSharding> annotations;
  const int q = mesh.axisSizes[0];
  for (const auto& op : graph.ops()) {
    if (op.kind != ir::OpKind::kGather || op.inputs.size() != 2 || op.intAttr("axis", 0) != 0) continue;
    const auto& table = graph.tensor(op.inputs[0]);
    if (table.role == ir::TensorRole::kWeight && table.shape.size() == 2 && table.shape[0] % q == 0 &&
        table.shape[1] % q == 0)
      annotations[op.inputs[0]] = TensorSharding{{0, 1}, {}};
  }
  return chooseWeightsInOrder(graph, mesh, std::move(annotations),
                              [&](const ir::Op& op, const ShardingPlan& sofar,
                                  const std::map<ir::TensorId, TensorSharding>& chosen) -> WeightChoice {
                                if (op.kind != ir::OpKind::kMatMul || op.inputs.size() != 2) return std::nullopt;
                                const ir::TensorId w = op.inputs[1];
                                const auto& weight = graph.tensor(w);
                                if (weight.role != ir::TensorRole::kWeight || weight.shape.size() != 2 ||
                                    chosen.count(w))
                                  return std::nullopt;
                                if (weight.shape[0] % q != 0 || weight.shape[1] % q != 0)
                                  return WeightChoice{{w, std::nullopt}};
                                const auto& in = sofar.tensors[op.inputs[0]];
                                const int k = !in.dimAxis.empty() && in.dimAxis.back() >= 0 ? in.dimAxis.back() : 0;
                                return WeightChoice{{w, TensorSharding{{k, 1 - k}, {}}}};
                              });
}

// The 2-D weight of a weight matmul (MatMul, Gemm) and the weight dim that indexes the op's
// output: the weight may be either operand, transposed by Gemm's transA/transB or by a Transpose
// between the initializer and the op.
struct WeightOperand {
  int operand;
  ir::TensorId weight;
  int outDim;
};
std::optional<WeightOperand> weightOperand(const ir::Graph& graph, const ir::Op& op) {
  if ((op.kind != ir::OpKind::kMatMul && op.kind != ir::OpKind::kGemm) || op.inputs.size() < 2) return std::nullopt;
  for (int operand : {1, 0}) {
    ir::TensorId w = op.inputs[operand];
    bool transposed = op.kind == ir::OpKind::kGemm && op.intAttr(operand == 1 ? "transB" : "transA", 0) != 0;
    if (graph.tensor(w).producer >= 0) {
      const ir::Op& producer = graph.op(graph.tensor(w).producer);
      const auto perm = producer.intsAttr("perm", {1, 0});
      if (producer.kind != ir::OpKind::kTranspose || graph.tensor(w).shape.size() != 2 || perm != std::vector<std::int64_t>{1, 0})
        continue;
      w = producer.inputs[0];
      transposed = !transposed;
    }
    const auto& t = graph.tensor(w);
    if (t.role != ir::TensorRole::kWeight || t.shape.size() != 2) continue;
    // [K, N] as the right operand, [M, K] as the left: the output dim is N or M.
    return WeightOperand{operand, w, (operand == 1) != transposed ? 1 : 0};
  }
  return std::nullopt;
}

}  // namespace

Mesh tensorMesh(const Plan& plan) {
  if (plan.split == TensorSplit::k2d && plan.tp > 1 && gridSide(plan.tp) > 0)
    return Mesh{{"r", "c"}, {gridSide(plan.tp), gridSide(plan.tp)}};
  return Mesh{{"tp"}, {plan.tp}};
}

Expected<ir::Graph> batchBlockGraph(const ir::Graph& graph, int blocks) {
  if (blocks <= 1) return graph;
  const Mesh mesh{{"dp"}, {blocks}};
  std::map<ir::TensorId, TensorSharding> annotations;
  for (ir::TensorId in : graph.inputs()) {
    const auto& t = graph.tensor(in);
    if (t.shape.empty() || t.shape[0] % blocks != 0)
      return modelError(t.name, fmt::format("the batch dim of input '{}' ({}) does not divide into dp x "
                                            "microbatches = {} blocks", t.name, t.shape.empty() ? 0 : t.shape[0],
                                            blocks));
    auto spec = TensorSharding::replicated(t.shape.size());
    spec.dimAxis[0] = 0;
    annotations[in] = spec;
  }
  auto propagated = propagateShardings(graph, mesh, annotations);
  if (!propagated) return propagated.error();
  for (const auto& r : propagated->reshards)
    for (const auto& step : r.steps)
      if (step.kind != ReshardKind::kSlice)
        return modelError(r.op >= 0 ? graph.op(r.op).name : graph.tensor(r.tensor).name,
                          fmt::format("needs a {} across the batch blocks of data parallelism and microbatches",
                                      reshardKindName(step.kind)));
  auto devices = shardGraph(graph, *propagated);
  if (!devices) return devices.error();
  return std::move(devices->graphs.front());
}

Expected<std::map<ir::TensorId, TensorSharding>> planAnnotations(const ir::Graph& graph, const Plan& plan,
                                                                 const Mesh& mesh) {
  std::map<ir::TensorId, TensorSharding> annotations;
  if (plan.tp <= 1) return annotations;
  if (plan.split == TensorSplit::kSpatial) {
    const int tp = mesh.axis("tp"), size = mesh.axisSizes[tp];
    for (ir::TensorId in : graph.inputs()) {
      const auto& t = graph.tensor(in);
      if (t.shape.size() != 4) continue;
      if (t.shape[2] % size != 0)
        return modelError(t.name, fmt::format("the height of input '{}' ({}) does not divide into tp = {} rows",
                                              t.name, t.shape[2], size));
      auto s = TensorSharding::replicated(4);
      s.dimAxis[2] = tp;
      annotations[in] = s;
    }
    return annotations;
  }
  if (plan.split == TensorSplit::k2d) {
    if (gridSide(plan.tp) == 0 || mesh.axisSizes.size() != 2)
      return makeError(ExitCode::kConfig, fmt::format("the 2d split runs on a q x q grid: tp = {} is not a square",
                                                      plan.tp));
    return gridAnnotations(graph, mesh);
  }
  const int tp = mesh.axis("tp"), size = mesh.axisSizes[tp];
  // Vocabulary-parallel embeddings: a lookup table's rows are split over tp (a device's lookups
  // outside its rows read zeros, and an all-reduce sums the partial results), in ceil-sized blocks
  // when tp does not divide the vocabulary (GPT-2/3's 50,257); a table of fewer rows than ranks
  // splits its columns instead.
  for (const auto& op : graph.ops()) {
    if (op.kind != ir::OpKind::kGather || op.inputs.size() != 2 || op.intAttr("axis", 0) != 0) continue;
    const auto& table = graph.tensor(op.inputs[0]);
    if (table.role != ir::TensorRole::kWeight || table.shape.size() != 2) continue;
    if (blockOf(table.shape[0], 1, size) < table.shape[0]) annotations[op.inputs[0]] = TensorSharding{{tp, -1}, {}};
    else if (blockOf(table.shape[1], 1, size) < table.shape[1]) annotations[op.inputs[0]] = TensorSharding{{-1, tp}, {}};
  }
  // Column-split one weight at a time, in topological order: whether a matmul's activation is
  // split over tp depends on the splits before it. The weight's output dim is split in the parts
  // later ops cut it into (a fused QKV weight's q, k and v), so every rank holds whole heads of each.
  const auto parts = consumerParts(graph);
  const auto granules = consumerGranules(graph);
  return chooseWeightsInOrder(graph, mesh, std::move(annotations),
                              [&](const ir::Op& op, const ShardingPlan& sofar,
                                  const std::map<ir::TensorId, TensorSharding>&) -> WeightChoice {
                                const auto found = weightOperand(graph, op);
                                if (!found) return std::nullopt;
                                const auto [operand, w, outDim] = *found;
                                const ir::TensorId x = op.inputs[1 - operand];
                                if (usesAxis(sofar.tensors[x], tp) || usesAxis(sofar.tensors[w], tp))
                                  return std::nullopt;
                                const auto& weight = graph.tensor(w);
                                auto spec = TensorSharding::replicated(2);
                                spec.dimAxis[outDim] = tp;
                                spec.setParts(outDim, parts[w][outDim]);
                                // A dim tp does not divide splits in ceil-sized blocks of the unit later
                                // ops keep whole (GPT-2's 50,257 logits; 12 heads over 8 ranks, a head's
                                // elements at a time): never replicated while it splits at all.
                                const std::int64_t extent = weight.shape[outDim], p = spec.parts(outDim);
                                std::int64_t g = granules[w][outDim];
                                if (extent % p != 0 || (extent / p) % g != 0) g = 1;
                                g = effectiveGranule(extent, p, size, g);
                                spec.setGranule(outDim, g);
                                if (extent % p != 0 || blockOf(extent, p, size, g) >= extent / p)
                                  return WeightChoice{{w, std::nullopt}};
                                return WeightChoice{{w, spec}};
                              });
}

Expected<DeviceGraphs> tensorParallelGraphs(const ir::Graph& block, const Plan& plan) {
  const Mesh mesh = tensorMesh(plan);
  auto annotations = planAnnotations(block, plan, mesh);
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
