// The model profile: each distinct layer compiled alone (and at batch shares), the sharding's TP figures.
#include "partition/model_profile.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compile/lower/lowering.h"
#include "compile/schedule/cluster_schedule.h"
#include "partition/sharding.h"
#include "partition/sharding_spmd.h"
#include "partition/tensor_split.h"

namespace tsp::partition {

// A text that is equal for layers the compiler would lower identically (op kinds, shapes, dtypes,
// roles), so that the 96 identical blocks of a GPT are estimated once.
std::string layerSignature(const ir::Graph& graph, const std::vector<ir::OpId>& ops) {
  std::string text;
  std::map<ir::TensorId, int> local;
  for (ir::OpId id : ops) {
    const ir::Op& op = graph.op(id);
    text += ir::opKindName(op.kind);
    for (ir::TensorId t : op.inputs) {
      const auto& tensor = graph.tensor(t);
      auto found = local.find(t);
      text += found != local.end() ? fmt::format("(%{})", found->second)
                                   : fmt::format("({}:{}:{})", static_cast<int>(tensor.role), ir::dtypeName(tensor.dtype),
                                                 fmt::join(tensor.shape, "x"));
    }
    for (ir::TensorId t : op.outputs) {
      local.emplace(t, static_cast<int>(local.size()));
      text += fmt::format("[{}]", fmt::join(graph.tensor(t).shape, "x"));
    }
    for (const auto& [key, value] : op.attrs)
      if (const auto* ints = std::get_if<std::vector<std::int64_t>>(&value))
        text += fmt::format("{}={}", key, fmt::join(*ints, ","));
      else if (const auto* i = std::get_if<std::int64_t>(&value))
        text += fmt::format("{}={}", key, *i);
    text += ';';
  }
  return text;
}

// The layer's ops as a graph of their own (inputs from other layers become graph inputs), so that
// the compiler's per-layer estimate can be asked for one layer at a time.
Expected<ir::Graph> layerGraph(const ir::Graph& graph, const std::vector<ir::OpId>& ops) {
  ir::Graph sub;
  std::map<ir::TensorId, ir::TensorId> mapped;
  auto leaf = [&](ir::TensorId t) -> ir::TensorId {
    if (auto found = mapped.find(t); found != mapped.end()) return found->second;
    const ir::Tensor& tensor = graph.tensor(t);
    ir::TensorId id = 0;
    switch (tensor.role) {
      case ir::TensorRole::kWeight: id = sub.addWeight(tensor.name, tensor.shape, tensor.dtype, tensor.data); break;
      case ir::TensorRole::kConstant:
        id = tensor.data ? sub.addConstant(tensor.name, tensor.shape, tensor.dtype, tensor.data)
                         : sub.addWeight(tensor.name, tensor.shape, tensor.dtype);
        break;
      case ir::TensorRole::kState: id = sub.addState(tensor.name, tensor.shape, tensor.dtype); break;
      default: id = sub.addInput(tensor.name, tensor.shape, tensor.dtype); break;
    }
    mapped.emplace(t, id);
    return id;
  };
  for (ir::OpId id : ops) {
    const ir::Op& op = graph.op(id);
    std::vector<ir::TensorId> inputs;
    for (ir::TensorId t : op.inputs) inputs.push_back(leaf(t));
    std::vector<std::string> names;
    for (ir::TensorId t : op.outputs) names.push_back(graph.tensor(t).name);
    auto outs = sub.addMultiOp(op.kind, op.name, inputs, op.attrs, 0, names);
    if (!outs) return outs.error();
    for (size_t i = 0; i < op.outputs.size() && i < outs->size(); ++i) mapped[op.outputs[i]] = (*outs)[i];
  }
  return sub;
}

namespace {

// The weights an op installs: its weight inputs, or the weight a MatMul or Gemm reads through a
// Transpose or Reshape (`weightOperand`: torch exports nn.Linear as a MatMul on Transpose(W)); of a
// fused weight cut apart by a Slice, the op's operand (the part it installs).
std::vector<ir::TensorId> installedWeights(const ir::Graph& graph, const ir::Op& op) {
  std::vector<ir::TensorId> weights;
  for (ir::TensorId t : op.inputs)
    if (graph.tensor(t).role == ir::TensorRole::kWeight) weights.push_back(t);
  if (weights.empty())
    if (auto found = weightOperand(graph, op)) {
      const ir::TensorId operand = op.inputs[found->operand];
      weights.push_back(graph.tensor(found->weight).elements() > graph.tensor(operand).elements() ? operand
                                                                                                  : found->weight);
    }
  return weights;
}

bool isWeightMatmul(const ir::Graph& graph, const ir::Op& op) {
  if (op.kind != ir::OpKind::kMatMul && op.kind != ir::OpKind::kGemm && op.kind != ir::OpKind::kFusedMatMul) return false;
  return !installedWeights(graph, op).empty();
}

Bytes weightOperandBytes(const ir::Graph& graph, const ir::Op& op) {
  Bytes bytes = 0;
  for (ir::TensorId t : installedWeights(graph, op)) bytes += graph.tensor(t).bytes();
  return bytes;
}

// The MXM's passes over an op's weights when few rows stream through it: every 320 x 320 tile of a
// weight (a 2-D weight's rows and columns in tiles, others by elements) takes at least one weight
// install per pass, 2-byte types mxmFp16RateDivisor passes, spread over the planes. A tensor
// split divides these with the weights.
Cycle weightTileCycles(const ir::Graph& graph, const ir::Op& op, const topology::ChipSpec& chip) {
  const std::int64_t dim = chip.mxmPlaneDim;
  std::int64_t passes = 0;
  for (ir::TensorId t : installedWeights(graph, op)) {
    const ir::Tensor& w = graph.tensor(t);
    std::int64_t elements = 1;
    for (auto d : w.shape) elements *= d;
    const std::int64_t tiles = w.shape.size() == 2 ? ceilDiv(w.shape[0], dim) * ceilDiv(w.shape[1], dim)
                                                   : ceilDiv(elements, dim * dim);
    passes += tiles * (ir::dtypeBytes(w.dtype) >= 2 ? chip.mxmFp16RateDivisor : 1);
  }
  return ceilDiv(passes * chip.mxmWeightInstallCycles, Cycle{chip.mxmPlanes});
}

// Bytes of a tensor as the links carry it: rows of whole 320-byte vectors (a 2048-byte row is 7),
// in the layout the lowering stores it in (`channelsLast`: lower::channelsLastTensors of the graph;
// a CNN's feature map [N, C, H, W] is N*H*W rows of C).
Bytes linkBytes(const topology::ChipSpec& chip, const ir::Graph& graph, ir::TensorId id,
                const std::vector<bool>& channelsLast) {
  const auto [rows, tiles] = lower::storageGeometry(chip, graph, id, channelsLast[static_cast<size_t>(id)]);
  return Bytes{rows} * tiles * chip.vectorBytes;
}

// The compiler's figures for one distinct layer.
struct LayerEstimate {
  Cycle cycles = 0;
  Cycle fixedCycles = -1;  ///< the part that does not shrink with the batch; -1: not measured
  std::vector<std::pair<double, Cycle>> batchCycles;  ///< (share of the batch, cycles), ascending
  double sendHiddenPerShare = -1;  ///< send cycles the layer's compute hides, per share of the batch
  std::string error;       ///< why the compiler could not lower it, or empty
};

// Block 0 of the layer with its batch split `parts` ways by the sharding mechanism; empty when the
// inputs do not all lead with the batch or a split would need communication.
std::optional<ir::Graph> batchSlice(const ir::Graph& layer, std::int64_t batch, int parts) {
  std::map<ir::TensorId, TensorSharding> annotations;
  for (ir::TensorId in : layer.inputs()) {
    const auto& t = layer.tensor(in);
    if (t.shape.empty() || t.shape[0] != batch) return std::nullopt;
    auto spec = TensorSharding::replicated(t.shape.size());
    spec.dimAxis[0] = 0;
    annotations[in] = spec;
  }
  const Mesh mesh{{"dp"}, {parts}};
  auto plan = propagateShardings(layer, mesh, annotations);
  if (!plan || !plan->reshards.empty()) return std::nullopt;
  auto devices = shardGraph(layer, *plan);
  if (!devices) return std::nullopt;
  return std::move(devices->graphs.front());
}

// Cycles of a one-layer graph on one chip; with linkCycles > 0 its outbound tensors (made and not
// used inside) leave over a link port of one vector per `linkCycles` cycles, paced as a stage's
// sends are (schedule::linkPace: at the link's exact rate).
Expected<Cycle> compileLayerAlone(const ir::Graph& layer, const topology::ChipSpec& chip, double linkCycles) {
  if (linkCycles <= 0) {
    auto cycles = schedule::estimateLayerCycles(layer, chip);
    if (!cycles) return cycles.error();
    if (cycles->empty()) return makeError(ExitCode::kInternal, "no layer");
    return cycles->front();
  }
  std::vector<ir::OpId> ops;
  lower::ShardInterface interface;
  for (size_t i = 0; i < layer.ops().size(); ++i) {
    ops.push_back(static_cast<ir::OpId>(i));
    for (ir::TensorId out : layer.op(i).outputs)
      if (layer.tensor(out).users.empty()) {
        lower::SendPlan send;
        send.tensor = out;
        const schedule::LinkPace pace = schedule::linkPace(linkCycles);
        send.interval = pace.interval;
        send.spacing = pace.spacing;
        interface.sends.push_back(send);
      }
  }
  // The layer stands for one shard of a plan of many, and is compiled as the plan compiles those.
  auto compiled = schedule::compileShard(chip, layer, ops, interface, schedule::Options{}.asShardOfMany());
  if (!compiled) return compiled.error();
  return compiled->program.predictedCycles;
}

// The profile's compile results by key (a layer's signature and what is compiled of it), filled
// ahead of the walk over the layers by one batch of what the walk will ask for as far as it can be
// told beforehand; anything else the walk asks is compiled where it is asked. Compiling is
// deterministic, so the profile is the same whichever way a result came.
class LayerCycles {
 public:
  explicit LayerCycles(const topology::ChipSpec& chip) : chip_(chip) {}

