// Per-chip description of a plan's sharding: op shardings, collectives and why, bytes sent, memory by category.
#include "partition/shard_report.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "partition/plan_shards.h"
#include "partition/sharding.h"
#include "partition/sharding_spmd.h"

namespace tsp::partition {

namespace {

// The spec after one reshard step.
TensorSharding after(TensorSharding s, const ReshardStep& step) {
  auto dropPartial = [&]() { std::erase(s.partialAxes, step.axis); };
  switch (step.kind) {
    case ReshardKind::kAllReduce: dropPartial(); break;
    case ReshardKind::kReduceScatter:
      dropPartial();
      s.dimAxis[step.dim] = step.axis;
      s.setParts(step.dim, step.parts);
      s.setGranule(step.dim, step.granule);
      break;
    case ReshardKind::kAllGather:
      s.dimAxis[step.dim] = -1;
      s.setParts(step.dim, 1);
      s.setGranule(step.dim, 1);
      break;
    case ReshardKind::kSlice:
      s.dimAxis[step.dim] = step.axis;
      s.setParts(step.dim, step.parts);
      s.setGranule(step.dim, step.granule);
      break;
    case ReshardKind::kAllToAll:
      s.dimAxis[step.fromDim] = -1;
      s.setParts(step.fromDim, 1);
      s.setGranule(step.fromDim, 1);
      s.dimAxis[step.dim] = step.axis;
      s.setParts(step.dim, step.parts);
      s.setGranule(step.dim, step.granule);
      break;
    case ReshardKind::kHalo: break;
  }
  return s;
}

std::string why(const ReshardStep& step, const Mesh& mesh, const std::string& reader) {
  const std::string& axis = mesh.axisNames[step.axis];
  switch (step.kind) {
    case ReshardKind::kAllReduce: return fmt::format("partial sums over {} are added before {} reads them", axis, reader);
    case ReshardKind::kReduceScatter:
      return fmt::format("partial sums over {} are added and left split on dim {} for {}", axis, step.dim, reader);
    case ReshardKind::kAllGather: return fmt::format("{} reads dim {} whole", reader, step.dim);
    case ReshardKind::kAllToAll:
      return fmt::format("{} reads it split on dim {}, not on dim {}", reader, step.dim, step.fromDim);
    case ReshardKind::kHalo:
      return fmt::format("{}'s window reads {} + {} elements of dim {} from its neighbours", reader, step.haloBefore,
                         step.haloAfter, step.dim);
    case ReshardKind::kSlice: break;
  }
  return "";
}

}  // namespace

Expected<std::vector<ChipShards>> describeShards(const ir::Graph& graph, const Plan& plan) {
  auto block = batchBlockGraph(graph, plan.dp * plan.microbatches);
  if (!block) return block.error();
  const Mesh mesh = tensorMesh(plan.split, plan.tp);
  auto annotations = planAnnotations(*block, plan.split, mesh);
  if (!annotations) return annotations.error();
  auto sharding = propagateShardings(*block, mesh, *annotations);
  if (!sharding) return sharding.error();
  const ir::Graph& g = *block;
  const auto chunks = plan.layerChunks(g.layerCount());
  auto stageOf = [&](ir::OpId op) {
    const int layer = std::clamp(g.op(op).layer, 0, static_cast<int>(chunks.size()) - 1);
    return chunks[layer] % plan.pp;
  };
  const int ranks = mesh.devices();
  auto chipOf = [&](int stage, int rank) {
    return plan.placement.empty() ? plan.stageChip[stage] : plan.placement.at(stage * ranks + rank);
  };
  std::vector<ChipShards> chips;
  for (int s = 0; s < plan.pp; ++s)
    for (int t = 0; t < ranks; ++t) chips.push_back(ChipShards{chipOf(s, t), s, t, {}, {}, 0, 0, 0, 0});
  auto at = [&](int stage, int rank) -> ChipShards& { return chips[stage * ranks + rank]; };

  // Ops as propagation split them.
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const ir::Op& op = g.op(i);
    OpShardingEntry entry{op.name, ir::opKindName(op.kind), {}};
    for (ir::TensorId out : op.outputs)
      entry.results.push_back(fmt::format("{} {}", g.tensor(out).name, sharding->tensors[out].text(mesh)));
    for (int t = 0; t < ranks; ++t) at(stageOf(static_cast<ir::OpId>(i)), t).ops.push_back(entry);
  }
  // Memory from the materialised graphs (what the chip's programs hold): the weights and constants
  // and states its ops read, and the peak of live activations over its ops in order.
  auto devices = shardGraph(g, *sharding);
  if (!devices) return devices.error();
  for (int t = 0; t < ranks; ++t) {
    const ir::Graph& local = devices->graphs[t];
    auto localStage = [&](const ir::Op& op) {
      return chunks[std::clamp(op.layer, 0, static_cast<int>(chunks.size()) - 1)] % plan.pp;
    };
    std::vector<int> lastUse(local.tensors().size(), -1);
    for (size_t k = 0; k < local.ops().size(); ++k)
      for (ir::TensorId in : local.op(k).inputs) lastUse[in] = static_cast<int>(k);
    for (ir::TensorId out : local.outputs()) lastUse[out] = static_cast<int>(local.ops().size());
    std::vector<std::set<ir::TensorId>> leaves(plan.pp);
    std::vector<std::map<ir::TensorId, std::int64_t>> live(plan.pp);
    std::vector<std::int64_t> current(plan.pp, 0);
    for (size_t k = 0; k < local.ops().size(); ++k) {
      const ir::Op& op = local.op(k);
      const int s = localStage(op);
      ChipShards& chip = at(s, t);
      for (ir::TensorId in : op.inputs) {
        const ir::Tensor& tensor = local.tensor(in);
        if (tensor.role == ir::TensorRole::kWeight || tensor.role == ir::TensorRole::kConstant) {
          if (leaves[s].insert(in).second) chip.weightBytes += tensor.bytes();
        } else if (tensor.role == ir::TensorRole::kState) {
          if (leaves[s].insert(in).second) chip.kvCacheBytes += tensor.bytes();
        } else if (live[s].emplace(in, tensor.bytes()).second) {  // made on another stage, or a graph input
          current[s] += tensor.bytes();
        }
      }
      for (ir::TensorId out : op.outputs)
        if (live[s].emplace(out, local.tensor(out).bytes()).second) current[s] += local.tensor(out).bytes();
      chip.activationBytes = std::max(chip.activationBytes, current[s]);
      for (auto it = live[s].begin(); it != live[s].end();) {
        if (lastUse[it->first] <= static_cast<int>(k)) {
          current[s] -= it->second;
          it = live[s].erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  // Collectives: every reshard step but local slices, on the chips of the reading op's stage.
  for (const Reshard& r : sharding->reshards) {
    const ir::OpId reader = r.op >= 0 ? r.op : g.tensor(r.tensor).producer;
    const int stage = reader >= 0 ? stageOf(reader) : 0;
    std::vector<std::string> readers{r.op >= 0 ? g.op(r.op).name : "graph output"};
    for (const auto& [op, operand] : r.alsoFeeds) readers.push_back(op >= 0 ? g.op(op).name : "graph output");
    const std::string neededBy = fmt::format("{}", fmt::join(readers, ", "));
    TensorSharding spec = r.from;
    for (const ReshardStep& step : r.steps) {
      const TensorSharding next = after(spec, step);
      if (step.kind != ReshardKind::kSlice) {
        const std::int64_t bytes = localBytes(g.tensor(r.tensor), spec, mesh);
        const std::int64_t size = mesh.axisSizes[step.axis];
        std::int64_t sent = 0;
        switch (step.kind) {
          case ReshardKind::kAllReduce: sent = bytes * 2 * (size - 1) / size; break;
          case ReshardKind::kReduceScatter: case ReshardKind::kAllToAll: sent = bytes * (size - 1) / size; break;
          case ReshardKind::kAllGather: sent = bytes * (size - 1); break;
          case ReshardKind::kHalo: {
            const auto local = localShape(g.tensor(r.tensor).shape, spec, mesh);
            sent = local[step.dim] > 0 ? bytes / local[step.dim] * (step.haloBefore + step.haloAfter) : 0;
            break;
          }
          case ReshardKind::kSlice: break;
        }
        for (int t = 0; t < ranks; ++t) {
          CollectiveEntry entry;
          entry.kind = reshardKindName(step.kind);
          entry.tensor = g.tensor(r.tensor).name;
          entry.bytes = bytes;
          entry.sentBytes = sent;
          for (int member : mesh.group(t, step.axis)) entry.group.push_back(chipOf(stage, member));
          entry.neededBy = neededBy;
          entry.why = fmt::format("{} -> {}: {}", spec.text(mesh), next.text(mesh), why(step, mesh, readers.front()));
          ChipShards& chip = at(stage, t);
          chip.sentBytes += sent;
          chip.collectives.push_back(std::move(entry));
        }
      }
      spec = next;
    }
  }
  return chips;
}

std::string shardsText(const std::vector<ChipShards>& chips) {
  std::string out;
  for (const ChipShards& chip : chips) {
    out += fmt::format("chip {} (stage {}, tp rank {}): sends {} B; weights {} B, activations (peak live) {} B, "
                       "KV cache {} B\n",
                       chip.chip, chip.stage, chip.tpRank, chip.sentBytes, chip.weightBytes, chip.activationBytes,
                       chip.kvCacheBytes);
    for (const auto& op : chip.ops) out += fmt::format("  {} {}: {}\n", op.kind, op.op, fmt::join(op.results, "; "));
    for (const auto& c : chip.collectives)
      out += fmt::format("  {} of {} ({} B, sends {} B) over chips [{}] for {}: {}\n", c.kind, c.tensor, c.bytes,
                         c.sentBytes, fmt::join(c.group, ","), c.neededBy, c.why);
  }
  return out;
}

std::string shardsJson(const std::vector<ChipShards>& chips) {
  nlohmann::json list = nlohmann::json::array();
  for (const ChipShards& chip : chips) {
    nlohmann::json ops = nlohmann::json::array(), collectives = nlohmann::json::array();
    for (const auto& op : chip.ops) ops.push_back({{"op", op.op}, {"kind", op.kind}, {"results", op.results}});
    for (const auto& c : chip.collectives)
      collectives.push_back({{"kind", c.kind}, {"tensor", c.tensor}, {"bytes", c.bytes}, {"sent_bytes", c.sentBytes},
                             {"group", c.group}, {"needed_by", c.neededBy}, {"why", c.why}});
    list.push_back({{"chip", chip.chip}, {"stage", chip.stage}, {"tp_rank", chip.tpRank}, {"sent_bytes", chip.sentBytes},
                    {"memory", {{"weights", chip.weightBytes}, {"activations_peak", chip.activationBytes},
                                {"kv_cache", chip.kvCacheBytes}}},
                    {"ops", ops}, {"collectives", collectives}});
  }
  return nlohmann::json{{"chips", list}}.dump(2);
}

}  // namespace tsp::partition
