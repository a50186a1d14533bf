// Sharding propagation: iteration-dim splits from operand specs, output specs from the splits, reshards between.
#include "partition/sharding.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tsp::partition {

int Mesh::devices() const {
  int n = 1;
  for (int s : axisSizes) n *= s;
  return n;
}

int Mesh::axis(const std::string& name) const {
  for (size_t a = 0; a < axisNames.size(); ++a)
    if (axisNames[a] == name) return static_cast<int>(a);
  return -1;
}

std::vector<int> Mesh::coords(int device) const {
  std::vector<int> c(axisSizes.size());
  for (size_t a = axisSizes.size(); a-- > 0;) {
    c[a] = device % axisSizes[a];
    device /= axisSizes[a];
  }
  return c;
}

int Mesh::device(const std::vector<int>& coords) const {
  int d = 0;
  for (size_t a = 0; a < axisSizes.size(); ++a) d = d * axisSizes[a] + coords[a];
  return d;
}

std::vector<int> Mesh::group(int device, int axis) const {
  auto c = coords(device);
  std::vector<int> members;
  for (int i = 0; i < axisSizes[axis]; ++i) {
    c[axis] = i;
    members.push_back(this->device(c));
  }
  return members;
}

std::vector<std::pair<int, int>> TensorSharding::entries() const {
  std::vector<std::pair<int, int>> list;
  for (size_t d = 0; d < dimAxis.size(); ++d)
    if (dimAxis[d] >= 0) list.push_back({dimAxis[d], static_cast<int>(d)});
  std::sort(list.begin(), list.end());
  return list;
}

bool TensorSharding::isReplicated() const {
  return partialAxes.empty() && std::all_of(dimAxis.begin(), dimAxis.end(), [](int a) { return a < 0; });
}

std::string TensorSharding::text(const Mesh& mesh) const {
  std::vector<std::string> dims, partial;
  for (int a : dimAxis) dims.push_back(a < 0 ? "-" : mesh.axisNames[a]);
  for (int a : partialAxes) partial.push_back(mesh.axisNames[a]);
  std::string s = fmt::format("[{}]", fmt::join(dims, ","));
  if (!partial.empty()) s += fmt::format(" partial({})", fmt::join(partial, ","));
  return s;
}

const char* reshardKindName(ReshardKind kind) {
  switch (kind) {
    case ReshardKind::kAllReduce: return "AllReduce";
    case ReshardKind::kReduceScatter: return "ReduceScatter";
    case ReshardKind::kAllGather: return "AllGather";
    case ReshardKind::kAllToAll: return "AllToAll";
    case ReshardKind::kSlice: return "Slice";
    case ReshardKind::kHalo: return "Halo";
  }
  return "?";
}

int ShardingPlan::count(ReshardKind kind) const {
  int n = 0;
  for (const auto& r : reshards)
    for (const auto& s : r.steps) n += s.kind == kind;
  return n;
}

std::vector<std::int64_t> localShape(const std::vector<std::int64_t>& shape, const TensorSharding& sharding,
                                     const Mesh& mesh) {
  auto local = shape;
  for (size_t d = 0; d < shape.size() && d < sharding.dimAxis.size(); ++d)
    if (sharding.dimAxis[d] >= 0) local[d] /= mesh.axisSizes[sharding.dimAxis[d]];
  return local;
}

std::vector<ReshardStep> reshardSteps(const TensorSharding& from, const TensorSharding& to) {
  std::vector<ReshardStep> steps;
  auto dimOf = [](const TensorSharding& s, int axis) {
    for (size_t d = 0; d < s.dimAxis.size(); ++d)
      if (s.dimAxis[d] == axis) return static_cast<int>(d);
    return -1;
  };
  int axes = 0;
  for (int a : from.dimAxis) axes = std::max(axes, a + 1);
  for (int a : to.dimAxis) axes = std::max(axes, a + 1);
  for (int a : from.partialAxes) axes = std::max(axes, a + 1);
  for (int a = 0; a < axes; ++a) {
    const int f = dimOf(from, a), t = dimOf(to, a);
    const bool partial = std::count(from.partialAxes.begin(), from.partialAxes.end(), a) > 0;
    if (partial) {
      steps.push_back(t >= 0 ? ReshardStep{ReshardKind::kReduceScatter, a, t} : ReshardStep{ReshardKind::kAllReduce, a});
    } else if (f == t) {
      continue;
    } else if (t < 0) {
      steps.push_back({ReshardKind::kAllGather, a, f});
    } else if (f < 0) {
      steps.push_back({ReshardKind::kSlice, a, t});
    } else {
      steps.push_back({ReshardKind::kAllToAll, a, t, f});
    }
  }
  return steps;
}