  /// Asks for a compile in the batch; `graph` is kept until run().
  void plan(const std::string& key, ir::Graph graph, double linkCycles, std::vector<ir::OpId> shardOps = {}) {
    if (!planned_.insert(key).second || known_.count(key)) return;
    graphs_.push_back(std::move(graph));
    keys_.push_back(key);
    jobs_.push_back({&graphs_.back(), linkCycles, std::move(shardOps)});
  }

  /// Whether `key` was asked for already (its graph need not be built again).
  bool planned(const std::string& key) const { return planned_.count(key) || known_.count(key); }

  /// The compile under `key` when a batch had it, else null.
  const Expected<Cycle>* find(const std::string& key) const {
    auto found = known_.find(key);
    return found == known_.end() ? nullptr : &found->second;
  }

  /// Compiles the batch asked for (by `compile`, or here).
  void run(const LayerCompileBatch& compile, const support::ProgressFn& progress) {
    if (jobs_.empty()) return;
    auto results = compile ? compile(chip_, jobs_, progress) : compileLayers(chip_, jobs_, progress);
    for (size_t i = 0; i < keys_.size() && i < results.size(); ++i) known_.emplace(keys_[i], std::move(results[i]));
    graphs_.clear();
    keys_.clear();
    jobs_.clear();
  }

  /// The compile under `key`, compiled here from `graph` when the batch did not have it.
  Expected<Cycle> get(const std::string& key, const ir::Graph& graph, double linkCycles,
                      std::vector<ir::OpId> shardOps = {}) {
    auto found = known_.find(key);
    if (found == known_.end())
      found = known_.emplace(key, compileLayer(chip_, LayerCompile{&graph, linkCycles, std::move(shardOps)})).first;
    return found->second;
  }

