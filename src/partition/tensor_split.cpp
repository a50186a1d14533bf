// The splits a plan applies to a graph, independent of any plan: the batch blocks of data
// parallelism and microbatches, and a tensor-parallel group's split (its mesh and annotations).
#include "partition/tensor_split.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "compile/ir/iteration_space.h"
#include "partition/sharding_spmd.h"

namespace tsp::partition {

const char* tensorSplitName(TensorSplit split) {
  switch (split) {
    case TensorSplit::kNone: return "none";
    case TensorSplit::kMegatron: return "megatron";
    case TensorSplit::k2d: return "2d";
    case TensorSplit::kSpatial: return "spatial";
  }
  return "none";
}

bool parseTensorSplit(const std::string& text, TensorSplit& split) {
  for (TensorSplit s : {TensorSplit::kNone, TensorSplit::kMegatron, TensorSplit::k2d, TensorSplit::kSpatial})
    if (text == tensorSplitName(s)) {
      split = s;
      return true;
    }
  return false;
}

namespace {

bool usesAxis(const TensorSharding& s, int axis) {
  return std::find(s.dimAxis.begin(), s.dimAxis.end(), axis) != s.dimAxis.end() ||
         std::find(s.partialAxes.begin(), s.partialAxes.end(), axis) != s.partialAxes.end();
}


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

}  // namespace

std::optional<WeightOperand> weightOperand(const ir::Graph& graph, const ir::Op& op) {
  if ((op.kind != ir::OpKind::kMatMul && op.kind != ir::OpKind::kGemm) || op.inputs.size() < 2) return std::nullopt;
  for (int operand : {1, 0}) {
    ir::TensorId w = op.inputs[operand];
    bool transposed = op.kind == ir::OpKind::kGemm && op.intAttr(operand == 1 ? "transB" : "transA", 0) != 0;
    if (graph.tensor(w).shape.size() != 2) continue;
    const bool direct = graph.tensor(w).producer < 0;
    if (graph.tensor(w).producer >= 0) {
      const ir::Op& producer = graph.op(graph.tensor(w).producer);
      const auto perm = producer.intsAttr("perm", {1, 0});
      if (producer.kind == ir::OpKind::kTranspose && perm == std::vector<std::int64_t>{1, 0}) {
        w = producer.inputs[0];
        transposed = !transposed;
      }
    }
    // [K, N] as the right operand, [M, K] as the left: the output dim is N or M.
    const int matrixDim = (operand == 1) != transposed ? 1 : 0;
    int outDim = matrixDim, contractedDim = 1 - matrixDim;
    if (graph.tensor(w).producer >= 0) {
      // One part of a fused weight, cut out by a Slice of unit step along the output dim
      // (nn.MultiheadAttention's in_proj_weight read as q, k and v apart): the weight itself, which
      // the column split then splits in the parts its Slices cut (consumerParts).
      const ir::Op& producer = graph.op(graph.tensor(w).producer);
      if (producer.kind == ir::OpKind::kSlice && !producer.inputs.empty()) {
        const auto& whole = graph.tensor(producer.inputs[0]);
        const auto space = ir::iterationSpace(graph, producer);
        const auto unitStep = [&] {
          if (!space || space->reads.empty() || space->reads[0].operand != 0) return false;
          const auto& index = space->reads[0].index;
          return index.size() == 2 && index[outDim].terms.size() == 1 && index[outDim].terms[0].coeff == 1;
        };
        if (whole.role == ir::TensorRole::kWeight && whole.shape.size() == 2 &&
            whole.shape[contractedDim] == graph.tensor(w).shape[contractedDim] && unitStep())
          w = producer.inputs[0];
      }
    }
    if (graph.tensor(w).producer >= 0) {
      const ir::Op& producer = graph.op(graph.tensor(w).producer);
      if (producer.kind != ir::OpKind::kReshape) continue;
      // [s0 .. sk-1] into [s0 .. sj-1 merged, sj .. sk-1 merged]: matrix dim 1 starts at weight dim j.
      const auto& matrix = graph.tensor(w).shape;
      const auto& shape = graph.tensor(producer.inputs[0]).shape;
      std::int64_t rows = 1;
      size_t j = 0;
      while (j < shape.size() && rows < matrix[0]) rows *= shape[j++];
      if (rows != matrix[0] || j == 0 || j == shape.size()) continue;
      w = producer.inputs[0];
      outDim = matrixDim == 0 ? 0 : static_cast<int>(j);
      contractedDim = matrixDim == 0 ? static_cast<int>(j) : 0;
    }
    if (graph.tensor(w).role != ir::TensorRole::kWeight) continue;
    return WeightOperand{operand, w, outDim, contractedDim, direct};
  }
  return std::nullopt;
}

Mesh tensorMesh(TensorSplit split, int tp) {
  if (split == TensorSplit::k2d && tp > 1 && gridSide(tp) > 0) return Mesh{{"r", "c"}, {gridSide(tp), gridSide(tp)}};
  return Mesh{{"tp"}, {tp}};
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

Expected<std::map<ir::TensorId, TensorSharding>> planAnnotations(const ir::Graph& graph, TensorSplit split,
                                                                 const Mesh& mesh) {
  std::map<ir::TensorId, TensorSharding> annotations;
  const int width = mesh.devices();
  if (width <= 1) return annotations;
  if (split == TensorSplit::kSpatial) {
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
  if (split == TensorSplit::k2d) {
    if (gridSide(width) == 0 || mesh.axisSizes.size() != 2)
      return makeError(ExitCode::kConfig, fmt::format("the 2d split runs on a q x q grid: tp = {} is not a square",
                                                      width));
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
                                const auto [operand, w, outDim, contractedDim, direct] = *found;
                                const ir::TensorId x = op.inputs[1 - operand];
                                const auto& weight = graph.tensor(w);
                                if (usesAxis(sofar.tensors[w], tp)) return std::nullopt;
                                if (usesAxis(sofar.tensors[x], tp)) {
                                  // Row-parallel: propagation splits a weight its matmul reads
                                  // directly; one behind a Transpose or Reshape is split here on its
                                  // contracted dim, in even blocks (else it stays whole).
                                  if (direct) return std::nullopt;
                                  if (weight.shape[contractedDim] % size != 0) return WeightChoice{{w, std::nullopt}};
                                  auto rows = TensorSharding::replicated(weight.shape.size());
                                  rows.dimAxis[contractedDim] = tp;
                                  return WeightChoice{{w, rows}};
                                }
                                auto spec = TensorSharding::replicated(weight.shape.size());
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

}  // namespace tsp::partition