namespace {

Status checkSharding(const ir::Graph& graph, const Mesh& mesh, ir::TensorId id, const TensorSharding& s) {
  const auto& t = graph.tensor(id);
  if (s.dimAxis.size() != t.shape.size())
    return modelError(t.name, fmt::format("sharding {} has {} dims, the tensor {}", s.text(mesh), s.dimAxis.size(),
                                          t.shape.size()));
  std::vector<bool> used(mesh.axisSizes.size(), false);
  for (size_t d = 0; d < s.dimAxis.size(); ++d) {
    const int a = s.dimAxis[d];
    if (a < 0) continue;
    if (a >= static_cast<int>(mesh.axisSizes.size()))
      return modelError(t.name, fmt::format("sharding names mesh axis {}, the mesh has {}", a, mesh.axisSizes.size()));
    if (used[a]) return modelError(t.name, fmt::format("mesh axis '{}' splits two dims", mesh.axisNames[a]));
    used[a] = true;
    if (t.shape[d] % mesh.axisSizes[a] != 0)
      return modelError(t.name, fmt::format("dim {} of size {} does not split over mesh axis '{}' of {} devices", d,
                                            t.shape[d], mesh.axisNames[a], mesh.axisSizes[a]));
  }
  return {};
}

}  // namespace

Expected<ShardingPlan> propagateShardings(const ir::Graph& graph, const Mesh& mesh,
                                          const std::map<ir::TensorId, TensorSharding>& annotations) {
  auto chosen = annotations;
  return propagateShardings(graph, mesh, chosen, nullptr);
}

