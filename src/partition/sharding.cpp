// Sharding propagation: iteration-dim splits from operand specs, output specs from the splits, reshards between.
#include "partition/sharding.h"

#include <algorithm>
#include <numeric>
#include <optional>

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

void TensorSharding::setParts(size_t d, std::int64_t parts) {
  if (parts == this->parts(d)) return;
  if (dimParts.empty()) dimParts.assign(dimAxis.size(), 1);
  dimParts[d] = parts;
  if (std::all_of(dimParts.begin(), dimParts.end(), [](std::int64_t p) { return p == 1; })) dimParts.clear();
}

void TensorSharding::setGranule(size_t d, std::int64_t granule) {
  if (granule == this->granule(d)) return;
  if (dimGranule.empty()) dimGranule.assign(dimAxis.size(), 1);
  dimGranule[d] = granule;
  if (std::all_of(dimGranule.begin(), dimGranule.end(), [](std::int64_t g) { return g == 1; })) dimGranule.clear();
}

bool TensorSharding::isReplicated() const {
  return partialAxes.empty() && std::all_of(dimAxis.begin(), dimAxis.end(), [](int a) { return a < 0; });
}

std::string TensorSharding::text(const Mesh& mesh) const {
  std::vector<std::string> dims, partial;
  for (size_t d = 0; d < dimAxis.size(); ++d) {
    const int a = dimAxis[d];
    std::string dim = a < 0 ? "-" : parts(d) > 1 ? fmt::format("{}x{}", parts(d), mesh.axisNames[a]) : mesh.axisNames[a];
    if (a >= 0 && granule(d) > 1) dim += fmt::format("/{}", granule(d));
    dims.push_back(dim);
  }
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
    if (sharding.dimAxis[d] >= 0)
      local[d] = sharding.parts(d) *
                 blockOf(shape[d], sharding.parts(d), mesh.axisSizes[sharding.dimAxis[d]], sharding.granule(d));
  return local;
}

std::int64_t localBytes(const ir::Tensor& tensor, const TensorSharding& sharding, const Mesh& mesh) {
  std::int64_t n = ir::dtypeBytes(tensor.dtype);
  for (auto d : localShape(tensor.shape, sharding, mesh)) n *= d;
  return n;
}

std::int64_t blockOf(std::int64_t extent, std::int64_t parts, int size, std::int64_t granule) {
  const std::int64_t units = extent / parts / granule;
  return (units + size - 1) / size * granule;
}

std::int64_t effectiveGranule(std::int64_t extent, std::int64_t parts, int size, std::int64_t granule) {
  return granule > 1 && (extent / parts) % (size * granule) != 0 ? granule : 1;
}

std::int64_t globalIndex(std::int64_t local, std::int64_t extent, std::int64_t parts, int size, int pos,
                         std::int64_t granule) {
  const std::int64_t part = extent / parts, block = blockOf(extent, parts, size, granule);
  const std::int64_t inPart = pos * block + local % block;
  return inPart < part ? local / block * part + inPart : -1;
}

namespace {

// Whether a split of a dim of `extent` in `parts` parts of `granule` units over `size` devices
// splits at all (the ceil-sized blocks may leave the last devices padding alone).
bool splits(std::int64_t extent, std::int64_t parts, int size, std::int64_t granule = 1) {
  return extent % parts == 0 && (extent / parts) % granule == 0 && blockOf(extent, parts, size, granule) < extent / parts;
}

}  // namespace

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
    const std::int64_t fp = f >= 0 ? from.parts(f) : 1, tp = t >= 0 ? to.parts(t) : 1;
    const std::int64_t fg = f >= 0 ? from.granule(f) : 1, tg = t >= 0 ? to.granule(t) : 1;
    auto step = [&](ReshardKind kind, int dim, int fromDim) {
      ReshardStep s{kind, a, dim, fromDim};
      s.parts = tp;
      s.fromParts = fp;
      s.granule = tg;
      s.fromGranule = fg;
      steps.push_back(s);
    };
    if (partial) {
      step(t >= 0 ? ReshardKind::kReduceScatter : ReshardKind::kAllReduce, t, -1);
    } else if (f == t && fp == tp && fg == tg) {
      continue;
    } else if (f == t) {  // the same dim in other parts: gather, then take the new block of every part
      step(ReshardKind::kAllGather, f, -1);
      step(ReshardKind::kSlice, t, -1);
    } else if (t < 0) {
      step(ReshardKind::kAllGather, f, -1);
    } else if (f < 0) {
      step(ReshardKind::kSlice, t, -1);
    } else {
      step(ReshardKind::kAllToAll, t, f);
    }
  }
  return steps;
}