 private:
  const topology::ChipSpec& chip_;
  std::map<std::string, Expected<Cycle>> known_;
  std::set<std::string> planned_;
  std::deque<ir::Graph> graphs_;
  std::vector<std::string> keys_;
  std::vector<LayerCompile> jobs_;
};

// A layer whose weights do not fit one chip, estimated by the compiler op by op: each op alone,
// and an op whose weights exceed a quarter of the SRAM split by the sharding mechanism into k
// chip-sized pieces (a matmul's weight by columns, a lookup table by rows; k the smallest power of
// two that fits), one piece compiled (weight installation included) and counted k times. Each
// compile goes through `cycles`, asked for in a batch ahead (plan) and read back (get), by one
// walk over the ops. Errors when an op cannot be lowered or split.
Expected<Cycle> piecewiseLayerCycles(const ir::Graph& graph, const std::vector<ir::OpId>& ops,
                                     const topology::ChipSpec& chip, LayerCycles& cycles, bool plan) {
  Cycle total = 0;
  const Bytes fits = chip.sramBytes() / 4;
  // One compile, `times` over: planned (0 cycles) or read back.
  auto count = [&](const std::string& key, ir::Graph sub, std::vector<ir::OpId> shardOps, int times) -> Expected<Cycle> {
    if (plan) {
      cycles.plan(key, std::move(sub), 0, std::move(shardOps));
      return Cycle{0};
    }
    auto c = cycles.get(key, sub, 0, std::move(shardOps));
    if (!c) return c.error();
    return *c * times;
  };
  for (ir::OpId id : ops) {
    auto single = layerGraph(graph, {id});
    if (!single) return single.error();
    const ir::Op& op = single->op(0);
    const std::string signature = layerSignature(*single, {0});
    Bytes weights = 0;
    for (ir::TensorId t : op.inputs)
      if (single->tensor(t).role == ir::TensorRole::kWeight) weights += single->tensor(t).bytes();
    if (weights <= fits) {
      auto c = count(fmt::format("op {}", signature), std::move(*single), {}, 1);
      if (!c) return c.error();
      total += *c;
      continue;
    }
    const bool lookup = op.kind == ir::OpKind::kGather && op.intAttr("axis", 0) == 0;
    if ((op.kind != ir::OpKind::kMatMul && !lookup) || op.inputs.size() != 2 ||
        single->tensor(op.inputs[lookup ? 0 : 1]).shape.size() != 2)
      return modelError(op.name, fmt::format("{} with {} bytes of weights does not fit one chip and is not split",
                                             ir::opKindName(op.kind), weights));
    const ir::TensorId w = op.inputs[lookup ? 0 : 1];
    const std::int64_t along = single->tensor(w).shape[lookup ? 0 : 1];
    int pieces = 2;
    while (ceilDiv(weights, Bytes{pieces}) > fits && pieces < (1 << 12)) pieces *= 2;
    if (along % pieces != 0)
      return modelError(op.name, fmt::format("its weight ({} along the split) does not divide into {} pieces", along,
                                             pieces));
    const std::string key = fmt::format("piece {}/{}", pieces, signature);
    if (plan && cycles.planned(key)) continue;
    const Mesh mesh{{"piece"}, {pieces}};
    auto spec = TensorSharding::replicated(2);
    spec.dimAxis[lookup ? 0 : 1] = 0;
    auto sharding = propagateShardings(*single, mesh, {{w, spec}});
    if (!sharding) return sharding.error();
    auto devices = shardGraph(*single, *sharding);
    if (!devices) return devices.error();
    ir::Graph& piece = devices->graphs.front();
    std::vector<ir::OpId> compute;
    for (size_t i = 0; i < piece.ops().size(); ++i) {
      const ir::OpKind kind = piece.op(i).kind;
      if (kind != ir::OpKind::kAllReduce && kind != ir::OpKind::kAllGather && kind != ir::OpKind::kReduceScatter &&
          kind != ir::OpKind::kAllToAll)
        compute.push_back(static_cast<ir::OpId>(i));
    }
    auto c = count(key, std::move(piece), std::move(compute), pieces);
    if (!c) return c.error();
    total += *c;
  }
  return total;
}

// The layer's cycles at shares 1, 1/2, 1/4, ... of the batch (the shares the sharding mechanism
// can split off, at most kBatchPoints), the fixed part (where the line through the two smallest
// shares meets zero rows: weight installation, pipeline fill) and, when the layer sends tensors on,
// how many send cycles its compute hides at the smallest share (compiled again with the sends on
// a link of the chip's default rate).
constexpr int kBatchPoints = 6;

// The link of a layer's sends as measureLayer compiles them: one vector per this many cycles (a
// fraction) on a link of the chip's default rate.
double sendVectorCycles(const topology::ChipSpec& chip) {
  const double bytesPerCycle =
      chip.c2cLanesPerLink * chip.c2cGbpsPerLane * 1e9 / 8.0 * (1.0 - chip.c2cFramingOverhead) / (chip.clockMhz * 1e6);
  return chip.vectorBytes / bytesPerCycle;
}

// Keys of LayerCycles: a layer alone, its batch split `parts` ways (1: whole), with sends; a pair.
std::string aloneKey(const std::string& signature, int parts, double linkCycles) {
  return fmt::format("layer {}/{}/{}", parts, linkCycles, signature);
}
std::string pairKey(const std::string& first, const std::string& second) {
  return fmt::format("pair {}|{}", first, second);
}

// What measureLayer compiles of a layer that compiles alone, asked of the batch ahead: every batch
// share it can split off and the sends at the smallest (as though every share compiled).
void planMeasure(LayerCycles& cycles, const ir::Graph& layer, const std::string& signature,
                 const topology::ChipSpec& chip, std::int64_t batch, bool sends) {
  int smallest = 1;
  std::optional<ir::Graph> probe;
  for (int parts = 2, points = 1; batch % parts == 0 && points < kBatchPoints; parts *= 2, ++points) {
    auto slice = batchSlice(layer, batch, parts);
    if (!slice) break;
    if (sends) probe = *slice;
    cycles.plan(aloneKey(signature, parts, 0), std::move(*slice), 0);
    smallest = parts;
  }
  if (sends) cycles.plan(aloneKey(signature, smallest, sendVectorCycles(chip)), probe ? std::move(*probe) : layer,
                         sendVectorCycles(chip));
}

void measureLayer(const ir::Graph& layer, const std::string& signature, const topology::ChipSpec& chip,
                  std::int64_t batch, bool sends, LayerCycles& compiled, LayerEstimate& value) {
  value.batchCycles = {{1.0, value.cycles}};
  std::optional<ir::Graph> smallest;
  int smallestParts = 1;
  for (int parts = 2; batch % parts == 0 && static_cast<int>(value.batchCycles.size()) < kBatchPoints; parts *= 2) {
    auto slice = batchSlice(layer, batch, parts);
    if (!slice) break;
    auto cycles = compiled.get(aloneKey(signature, parts, 0), *slice, 0);
    if (!cycles) break;
    value.batchCycles.insert(value.batchCycles.begin(), {1.0 / parts, *cycles});
    smallest = std::move(*slice);
    smallestParts = parts;
  }
  if (value.batchCycles.size() >= 2) {
    const auto [f0, c0] = value.batchCycles[0];
    const auto [f1, c1] = value.batchCycles[1];
    const double slope = static_cast<double>(c1 - c0) / (f1 - f0);
    value.fixedCycles = static_cast<Cycle>(
        std::clamp(std::llround(static_cast<double>(c0) - slope * f0), 0LL, static_cast<long long>(value.cycles)));
  }
  if (!sends) return;
  const ir::Graph& probe = smallest ? *smallest : layer;
  const double share = value.batchCycles.front().first;
  const double linkCycles = sendVectorCycles(chip);
  auto withSends = compiled.get(aloneKey(signature, smallestParts, linkCycles), probe, linkCycles);
  if (!withSends) return;
  double serialise = 0;
  const std::vector<bool> channelsLast = lower::channelsLastTensors(probe);
  for (const auto& op : probe.ops())
    for (ir::TensorId out : op.outputs)
      if (probe.tensor(out).users.empty())
        serialise += static_cast<double>(linkBytes(chip, probe, out, channelsLast)) / chip.vectorBytes * linkCycles;
  const double exposed = static_cast<double>(*withSends - value.batchCycles.front().second);
  value.sendHiddenPerShare = std::clamp(serialise - exposed, 0.0, serialise) / share;
}

// Collectives and point-to-point transfers: no compute of a layer's own.
bool isCollectiveOrTransfer(ir::OpKind kind) {
  return kind == ir::OpKind::kAllReduce || kind == ir::OpKind::kAllGather || kind == ir::OpKind::kReduceScatter ||
         kind == ir::OpKind::kAllToAll || kind == ir::OpKind::kSend || kind == ir::OpKind::kRecv;
}

// An op's compute on one chip by the FLOP-based rates: MACs at the MXM peak (INT8; 2-byte types
// at 1/mxmFp16RateDivisor of it), other FLOPs one element per lane byte-group per ALU group a cycle.
double opEstimateCycles(const ir::Graph& graph, const ir::Op& op, const topology::ChipSpec& chip) {
  const double flops = static_cast<double>(ir::opFlops(graph, op));
  const ir::DType type = op.inputs.empty() ? ir::DType::kF16 : graph.tensor(op.inputs[0]).dtype;
  const int width = std::max(1, ir::dtypeBytes(type));
  if (ir::isMacOp(op.kind))
    return flops / 2.0 / (static_cast<double>(chip.int8MacsPerCycle()) / (width >= 2 ? chip.mxmFp16RateDivisor : 1));
  return flops / (static_cast<double>(chip.vectorBytes) / width * chip.vxmAluGroups);
}

// A weight or constant (not an input, activation or KV cache): what a layer's weight bytes count.
bool isWeightOrConstant(const ir::Tensor& tensor) {
  return tensor.producer < 0 && tensor.role != ir::TensorRole::kInput &&
         tensor.role != ir::TensorRole::kActivation && tensor.role != ir::TensorRole::kState;
}

// Each layer's compute by the FLOP-based rates, collectives and transfers left out; a matmul on a
// resident operand (weights, a KV cache) takes at least that operand's installs.
std::vector<double> layerComputeCycles(const ir::Graph& graph, const topology::ChipSpec& chip, int layerCount) {
  const Bytes installBytes = Bytes{chip.mxmPlanes} * chip.mxmPlaneDim * chip.mxmPlaneDim;
  std::vector<double> cycles(layerCount, 0);
  for (const ir::Op& op : graph.ops()) {
    if (isCollectiveOrTransfer(op.kind)) continue;
    double c = opEstimateCycles(graph, op, chip);
    if (ir::isMacOp(op.kind)) {
      Bytes resident = weightOperandBytes(graph, op);
      for (ir::TensorId t : op.inputs)
        if (graph.tensor(t).producer < 0 && graph.tensor(t).role == ir::TensorRole::kState)
          resident += graph.tensor(t).bytes();
      c = std::max(c, static_cast<double>(ceilDiv(resident, installBytes) * chip.mxmWeightInstallCycles));
    }
    cycles[std::clamp(op.layer, 0, layerCount - 1)] += c;
  }
  return cycles;
}

// The figures of one propagated sharding for every layer: each reshard step counted in the layer of
// the op it feeds (an all-reduce as one, an all-gather, reduce-scatter or all-to-all as the
// (t-1)/t form), with the bytes of the whole tensor as the links carry them, on a one-axis mesh
// (Megatron) as such and on a two-axis mesh (2D) per axis, split or whole on the other; a layer's
// output leaves split when a later layer receives it split; the compute one rank does and what it
// holds, from rank 0's materialised graph; the bytes a rank holds of each shared leaf.
Expected<std::vector<LayerProfile::WidthFigures>> shardingFigures(const ir::Graph& graph,
                                                                  const topology::ChipSpec& chip,
                                                                  const ShardingPlan& sharding, int layerCount,
                                                                  const std::vector<ir::TensorId>& shared,
                                                                  std::vector<Bytes>& sharedRankBytes,
                                                                  const std::vector<bool>& piecewise,
                                                                  LayerCycles& rankRuns,
                                                                  std::vector<std::vector<std::string>>& rankRunKeys) {
  sharedRankBytes.clear();
  for (ir::TensorId t : shared)
    sharedRankBytes.push_back(localBytes(graph.tensor(t), sharding.tensors[t], sharding.mesh));
  std::vector<LayerProfile::WidthFigures> figures(layerCount);
  const int last = layerCount - 1;
  const bool grid = sharding.mesh.axisSizes.size() == 2;
  auto layerOf = [&](ir::OpId op) { return std::clamp(op >= 0 ? graph.op(op).layer : last, 0, last); };
  const std::vector<bool> channelsLast = lower::channelsLastTensors(graph);
  for (const auto& r : sharding.reshards) {
    auto& layer = figures[layerOf(r.op)];
    const Bytes bytes = linkBytes(chip, graph, r.tensor, channelsLast);
    for (const auto& step : r.steps) {
      const bool reduce = step.kind == ReshardKind::kAllReduce;
      const bool gather = step.kind == ReshardKind::kAllGather || step.kind == ReshardKind::kReduceScatter ||
                          step.kind == ReshardKind::kAllToAll;
      if (!reduce && !gather) continue;
      if (grid) {
        const int other = 1 - step.axis;
        const int split = std::find(r.from.dimAxis.begin(), r.from.dimAxis.end(), other) != r.from.dimAxis.end();
        auto& axis = layer.grid[std::clamp(step.axis, 0, 1)];
        (reduce ? axis.allReduces : axis.allGathers) += 1;
        (reduce ? axis.allReduceBytes : axis.allGatherBytes)[split] += bytes;
      } else {
        (reduce ? layer.allReduces : layer.allGathers) += 1;
        (reduce ? layer.allReduceBytes : layer.allGatherBytes) += bytes;
      }
    }
  }
  for (size_t i = 0; i < graph.ops().size(); ++i) {
    const ir::Op& op = graph.op(i);
    for (ir::TensorId t : op.inputs) {
      const ir::OpId producer = graph.tensor(t).producer;
      if (producer < 0 || graph.op(producer).layer == op.layer) continue;
      const auto& spec = sharding.tensors[t];
      if (std::any_of(spec.dimAxis.begin(), spec.dimAxis.end(), [](int a) { return a >= 0; }))
        figures[layerOf(producer)].outputSplit = true;
    }
  }
  // Compute and memory: what rank 0's graph does and holds, as the runtime materialises it (every
  // rank's blocks have its shapes; a block the width does not divide is padded, and its padding
  // computed). A layer without compute splits as the mesh does.
  auto rank = shardDevice(graph, sharding, 0, false);
  if (!rank) return rank.error();
  const auto memory = layerMemory(*rank, layerCount);
  const auto whole = layerComputeCycles(graph, chip, layerCount), ranks = layerComputeCycles(*rank, chip, layerCount);
  for (int l = 0; l < layerCount; ++l) {
    figures[l].rank = memory[l];
    figures[l].computeShare = whole[l] > 0 ? ranks[l] / whole[l] : 1.0 / sharding.mesh.devices();
  }
  // A layer estimated piecewise has no fixed part to keep whole (splitCycles): a FLOP share of it
  // would divide the latencies of its chain of small ops (norms, softmax, reshapes) by the width
  // too. Its rank's compute is rank 0's layer as the plan compiles it once that fits one chip: the
  // runs of ops between its collectives, each compiled alone (once per distinct run), summed.
  std::vector<std::vector<std::vector<ir::OpId>>> runs(layerCount);
  for (size_t i = 0; i < rank->ops().size(); ++i) {
    const ir::Op& op = rank->op(i);
    auto& layer = runs[std::clamp(op.layer, 0, last)];
    if (isCollectiveOrTransfer(op.kind)) {
      if (!layer.empty() && !layer.back().empty()) layer.emplace_back();
      continue;
    }
    if (layer.empty()) layer.emplace_back();
    layer.back().push_back(static_cast<ir::OpId>(i));
  }
  // The runs are asked of `rankRuns` (once per distinct run) and their keys kept per layer in
  // rankRunKeys; rankCycles is summed from them once the batch has compiled (rankLayerCycles).
  rankRunKeys.assign(layerCount, {});
  for (int l = 0; l < layerCount; ++l) {
    if (l >= static_cast<int>(piecewise.size()) || !piecewise[l] ||
        memory[l].weightBytes + memory[l].stateBytes > chip.sramBytes() / 2)
      continue;
    for (const auto& run : runs[l]) {
      if (run.empty()) continue;
      const std::string key = aloneKey(layerSignature(*rank, run), 1, 0);
      if (!rankRuns.planned(key))
        if (auto sub = layerGraph(*rank, run)) rankRuns.plan(key, std::move(*sub), 0);
      rankRunKeys[l].push_back(key);
    }
  }
  return figures;
}

// A layer's rank cycles from its runs' compiles: their sum, 0 when a run did not compile (the FLOP
// share then stands) or the layer has no runs.
Cycle rankLayerCycles(const LayerCycles& rankRuns, const std::vector<std::string>& keys) {
  Cycle total = 0;
  for (const std::string& key : keys) {
    const auto* cycles = rankRuns.find(key);
    if (!cycles || !*cycles || **cycles <= 0) return 0;
    total += **cycles;
  }
  return total;
}

// The widths profileModel computes the sharding figures at: tp 2 and 2 x 2 (the fields without a
// width) and every width up to `upTo`; widenProfile computes the others.
bool figuredFirst(int axis, int tp, int upTo) { return axis == 2 || tp <= upTo; }

// Megatron's and the 2D split's figures at the widths the search tries (powers of two up to
// kWidestSplit; 2D on q x q grids): those up to costed.upTo (and tp 2, 2 x 2), or with `wider` the
// rest. Each from the runtime's sharding at that width: the plan annotations on the whole graph,
// propagated, and rank 0's graph materialised; rank layers compiled at the widths costed.measured
// only. The fields without a width (the tp = 2 and 2 x 2 figures) come along. False when Megatron's
// sharding fails at tp = 2 (the layers then keep the graph-order pairing).
bool tensorParallelFigures(const ir::Graph& graph, const topology::ChipSpec& chip, ModelProfile& profile,
                           const std::vector<ir::TensorId>& shared, const CostedWidths& costed, bool wider,
                           const LayerCompileBatch& compile = {}, const support::ProgressFn& progress = {}) {
  const int costedTp = costed.upTo;
  const int layerCount = static_cast<int>(profile.layers.size());
  std::vector<bool> piecewise(layerCount);
  for (int l = 0; l < layerCount; ++l)
    piecewise[l] = !profile.layers[l].fallback && profile.layers[l].batchCycles.size() < 2 &&
                   (profile.layers[l].weightBytes > chip.sramBytes() / 2 || !profile.layers[l].batchCycles.empty());
  LayerCycles rankRuns(chip);
  std::vector<std::tuple<TensorSplit, int, std::vector<std::vector<std::string>>>> rankRunKeys;
  bool megatron = false;
  for (TensorSplit split : {TensorSplit::kMegatron, TensorSplit::k2d}) {
    for (int axis = 2; axis <= (split == TensorSplit::k2d ? 64 : kWidestSplit); axis *= 2) {
      const int tp = split == TensorSplit::k2d ? axis * axis : axis;
      if (figuredFirst(axis, tp, costedTp) == wider) continue;
      const Mesh mesh = tensorMesh(split, tp);
      auto annotations = planAnnotations(graph, split, mesh);
      auto propagated = annotations ? propagateShardings(graph, mesh, *annotations)
                                    : Expected<ShardingPlan>(annotations.error());
      std::vector<Bytes> sharedRankBytes;
      const std::vector<bool> none;
      std::vector<std::vector<std::string>> keys;
      auto figures = propagated ? shardingFigures(graph, chip, *propagated, layerCount, shared, sharedRankBytes,
                                                  costed.measures(split, tp) ? piecewise : none, rankRuns, keys)
                                : Expected<std::vector<LayerProfile::WidthFigures>>(propagated.error());
      if (!figures) continue;
      rankRunKeys.emplace_back(split, tp, std::move(keys));
      for (int l = 0; l < layerCount; ++l)
        (split == TensorSplit::k2d ? profile.layers[l].gridAt : profile.layers[l].megatronAt)[tp] = (*figures)[l];
      for (size_t k = 0; k < shared.size(); ++k)
        profile.sharedLeaves[k].rankBytesAt[{static_cast<int>(split), tp}] = sharedRankBytes[k];
      if (axis != 2) continue;
      for (int l = 0; l < layerCount; ++l) {
        LayerProfile& layer = profile.layers[l];
        const auto& f = (*figures)[l];
        if (split == TensorSplit::k2d) {
          layer.grid[0] = f.grid[0];
          layer.grid[1] = f.grid[1];
        } else {
          layer.allReduces = f.allReduces;
          layer.allGathers = f.allGathers;
          layer.allReduceBytes = f.allReduceBytes;
          layer.allGatherBytes = f.allGatherBytes;
          layer.outputSplit = f.outputSplit;
        }
      }
      megatron = megatron || split == TensorSplit::kMegatron;
    }
  }
  // The rank layers of every width in one batch.
  rankRuns.run(compile, progress);
  for (const auto& [split, tp, keys] : rankRunKeys) {
    for (int l = 0; l < layerCount && l < static_cast<int>(keys.size()); ++l) {
      LayerProfile& layer = profile.layers[l];
      (split == TensorSplit::k2d ? layer.gridAt : layer.megatronAt)[tp].rankCycles = rankLayerCycles(rankRuns, keys[l]);
    }
  }
  return megatron;
}

}  // namespace

std::vector<LayerMemory> layerMemory(const ir::Graph& graph, int layerCount) {
  std::vector<LayerMemory> memory(std::max(1, layerCount));
  const int last = static_cast<int>(memory.size()) - 1;
  std::vector<std::set<ir::TensorId>> leaves(memory.size());
  for (const ir::Op& op : graph.ops()) {
    const int l = std::clamp(op.layer, 0, last);
    LayerMemory& layer = memory[l];
    Bytes live = 0;
    for (ir::TensorId t : op.inputs) {
      const ir::Tensor& tensor = graph.tensor(t);
      if (tensor.producer < 0 && tensor.role != ir::TensorRole::kInput && tensor.role != ir::TensorRole::kActivation) {
        if (!leaves[l].insert(t).second) continue;
        (tensor.role == ir::TensorRole::kState ? layer.stateBytes : layer.weightBytes) += tensor.bytes();
      } else {
        live += tensor.bytes();
      }
    }
    for (ir::TensorId t : op.outputs) live += graph.tensor(t).bytes();
    layer.peakBytes = std::max(layer.peakBytes, live);
  }
  return memory;
}

const LayerProfile::WidthFigures* LayerProfile::figuresAt(TensorSplit split, int tp) const {
  if (split != TensorSplit::kMegatron && split != TensorSplit::k2d) return nullptr;
  const auto& byWidth = split == TensorSplit::kMegatron ? megatronAt : gridAt;
  auto found = byWidth.find(tp);
  return found == byWidth.end() ? nullptr : &found->second;
}

Expected<Cycle> compiledCycles(const ir::Graph& layer, const topology::ChipSpec& chip, double linkCycles) {
  return compileLayerAlone(layer, chip, linkCycles);
}

Expected<Cycle> compileLayer(const topology::ChipSpec& chip, const LayerCompile& job) {
  if (job.shardOps.empty()) return compileLayerAlone(*job.graph, chip, job.linkCycles);
  auto compiled = schedule::compileShard(chip, *job.graph, job.shardOps, lower::ShardInterface{},
                                         schedule::Options{}.asShardOfMany());
  if (!compiled) return compiled.error();
  return compiled->program.predictedCycles;
}

std::vector<Expected<Cycle>> compileLayers(const topology::ChipSpec& chip, const std::vector<LayerCompile>& jobs,
                                           const support::ProgressFn& progress) {
  std::vector<Expected<Cycle>> out;
  out.reserve(jobs.size());
  for (const auto& job : jobs) {
    out.push_back(compileLayer(chip, job));
    if (progress) progress(static_cast<std::int64_t>(out.size()), static_cast<std::int64_t>(jobs.size()));
  }
  return out;
}

Cycle flopEstimateCycles(const ir::Graph& graph, const std::vector<ir::OpId>& ops, const topology::ChipSpec& chip) {
  double cycles = 0;
  for (ir::OpId id : ops) cycles += opEstimateCycles(graph, graph.op(id), chip);
  return static_cast<Cycle>(std::ceil(cycles)) + chip.rippleCycles;
}

namespace {

// The weights and constants that several layers read, with those layers.
std::vector<std::pair<ir::TensorId, std::set<int>>> sharedLeafReaders(const ir::Graph& graph, int layerCount) {
  std::map<ir::TensorId, std::set<int>> readers;
  for (size_t i = 0; i < graph.ops().size(); ++i)
    for (ir::TensorId t : graph.op(i).inputs) {
      const ir::Tensor& tensor = graph.tensor(t);
      if (isWeightOrConstant(tensor)) readers[t].insert(std::clamp(graph.op(i).layer, 0, layerCount - 1));
    }
  std::vector<std::pair<ir::TensorId, std::set<int>>> shared;
  for (auto& [t, layers] : readers)
    if (layers.size() > 1) shared.emplace_back(t, std::move(layers));
  return shared;
}

std::vector<ir::TensorId> leafTensors(const std::vector<std::pair<ir::TensorId, std::set<int>>>& shared) {
  std::vector<ir::TensorId> tensors;
  for (const auto& entry : shared) tensors.push_back(entry.first);
  return tensors;
}

}  // namespace

CostedWidths searchedWidths(int cap) {
  CostedWidths widths{cap, {}};
  for (int t = 2; t <= cap; t *= 2) widths.measured.insert({TensorSplit::kMegatron, t});
  for (int q = 2; q * q <= cap; q *= 2) widths.measured.insert({TensorSplit::k2d, q * q});
  return widths;
}

CostedWidths planWidths(TensorSplit split, int tp, int upTo) {
  CostedWidths widths{upTo, {}};
  if (tp >= 2) widths.measured.insert({split, tp});
  return widths;
}

void widenProfile(const ir::Graph& graph, const topology::ChipSpec& chip, ModelProfile& profile) {
  if (profile.figuresUpTo >= kWidestSplit) return;
  if (profile.hasWeightMatmul) {
    const int layerCount = static_cast<int>(profile.layers.size());
    tensorParallelFigures(graph, chip, profile, leafTensors(sharedLeafReaders(graph, layerCount)),
                          CostedWidths{profile.figuresUpTo, {}}, true);
  }
  profile.figuresUpTo = kWidestSplit;
}

Expected<ModelProfile> profileModel(const ir::Graph& graph, const topology::ChipSpec& chip, std::int64_t samples,
                                    const support::ProgressFn& progress, const CostedWidths& costed,
                                    const LayerCompileBatch& compile) {
  ModelProfile profile;
  profile.samples = std::max<std::int64_t>(1, samples);
  const int layerCount = std::max(1, graph.layerCount());
  profile.layers.resize(layerCount);
  std::vector<std::vector<ir::OpId>> ops(layerCount);
  for (size_t i = 0; i < graph.ops().size(); ++i) ops[graph.op(i).layer].push_back(static_cast<ir::OpId>(i));
  for (ir::TensorId t : graph.inputs()) profile.inputBytes += graph.tensor(t).bytes();

  const std::vector<bool> channelsLast = lower::channelsLastTensors(graph);
  // Cross-layer edges and the bytes each layer sends on.
  std::set<std::pair<ir::TensorId, int>> seenEdge;
  for (size_t i = 0; i < graph.ops().size(); ++i) {
    const ir::Op& op = graph.op(i);
    for (ir::TensorId t : op.inputs) {
      const ir::Tensor& tensor = graph.tensor(t);
      if (tensor.producer < 0) continue;
      const int from = graph.op(tensor.producer).layer;
      if (from == op.layer || !seenEdge.insert({t, op.layer}).second) continue;
      profile.edges.push_back({from, op.layer, linkBytes(chip, graph, t, channelsLast), t});
      if (op.layer != from + 1) profile.chain = false;
    }
  }
  std::sort(profile.edges.begin(), profile.edges.end(), [](const LayerEdge& a, const LayerEdge& b) {
    return std::tie(a.from, a.to, a.tensor) < std::tie(b.from, b.to, b.tensor);
  });
  std::set<ir::TensorId> sentOn;
  for (const auto& [tensorLayer, unused] : seenEdge) {
    (void)unused;
    if (sentOn.insert(tensorLayer).second) {
      const ir::Tensor& tensor = graph.tensor(tensorLayer);
      profile.layers[graph.op(tensor.producer).layer].outBytes += tensor.bytes();
    }
  }

  // Weight matmuls in graph order alternate column- and row-parallel (Megatron pairs).
  int weightMatmulIndex = 0;
  Bytes lastColumnOutput = 0;
  int lastColumnLayer = -1;
  const Bytes installBytes = Bytes{chip.mxmPlanes} * chip.mxmPlaneDim * chip.mxmPlaneDim;
  const auto memory = layerMemory(graph, layerCount);
  std::map<std::string, LayerEstimate> estimated;  // by layer signature
  std::vector<std::string> signatures;
  for (int l = 0; l < layerCount; ++l) signatures.push_back(layerSignature(graph, ops[l]));
  // The compiles the walk below makes, in one batch: each distinct layer alone, and for a layer
  // that may fit one chip (half its SRAM, as the piecewise estimate tells) its batch shares, its
  // sends and its pairs with its neighbours, in case it compiles; the rest is compiled on the way.
  LayerCycles compiled(chip);
  {
    std::set<std::string> seen;
    auto mayFit = [&](int l) { return memory[l].weightBytes <= chip.sramBytes() / 2; };
    for (int l = 0; l < layerCount; ++l) {
      if (!seen.insert(signatures[l]).second) continue;
      auto sub = layerGraph(graph, ops[l]);
      if (!sub) continue;
      if (mayFit(l)) planMeasure(compiled, *sub, signatures[l], chip, profile.samples, profile.layers[l].outBytes > 0);
      compiled.plan(aloneKey(signatures[l], 1, 0), std::move(*sub), 0);
    }
    for (int l = 1; l < layerCount; ++l) {
      if (!mayFit(l - 1) || !mayFit(l) || !seen.insert(pairKey(signatures[l - 1], signatures[l])).second) continue;
      std::vector<ir::OpId> both = ops[l - 1];
      both.insert(both.end(), ops[l].begin(), ops[l].end());
      std::sort(both.begin(), both.end());
      if (auto sub = layerGraph(graph, both)) compiled.plan(pairKey(signatures[l - 1], signatures[l]), std::move(*sub), 0);
    }
    compiled.run(compile, progress);
    // Then the pieces of each distinct layer too large for one chip (its compile alone failed).
    seen.clear();
    for (int l = 0; l < layerCount; ++l) {
      if (memory[l].weightBytes <= chip.sramBytes() / 2 || !seen.insert(signatures[l]).second) continue;
      const auto* alone = compiled.find(aloneKey(signatures[l], 1, 0));
      if (alone && *alone) continue;
      (void)piecewiseLayerCycles(graph, ops[l], chip, compiled, true);
    }
    compiled.run(compile, progress);
  }
  for (int l = 0; l < layerCount; ++l) {
    LayerProfile& layer = profile.layers[l];
    double convFlops = 0, allFlops = 0;
    layer.weightBytes = memory[l].weightBytes;
    layer.stateBytes = memory[l].stateBytes;
    layer.peakBytes = memory[l].peakBytes;
    for (ir::OpId id : ops[l]) {
      const ir::Op& op = graph.op(id);
      const double flops = static_cast<double>(ir::opFlops(graph, op));
      allFlops += flops;
      if (isWeightMatmul(graph, op)) {
        const Bytes out = linkBytes(chip, graph, op.outputs[0], channelsLast);
        layer.matmulOutBytes += out;
        ++layer.weightMatmuls;
        layer.installCycles += ceilDiv(weightOperandBytes(graph, op), installBytes) * chip.mxmWeightInstallCycles;
        layer.weightInstallCycles += weightTileCycles(graph, op, chip);
        if (weightMatmulIndex++ % 2 == 1) {
          layer.allReduceBytes += out;
          ++layer.allReduces;
          lastColumnLayer = -1;
        } else {
          lastColumnOutput = out;
          lastColumnLayer = l;
        }
      }
      if (op.kind == ir::OpKind::kConv) {
        layer.hasConv = profile.hasConv = true;
        convFlops += flops;
        layer.convWeightBytes += weightOperandBytes(graph, op);
        layer.installCycles += ceilDiv(weightOperandBytes(graph, op), installBytes) * chip.mxmWeightInstallCycles;
        layer.weightInstallCycles += weightTileCycles(graph, op, chip);
        const auto kernel = op.intsAttr("kernel_shape", {1, 1});
        const std::int64_t k = kernel.empty() ? 1 : kernel[0];
        const auto& x = graph.tensor(op.inputs[0]);
        if (k > 1 && x.shape.size() == 4) {
          // A cut along the height exchanges k/2 rows each way: N x C x (k/2) x W per side.
          layer.haloBytes += 2 * (k / 2) * x.shape[0] * x.shape[1] * x.shape[3] * ir::dtypeBytes(x.dtype);
          ++layer.halos;
        }
      }
    }
    profile.hasWeightMatmul = profile.hasWeightMatmul || layer.weightMatmuls > 0;
    layer.outputSplit = weightMatmulIndex % 2 == 1;

    // Compute: the compiler's estimate for the layer alone, once per distinct layer.
    const std::string& signature = signatures[l];
    auto found = estimated.find(signature);
    if (found == estimated.end()) {
      LayerEstimate value;
      auto sub = layerGraph(graph, ops[l]);
      if (!sub) {
        value.error = sub.error().format();
      } else {
        auto cycles = compiled.get(aloneKey(signature, 1, 0), *sub, 0);
        if (cycles) value.cycles = *cycles;
        else value.error = cycles.error().format();
        if (value.error.empty())
          measureLayer(*sub, signature, chip, profile.samples, layer.outBytes > 0, compiled, value);
      }
      found = estimated.emplace(signature, value).first;
    }
    if (!found->second.error.empty() && layer.weightBytes > chip.sramBytes() / 2 && found->second.cycles == 0) {
      // Too large for one chip: op by op, in chip-sized pieces (once per distinct layer).
      auto pieces = piecewiseLayerCycles(graph, ops[l], chip, compiled, false);
      found->second.cycles = pieces ? *pieces : -1;
      if (pieces) found->second.error.clear();
    }
    if (!found->second.error.empty()) {
      layer.fallback = true;
      layer.cycles = flopEstimateCycles(graph, ops[l], chip);
      if (profile.fallbackLayers++ == 0) profile.fallbackReason = found->second.error;
    } else if (found->second.batchCycles.empty() && layer.weightBytes > chip.sramBytes() / 2) {
      layer.cycles = std::max<Cycle>(1, found->second.cycles);
      ++profile.piecewiseLayers;
    } else {
      layer.cycles = std::max<Cycle>(1, found->second.cycles);
      if (found->second.fixedCycles >= 0) layer.installCycles = found->second.fixedCycles;
      layer.batchCycles = found->second.batchCycles;
      layer.sendHiddenPerShare = found->second.sendHiddenPerShare;
    }
    layer.installCycles = std::min(layer.installCycles, layer.cycles);
    layer.convCycles = allFlops > 0 ? static_cast<Cycle>(static_cast<double>(layer.cycles) * convFlops / allFlops) : 0;
  }
  // Consecutive layers on one chip: the pair compiled together, once per distinct pair.
  std::map<std::string, Cycle> pairs;
  for (int l = 1; l < layerCount; ++l) {
    LayerProfile& prev = profile.layers[l - 1];
    LayerProfile& layer = profile.layers[l];
    if (prev.fallback || layer.fallback || prev.batchCycles.empty() || layer.batchCycles.empty()) continue;
    const std::string signature = pairKey(signatures[l - 1], signatures[l]);
    auto found = pairs.find(signature);
    if (found == pairs.end()) {
      std::vector<ir::OpId> both = ops[l - 1];
      both.insert(both.end(), ops[l].begin(), ops[l].end());
      std::sort(both.begin(), both.end());
      Cycle overlap = 0;
      if (auto sub = layerGraph(graph, both))
        if (auto cycles = compiled.get(signature, *sub, 0))
          overlap = std::clamp<Cycle>(prev.cycles + layer.cycles - *cycles, 0, std::min(prev.cycles, layer.cycles));
      found = pairs.emplace(signature, overlap).first;
    }
    layer.overlapWithPrevious = found->second;
  }
  // Weights and constants several layers read, each counted once per chip (memoryPerChip).
  const auto shared = sharedLeafReaders(graph, layerCount);
  for (const auto& [t, layers] : shared)
    profile.sharedLeaves.push_back({graph.tensor(t).bytes(), {layers.begin(), layers.end()}, {}});
  profile.figuresUpTo = costed.upTo;
  profile.measuredWidths = costed.measured;
  if (profile.hasWeightMatmul &&
      tensorParallelFigures(graph, chip, profile, leafTensors(shared), costed, false, compile, progress))
    return profile;
  // A column-parallel matmul left without its row-parallel partner gathers its output, unless that
  // output leaves the graph from the last layer: graph outputs may stay split over the TP group.
  bool outputsInLastLayer = !graph.outputs().empty();
  for (ir::TensorId out : graph.outputs())
    outputsInLastLayer = outputsInLastLayer && graph.tensor(out).producer >= 0 &&
                         graph.op(graph.tensor(out).producer).layer == lastColumnLayer &&
                         lastColumnLayer == layerCount - 1;
  if (lastColumnLayer >= 0 && weightMatmulIndex % 2 == 1 && !outputsInLastLayer) {
    profile.layers[lastColumnLayer].allGatherBytes += lastColumnOutput;
    ++profile.layers[lastColumnLayer].allGathers;
  }
  return profile;
}

}  // namespace tsp::partition