Expected<ShardingPlan> propagateShardings(const ir::Graph& graph, const Mesh& mesh,
                                          std::map<ir::TensorId, TensorSharding>& annotations,
                                          const AnnotateBeforeOp& before) {
  ShardingPlan plan;
  plan.mesh = mesh;
  const size_t tensorCount = graph.tensors().size();
  plan.tensors.resize(tensorCount);
  std::vector<bool> known(tensorCount, false);
  for (size_t t = 0; t < tensorCount; ++t) plan.tensors[t] = TensorSharding::replicated(graph.tensor(t).shape.size());
  for (const auto& [id, s] : annotations) {
    if (auto st = checkSharding(graph, mesh, id, s); !st) return st.error();
    if (!s.partialAxes.empty()) return modelError(graph.tensor(id).name, "an annotation cannot hold partial sums");
  }
  // Graph inputs and states are fed as given: replicated unless annotated.
  for (const auto& list : {graph.inputs(), graph.states()})
    for (ir::TensorId id : list) {
      auto found = annotations.find(id);
      if (found != annotations.end()) plan.tensors[id] = found->second;
      known[id] = true;
    }
  for (const auto& list : {graph.weights(), graph.constants()})
    for (ir::TensorId id : list) {
      auto found = annotations.find(id);
      if (found == annotations.end()) continue;
      plan.tensors[id] = found->second;
      known[id] = true;
    }

  // A reshard of a tensor already moved the same way feeds its operand from that one.
  std::map<ir::TensorId, std::vector<size_t>> reshardsOf;
  auto record = [&](Reshard reshard) {
    for (size_t at : reshardsOf[reshard.tensor]) {
      Reshard& earlier = plan.reshards[at];
      if (earlier.to == reshard.to && earlier.steps == reshard.steps) {
        earlier.alsoFeeds.emplace_back(reshard.op, reshard.operand);
        return;
      }
    }
    reshardsOf[reshard.tensor].push_back(plan.reshards.size());
    plan.reshards.push_back(std::move(reshard));
  };
  plan.opDimAxis.resize(graph.ops().size());
  for (size_t i = 0; i < graph.ops().size(); ++i) {
    const ir::Op& op = graph.op(i);
    if (before) {
      std::map<ir::TensorId, TensorSharding> added;
      if (!before(static_cast<ir::OpId>(i), plan, added))
        return modelError(op.name, "no sharding could be chosen for its operands");
      for (auto& [id, s] : added) {
        const ir::Tensor& t = graph.tensor(id);
        if (known[id] || annotations.count(id) || t.producer >= 0 ||
            (t.role != ir::TensorRole::kWeight && t.role != ir::TensorRole::kConstant))
          return modelError(t.name, "an annotation chosen during propagation must be a weight or constant no earlier op read");
        if (auto st = checkSharding(graph, mesh, id, s); !st) return st.error();
        plan.tensors[id] = s;
        known[id] = true;
        annotations[id] = std::move(s);
      }
    }
    auto space = ir::iterationSpace(graph, op);
    if (!space) return space.error();
    const DependenceInfo deps = analyzeDependences(*space);
    std::vector<int>& dimAxis = plan.opDimAxis[i];
    dimAxis.assign(space->extents.size(), -1);
    std::vector<bool> used(mesh.axisSizes.size(), false);
    auto vote = [&](const ir::OperandAccess& access, const TensorSharding& s) {
      for (size_t t = 0; t < access.index.size() && t < s.dimAxis.size(); ++t) {
        const int a = s.dimAxis[t];
        if (a < 0 || access.index[t].terms.empty()) continue;
        const int d = access.index[t].terms.front().dim;
        if (!deps.dims[d].splittable || space->extents[d] % mesh.axisSizes[a] != 0) continue;
        if (dimAxis[d] < 0 && !used[a]) {
          dimAxis[d] = a;
          used[a] = true;
        }
      }
    };
    // Annotated results vote first (they are what the user asked for), then operands in order.
    for (const auto& w : space->writes) {
      auto found = annotations.find(op.outputs[w.operand]);
      if (found != annotations.end()) vote(w, found->second);
    }
    for (const auto& r : space->reads)
      if (known[op.inputs[r.operand]]) vote(r, plan.tensors[op.inputs[r.operand]]);

    auto layoutOf = [&](const ir::OperandAccess& access) {
      TensorSharding s;
      for (const auto& e : access.index) {
        const bool single = e.terms.size() >= 1;
        s.dimAxis.push_back(single ? dimAxis[e.terms.front().dim] : -1);
      }
      return s;
    };
    // Operands: free leaves take the layout the op wants; others are resharded when they differ.
    std::vector<bool> seen(op.inputs.size(), false);
    for (const auto& r : space->reads) {
      if (seen[r.operand]) continue;
      seen[r.operand] = true;
      const ir::TensorId id = op.inputs[r.operand];
      TensorSharding want = layoutOf(r);
      if (!known[id]) {
        plan.tensors[id] = want;
        known[id] = true;
        continue;
      }
      Reshard reshard{static_cast<ir::OpId>(i), r.operand, id, plan.tensors[id], want, {}, {}};
      reshard.steps = reshardSteps(plan.tensors[id], want);
      for (size_t t = 0; t < r.index.size(); ++t) {
        if (r.index[t].terms.empty()) continue;
        const int d = r.index[t].terms.front().dim;
        if (dimAxis[d] >= 0 && deps.dims[d].kind == DimClass::kWindowed && r.index[t].terms.size() > 1) {
          ReshardStep halo{ReshardKind::kHalo, dimAxis[d], static_cast<int>(t)};
          halo.haloBefore = std::max<std::int64_t>(0, -r.index[t].offset);
          halo.haloAfter = haloWidth(*space, r.index[t]) - halo.haloBefore;
          reshard.steps.push_back(halo);
        }
      }
      if (!reshard.steps.empty()) record(std::move(reshard));
    }
    // Results: split as their index maps say; partial over the axes of split reduction dims.
    std::vector<int> partial;
    for (size_t d = 0; d < dimAxis.size(); ++d)
      if (dimAxis[d] >= 0 && deps.dims[d].kind == DimClass::kReduction) partial.push_back(dimAxis[d]);
    std::sort(partial.begin(), partial.end());
    for (const auto& w : space->writes) {
      TensorSharding s = layoutOf(w);
      s.partialAxes = partial;
      plan.tensors[op.outputs[w.operand]] = s;
      known[op.outputs[w.operand]] = true;
    }
    for (ir::TensorId out : op.outputs)
      if (!known[out]) {  // an output no access describes: replicated
        known[out] = true;
      }
  }
  // Graph outputs leave without pending partial sums.
  for (size_t o = 0; o < graph.outputs().size(); ++o) {
    const ir::TensorId id = graph.outputs()[o];
    if (plan.tensors[id].partialAxes.empty()) continue;
    TensorSharding want = plan.tensors[id];
    want.partialAxes.clear();
    record(Reshard{-1, static_cast<int>(o), id, plan.tensors[id], want, reshardSteps(plan.tensors[id], want), {}});
  }
  return plan;
}

}  // namespace tsp::partition