namespace {

// An index whose terms are the digits of a mixed-radix number: each coefficient is the product of
// the later terms' extents, no offset (a Reshape's factors).
bool mixedRadix(const ir::IterationSpace& space, const ir::AffineExpr& e) {
  if (e.offset != 0) return false;
  std::int64_t stride = 1;
  for (size_t i = e.terms.size(); i-- > 0;) {
    if (e.terms[i].coeff != stride) return false;
    stride *= space.extents[e.terms[i].dim];
  }
  return true;
}

std::int64_t gcd3(std::int64_t a, std::int64_t b, std::int64_t c) {
  return std::gcd(std::gcd(a, b), c < 0 ? -c : c);
}

// The iteration dim (its parts and unit) that a tensor dim of `extent` split over `size` devices in
// `parts` parts of `granule`-element units splits, through the index e: a plain index maps parts
// onto the dim's range (a Split's or Slice's window is whole parts) and keeps the unit; a Reshape's
// factors take the parts on the leading factors and the split on the factor after them, whose unit
// is what the unit leaves of it (GSPMD's reshape rule); other indices split their leading term,
// evenly only. `exact`: the blocks of the dim are those of the tensor dim, padding included.
struct DimSplit {
  int dim;
  std::int64_t parts, granule;
  bool exact;
};
std::optional<DimSplit> splitThrough(const ir::IterationSpace& space, const ir::AffineExpr& e, std::int64_t extent,
                                     std::int64_t parts, std::int64_t granule, int size) {
  if (e.terms.empty()) return std::nullopt;
  if (e.terms.size() == 1 && e.terms[0].coeff == 1) {
    const int d = e.terms[0].dim;
    const std::int64_t part = extent / parts;
    if (space.extents[d] % part != 0 || e.offset % part != 0) return std::nullopt;
    return DimSplit{d, space.extents[d] / part, granule, true};
  }
  if (!mixedRadix(space, e)) {
    if (parts == 1 && granule == 1) return DimSplit{e.terms.front().dim, 1, 1, false};
    return std::nullopt;
  }
  std::int64_t outer = 1;
  for (size_t i = 0; i < e.terms.size(); ++i) {
    const std::int64_t ext = space.extents[e.terms[i].dim];
    if (parts % outer != 0) return std::nullopt;
    if (outer * ext > parts) {
      const std::int64_t p = parts / outer;
      if (ext % p != 0) return std::nullopt;
      std::int64_t inner = 1;
      for (size_t k = i + 1; k < e.terms.size(); ++k) inner *= space.extents[e.terms[k].dim];
      if (granule % inner == 0 && (ext / p) % (granule / inner) == 0)
        return DimSplit{e.terms[i].dim, p, granule / inner, true};
      // The tensor's blocks are whole elements: the factor's blocks are the same only when even.
      if (granule == 1 && ext % (p * size) == 0) return DimSplit{e.terms[i].dim, p, 1, true};
      return std::nullopt;
    }
    outer *= ext;
  }
  return std::nullopt;
}

// The ops whose only obstacle to splitting a dim is that they read or write windows of it at
// offsets: split in parts, every window must be whole parts.
bool partsAligned(const ir::Graph& graph, const ir::Op& op, const ir::IterationSpace& space, int dim,
                  std::int64_t parts) {
  if (op.kind != ir::OpKind::kSplit && op.kind != ir::OpKind::kSlice && op.kind != ir::OpKind::kConcat) return false;
  const std::int64_t part = space.extents[dim] / parts;
  auto aligned = [&](const ir::OperandAccess& access, ir::TensorId id) {
    const auto& shape = graph.tensor(id).shape;
    for (size_t t = 0; t < access.index.size(); ++t) {
      const auto& e = access.index[t];
      const bool mentions = std::any_of(e.terms.begin(), e.terms.end(), [&](const ir::AffineTerm& term) { return term.dim == dim; });
      if (!mentions) continue;
      if (e.terms.size() != 1 || e.terms[0].coeff != 1 || shape[t] % part != 0 || e.offset % part != 0) return false;
    }
    return true;
  };
  for (const auto& r : space.reads)
    if (!aligned(r, op.inputs[r.operand])) return false;
  for (const auto& w : space.writes)
    if (!aligned(w, op.outputs[w.operand])) return false;
  return true;
}

// into := lcm(into, v) when that still divides extent.
void lcmMerge(std::int64_t& into, std::int64_t v, std::int64_t extent) {
  const std::int64_t l = std::lcm(into, v);
  if (l > 0 && extent % l == 0) into = l;
}

// A count per tensor dim carried back from its consumers: `step(op, space, dims, counts)` is called
// on every op in reverse order with a count of 1 per iteration dim, and merges into `counts`.
template <typename Step>
std::vector<std::vector<std::int64_t>> backwardCounts(const ir::Graph& graph, Step step) {
  std::vector<std::vector<std::int64_t>> counts;
  for (const auto& t : graph.tensors()) counts.emplace_back(t.shape.size(), 1);
  for (size_t i = graph.ops().size(); i-- > 0;) {
    const ir::Op& op = graph.op(i);
    auto space = ir::iterationSpace(graph, op);
    if (!space) continue;
    std::vector<std::int64_t> dims(space->extents.size(), 1);
    step(op, *space, dims, counts);
  }
  return counts;
}

}  // namespace

std::vector<std::vector<std::int64_t>> consumerParts(const ir::Graph& graph) {
  return backwardCounts(graph, [&](const ir::Op& op, const ir::IterationSpace& space, std::vector<std::int64_t>& dimParts,
                                   std::vector<std::vector<std::int64_t>>& parts) {
    auto merge = lcmMerge;
    // Results' parts and windows at offsets cut the iteration dims.
    auto cut = [&](const ir::OperandAccess& access, ir::TensorId id, bool write) {
      const auto& shape = graph.tensor(id).shape;
      for (size_t t = 0; t < access.index.size(); ++t) {
        const auto& e = access.index[t];
        const std::int64_t p = write ? parts[id][t] : 1;
        if (e.terms.size() == 1 && e.terms[0].coeff == 1) {
          // A window narrower than the dim (a Split's output, a Concat's input) cuts it at its offset.
          const int d = e.terms[0].dim;
          if (shape[t] >= space.extents[d] && p == 1) continue;
          const std::int64_t unit = gcd3(shape[t] / p, space.extents[d], e.offset);
          merge(dimParts[d], space.extents[d] / unit, space.extents[d]);
        } else if (p > 1 && mixedRadix(space, e)) {
          std::int64_t outer = 1;
          for (const auto& term : e.terms) {
            const std::int64_t ext = space.extents[term.dim];
            if (p % (outer * ext) == 0) {
              merge(dimParts[term.dim], ext, ext);
              outer *= ext;
              continue;
            }
            if (p % outer == 0 && ext % (p / outer) == 0) merge(dimParts[term.dim], p / outer, ext);
            break;
          }
        }
      }
    };
    for (const auto& w : space.writes) cut(w, op.outputs[w.operand], true);
    for (const auto& r : space.reads) cut(r, op.inputs[r.operand], false);
    // A lookup of constant indices takes rows apart: every row is a part.
    if (op.kind == ir::OpKind::kGather && op.inputs.size() == 2 &&
        graph.tensor(op.inputs[1]).role == ir::TensorRole::kConstant)
      dimParts.back() = space.extents.back();
    // The operands' parts: the windows they are read in, and the iteration dims' parts.
    for (const auto& r : space.reads) {
      const ir::TensorId id = op.inputs[r.operand];
      const auto& shape = graph.tensor(id).shape;
      for (size_t t = 0; t < r.index.size(); ++t) {
        const auto& e = r.index[t];
        if (e.terms.size() == 1 && e.terms[0].coeff == 1) {
          const int d = e.terms[0].dim;
          const std::int64_t unit = gcd3(space.extents[d] / dimParts[d], shape[t], e.offset);
          merge(parts[id][t], shape[t] / unit, shape[t]);
        } else if (mixedRadix(space, e)) {
          std::int64_t p = 1;
          for (const auto& term : e.terms) {
            p *= dimParts[term.dim];
            if (dimParts[term.dim] != space.extents[term.dim]) break;
          }
          merge(parts[id][t], p, shape[t]);
        }
      }
    }
  });
}

std::vector<std::vector<std::int64_t>> consumerGranules(const ir::Graph& graph) {
  const auto parts = consumerParts(graph);
  return backwardCounts(graph, [&](const ir::Op& op, const ir::IterationSpace& space, std::vector<std::int64_t>& dimGranule,
                                   std::vector<std::vector<std::int64_t>>& granules) {
    auto merge = lcmMerge;
    // Results' units, onto the iteration dims: a plain index keeps them; a Reshape's factor keeps
    // what is left of them after the factors inside it.
    for (const auto& w : space.writes) {
      const ir::TensorId id = op.outputs[w.operand];
      for (size_t t = 0; t < w.index.size(); ++t) {
        const auto& e = w.index[t];
        const std::int64_t g = granules[id][t];
        if (g == 1 || e.terms.empty()) continue;
        if (e.terms.size() == 1 && e.terms[0].coeff == 1) {
          merge(dimGranule[e.terms[0].dim], g, space.extents[e.terms[0].dim]);
        } else if (mixedRadix(space, e)) {
          std::int64_t inner = 1;
          for (size_t k = e.terms.size(); k-- > 0;) {
            const std::int64_t ext = space.extents[e.terms[k].dim];
            if (g % inner == 0 && g < inner * ext) {
              if (ext % (g / inner) == 0) merge(dimGranule[e.terms[k].dim], g / inner, ext);
              break;
            }
            inner *= ext;
          }
        }
      }
    }
    // Operands: a Reshape that factors a dim keeps its innermost factor whole (a head's elements).
    for (const auto& r : space.reads) {
      const ir::TensorId id = op.inputs[r.operand];
      const auto& shape = graph.tensor(id).shape;
      for (size_t t = 0; t < r.index.size(); ++t) {
        const auto& e = r.index[t];
        if (e.terms.size() == 1 && e.terms[0].coeff == 1) {
          merge(granules[id][t], dimGranule[e.terms[0].dim], shape[t]);
        } else if (e.terms.size() > 1 && mixedRadix(space, e)) {
          // The factor a split lands on is the first after the dim's parts (q, k and v); the
          // factors inside it stay whole: a head, or a KV head's group of query heads.
          std::int64_t outer = 1;
          size_t k = 0;
          while (k < e.terms.size() && outer * space.extents[e.terms[k].dim] <= parts[id][t])
            outer *= space.extents[e.terms[k++].dim];
          std::int64_t unit = 1;
          for (size_t inner = k + 1; inner < e.terms.size(); ++inner) unit *= space.extents[e.terms[inner].dim];
          if (k + 1 >= e.terms.size() && k < e.terms.size()) unit = dimGranule[e.terms[k].dim];
          merge(granules[id][t], unit, shape[t]);
        }
      }
    }
  });
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
    if (!splits(t.shape[d], s.parts(d), mesh.axisSizes[a], s.granule(d)))
      return modelError(t.name, fmt::format("dim {} of size {} does not split over mesh axis '{}' of {} devices{}", d,
                                            t.shape[d], mesh.axisNames[a], mesh.axisSizes[a],
                                            s.parts(d) > 1 ? fmt::format(" in {} parts", s.parts(d)) : ""));
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
  // Graph inputs are fed as given: replicated unless annotated. States (a KV cache, optimizer
  // moments), weights and constants are resident: unannotated, they take the layout their first
  // consumer wants (a KV cache its attention's heads).
  for (ir::TensorId id : graph.inputs()) {
    auto found = annotations.find(id);
    if (found != annotations.end()) plan.tensors[id] = found->second;
    known[id] = true;
  }
  for (const auto& list : {graph.states(), graph.weights(), graph.constants()})
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
  plan.opDimParts.resize(graph.ops().size());
  plan.opDimGranule.resize(graph.ops().size());
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
    std::vector<std::int64_t>& dimParts = plan.opDimParts[i];
    dimParts.assign(space->extents.size(), 1);
    std::vector<std::int64_t>& dimGranule = plan.opDimGranule[i];
    dimGranule.assign(space->extents.size(), 1);
    auto vote = [&](const ir::OperandAccess& access, ir::TensorId id, const TensorSharding& s) {
      const auto& shape = graph.tensor(id).shape;
      for (size_t t = 0; t < access.index.size() && t < s.dimAxis.size(); ++t) {
        const int a = s.dimAxis[t];
        if (a < 0) continue;
        const int size = mesh.axisSizes[a];
        const auto split = splitThrough(*space, access.index[t], shape[t], s.parts(t), s.granule(t), size);
        if (!split) continue;
        const int d = split->dim;
        const std::int64_t granule = effectiveGranule(space->extents[d], split->parts, size, split->granule);
        // A dim the axis does not divide splits in ceil-sized blocks (of whole units) where its
        // blocks are the tensor dim's (padding elements compute on zeros; the last devices may
        // hold padding alone, 12 heads over 8 in blocks of 2), never across a window.
        if ((space->extents[d] / split->parts) % (size * granule) != 0 &&
            (!split->exact || deps.dims[d].kind == DimClass::kWindowed ||
             !splits(space->extents[d], split->parts, size, granule)))
          continue;
        // A Reshape's inner factors split as well as its leading ones (the factors are digits, not
        // window taps); Split, Slice and Concat split a dim whose windows are whole parts.
        const bool reshape = op.kind == ir::OpKind::kReshape || op.kind == ir::OpKind::kFlatten ||
                             op.kind == ir::OpKind::kSqueeze || op.kind == ir::OpKind::kUnsqueeze;
        if (!deps.dims[d].splittable && !(reshape && !space->opaque[d]) &&
            !(space->opaque[d] && partsAligned(graph, op, *space, d, split->parts)))
          continue;
        if (dimAxis[d] < 0 && !used[a]) {
          dimAxis[d] = a;
          dimParts[d] = split->parts;
          dimGranule[d] = granule;
          used[a] = true;
        }
      }
    };
    // Annotated results vote first (they are what the user asked for), then operands in order.
    for (const auto& w : space->writes) {
      auto found = annotations.find(op.outputs[w.operand]);
      if (found != annotations.end()) vote(w, op.outputs[w.operand], found->second);
    }
    for (const auto& r : space->reads)
      if (known[op.inputs[r.operand]]) vote(r, op.inputs[r.operand], plan.tensors[op.inputs[r.operand]]);

    // A tensor dim is split over the axis of its first split term: a plain index in the parts its
    // window covers, a Reshape's factor after the leading factors' parts, another index on its
    // leading term only.
    auto layoutOf = [&](const ir::OperandAccess& access, ir::TensorId id) {
      const auto& shape = graph.tensor(id).shape;
      TensorSharding s = TensorSharding::replicated(access.index.size());
      for (size_t t = 0; t < access.index.size(); ++t) {
        const auto& e = access.index[t];
        size_t first = 0;
        while (first < e.terms.size() && dimAxis[e.terms[first].dim] < 0) ++first;
        if (first == e.terms.size()) continue;
        const int d = e.terms[first].dim;
        const int size = mesh.axisSizes[dimAxis[d]];
        std::int64_t parts = dimParts[d], granule = dimGranule[d];
        const bool even = (space->extents[d] / parts) % (size * granule) == 0;
        if (e.terms.size() == 1 && e.terms[0].coeff == 1) {
          const std::int64_t part = space->extents[d] / parts;
          if (shape[t] % part != 0) continue;
          parts = shape[t] / part;
        } else if (mixedRadix(*space, e)) {
          for (size_t k = 0; k < first; ++k) parts *= space->extents[e.terms[k].dim];
          for (size_t k = first + 1; k < e.terms.size(); ++k) granule *= space->extents[e.terms[k].dim];
        } else if (first > 0 || !even || granule > 1) {
          continue;
        }
        s.dimAxis[t] = dimAxis[d];
        s.setParts(t, parts);
        s.setGranule(t, effectiveGranule(shape[t], parts, size, granule));
      }
      return s;
    };
    // Operands: free leaves take the layout the op wants; others are resharded when they differ.
    std::vector<bool> seen(op.inputs.size(), false);
    for (const auto& r : space->reads) {
      if (seen[r.operand]) continue;
      seen[r.operand] = true;
      const ir::TensorId id = op.inputs[r.operand];
      TensorSharding want = layoutOf(r, id);
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
      TensorSharding s = layoutOf(w, op.outputs[w.operand]);
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
