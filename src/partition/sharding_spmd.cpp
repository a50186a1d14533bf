// SPMD materialisation of sharding plans and the multi-device reference run.
#include "partition/sharding_spmd.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tsp::partition {

namespace {

using Shape = std::vector<std::int64_t>;

std::int64_t elementsOf(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Calls fn(dstIndex, srcIndex) for every element of a block of shape `block` placed at `offset` in `big`.
template <typename Fn>
void forBlock(const Shape& big, const Shape& block, const Shape& offset, Fn fn) {
  const size_t rank = block.size();
  Shape stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * big[d];
  Shape idx(rank, 0);
  const std::int64_t n = elementsOf(block);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t at = 0;
    for (size_t d = 0; d < rank; ++d) at += (idx[d] + offset[d]) * stride[d];
    fn(i, at);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < block[d]) break;
      idx[d] = 0;
    }
  }
}

// Calls fn(localIndex, globalIndex) for every element of device's block of a tensor of `global`
// shape under s: a dim in parts holds its block of every part, in part order; padding elements
// (a ceil-sized block past its part's end) have global index -1.
template <typename Fn>
void forDeviceBlock(const Shape& global, const TensorSharding& s, const Mesh& mesh, int device, Fn fn) {
  const Shape local = localShape(global, s, mesh);
  const auto coords = mesh.coords(device);
  const size_t rank = local.size();
  std::vector<std::vector<std::int64_t>> at(rank);  // global index of every local index, per dim
  for (size_t d = 0; d < rank; ++d)
    for (std::int64_t l = 0; l < local[d]; ++l)
      at[d].push_back(s.dimAxis[d] < 0 ? l
                                       : globalIndex(l, global[d], s.parts(d), mesh.axisSizes[s.dimAxis[d]],
                                                     coords[s.dimAxis[d]], s.granule(d)));
  Shape stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * global[d];
  Shape idx(rank, 0);
  const std::int64_t n = elementsOf(local);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t offset = 0;
    for (size_t d = 0; d < rank && offset >= 0; ++d)
      offset = at[d][idx[d]] < 0 ? -1 : offset + at[d][idx[d]] * stride[d];
    fn(i, offset);  // -1: a padding element
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

// One device's block of the values (a std::vector<double> or an ir::TensorData), padding as zeros.
template <typename Values>
std::vector<double> sliceData(const Values& data, const Shape& shape, const TensorSharding& s, const Mesh& mesh, int device) {
  std::vector<double> out(static_cast<size_t>(elementsOf(localShape(shape, s, mesh))));
  forDeviceBlock(shape, s, mesh, device, [&](std::int64_t i, std::int64_t at) {
    out[static_cast<size_t>(i)] = at < 0 ? 0.0 : data[static_cast<size_t>(at)];
  });
  return out;
}

// Builds one device's graph.
class DeviceBuilder {
 public:
  DeviceBuilder(const ir::Graph& global, const ShardingPlan& plan, int device, bool weightValues)
      : global_(global), plan_(plan), mesh_(plan.mesh), device_(device), weightValues_(weightValues),
        coords_(mesh_.coords(device)),
        local_(global.tensors().size(), -1) {}

  Expected<ir::Graph> build(int& tag, std::int64_t& haloBytes, std::int64_t& collectiveBytes) {
    tag_ = &tag;
    for (ir::TensorId id : global_.inputs()) local_[id] = g_.addInput(global_.tensor(id).name, shapeOf(id), global_.tensor(id).dtype);
    for (ir::TensorId id : global_.states()) local_[id] = g_.addState(global_.tensor(id).name, shapeOf(id), global_.tensor(id).dtype);
    std::map<std::pair<ir::OpId, int>, const Reshard*> reshardOf;
    for (const auto& r : plan_.reshards) {
      reshardOf[{r.op, r.operand}] = &r;
      for (const auto& feeds : r.alsoFeeds) reshardOf[feeds] = &r;
    }
    for (size_t i = 0; i < global_.ops().size(); ++i) {
      const ir::Op& op = global_.op(i);
      layer_ = op.layer;  // the reshards of its operands run in its layer, on its stage's chips
      std::vector<ir::TensorId> inputs;
      std::vector<int> haloDims;
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        auto value = leaf(op.inputs[k]);
        if (!value) return value.error();
        ir::TensorId v = *value;
        auto found = reshardOf.find({static_cast<ir::OpId>(i), static_cast<int>(k)});
        if (found != reshardOf.end()) {
          auto moved = movedValue(*found->second, v, op.name + fmt::format(".in{}", k));
          if (!moved) return moved.error();
          v = *moved;
          for (const auto& s : found->second->steps)
            if (s.kind == ReshardKind::kHalo && k == 0) haloDims.push_back(s.dim);
        }
        inputs.push_back(v);
      }
      auto outs = addOp(static_cast<ir::OpId>(i), inputs, haloDims);
      if (!outs) return outs.error();
      for (size_t o = 0; o < op.outputs.size(); ++o) {
        const ir::TensorId id = op.outputs[o];
        const Shape want = localShape(global_.tensor(id).shape, plan_.tensors[id], mesh_);
        if (g_.tensor((*outs)[o]).shape != want)
          return modelError(op.name, fmt::format("the {} split gives a local result of shape [{}], not [{}]: the "
                                                 "split does not tile this op evenly",
                                                 plan_.tensors[id].text(mesh_),
                                                 fmt::join(g_.tensor((*outs)[o]).shape, ","), fmt::join(want, ",")));
        local_[id] = (*outs)[o];
      }
    }
    for (size_t o = 0; o < global_.outputs().size(); ++o) {
      ir::TensorId v = local_[global_.outputs()[o]];
      auto found = reshardOf.find({-1, static_cast<int>(o)});
      if (found != reshardOf.end()) {
        auto moved = movedValue(*found->second, v, fmt::format("output{}", o));
        if (!moved) return moved.error();
        v = *moved;
      }
      g_.markOutput(v);
    }
    haloBytes = halo_;
    collectiveBytes = collective_;
    return std::move(g_);
  }

 private:
  Shape shapeOf(ir::TensorId id) const { return localShape(global_.tensor(id).shape, plan_.tensors[id], mesh_); }

  Expected<ir::TensorId> leaf(ir::TensorId id) {
    if (local_[id] >= 0) return local_[id];
    const ir::Tensor& t = global_.tensor(id);
    if (t.producer >= 0) return modelError(t.name, "used before it is computed");
    ir::Data data;
    if (t.data && (weightValues_ || t.role != ir::TensorRole::kWeight))
      data = ir::makeData(sliceData(*t.data, t.shape, plan_.tensors[id], mesh_, device_));
    if (t.role == ir::TensorRole::kConstant) local_[id] = g_.addConstant(t.name, shapeOf(id), t.dtype, data);
    else local_[id] = g_.addWeight(t.name, shapeOf(id), t.dtype, data);
    return local_[id];
  }

  Expected<ir::TensorId> op(ir::OpKind kind, const std::string& name, std::vector<ir::TensorId> inputs, ir::Attrs attrs) {
    return g_.addOp(kind, name, std::move(inputs), std::move(attrs), layer_);
  }

  ir::TensorId constant(const std::string& name, Shape shape, ir::DType dtype, std::vector<double> values) {
    return g_.addConstant(name, std::move(shape), dtype, std::move(values));
  }

  // A reshard's result, made by its first operand and read by the others it feeds.
  Expected<ir::TensorId> movedValue(const Reshard& r, ir::TensorId v, const std::string& base) {
    auto done = moved_.find(&r);
    if (done != moved_.end()) return done->second;
    auto made = apply(r, v, base);
    if (made) moved_.emplace(&r, *made);
    return made;
  }

  // v with dim `axis` cut to its first n elements or padded with zeros to n.
  Expected<ir::TensorId> resize(ir::TensorId v, std::int64_t axis, std::int64_t n, const std::string& name) {
    const Shape shape = g_.tensor(v).shape;
    if (shape[axis] == n) return v;
    if (shape[axis] > n)
      return op(ir::OpKind::kSlice, name, {v}, {{"starts", Shape{0}}, {"ends", Shape{n}}, {"axes", Shape{axis}}});
    Shape padding = shape;
    padding[axis] = n - shape[axis];
    auto pad = zeros(padding, g_.tensor(v).dtype, name);
    if (!pad) return pad.error();
    return op(ir::OpKind::kConcat, name, {v, *pad}, {{"axis", axis}});
  }

  // Zeros of `shape`: one zero expanded, since a padded KV cache or weight block would otherwise be
  // held as a constant of its full size on every device of the plan (gigabytes at tp 64).
  Expected<ir::TensorId> zeros(const Shape& shape, ir::DType dtype, const std::string& name) {
    const ir::TensorId zero = constant(name + ".zero", Shape(shape.size(), 1), dtype, {0.0});
    return op(ir::OpKind::kExpand, name + ".zeros", {zero}, {{"shape", shape}});
  }

  // One reshard: its steps in order on the local value.
  Expected<ir::TensorId> apply(const Reshard& r, ir::TensorId v, const std::string& base) {
    int n = 0;
    for (const auto& s : r.steps) {
      const std::string name = fmt::format("{}.{}{}", base, reshardKindName(s.kind), n++);
      const auto members = mesh_.group(device_, s.axis);
      const int size = mesh_.axisSizes[s.axis];
      const int pos = coords_[s.axis];
      const ir::Tensor t = g_.tensor(v);
      const std::int64_t bytes = t.bytes();
      ir::Attrs attrs{{"group", std::int64_t{size}},
                      {"devices", std::vector<std::int64_t>(members.begin(), members.end())},
                      {"tag", std::int64_t{(*tag_)++}},
                      {"mesh_axis", mesh_.axisNames[s.axis]}};
      // A dim in parts is unfolded to [parts, part] around the collective, which then moves each
      // part's block; a part the axis does not divide is padded to size x its ceil-sized block
      // before it is scattered or sliced (every device pads, so that all run the same ops: the
      // cluster schedule walks the devices' graphs op by op) and cut back to its length after it
      // is gathered; the result is folded back to the local shape.
      const Shape& global = global_.tensor(r.tensor).shape;
      const bool gathers = s.kind == ReshardKind::kAllGather || s.kind == ReshardKind::kAllToAll;
      const int gatherDim = s.kind == ReshardKind::kAllGather ? s.dim : s.kind == ReshardKind::kAllToAll ? s.fromDim : -1;
      const int scatterDim = s.kind == ReshardKind::kReduceScatter || s.kind == ReshardKind::kSlice ||
                                     s.kind == ReshardKind::kAllToAll ? s.dim : -1;
      Shape unfolded;
      std::vector<int> inner(t.shape.size());
      for (size_t d = 0; d < t.shape.size(); ++d) {
        const int di = static_cast<int>(d);
        const std::int64_t parts = di == gatherDim ? s.fromParts : di == scatterDim ? s.parts : 1;
        if (parts > 1) unfolded.push_back(parts);
        inner[d] = static_cast<int>(unfolded.size());
        unfolded.push_back(t.shape[d] / parts);
      }
      Shape result = t.shape;
      if (gathers) result[gatherDim] = global[gatherDim];
      if (scatterDim >= 0) result[scatterDim] = s.parts * blockOf(global[scatterDim], s.parts, size, s.granule);
      const bool moves = s.kind != ReshardKind::kAllReduce && s.kind != ReshardKind::kHalo;
      if (moves && unfolded.size() != t.shape.size()) {
        auto r = op(ir::OpKind::kReshape, name + ".parts", {v}, {{"shape", unfolded}});
        if (!r) return r.error();
        v = *r;
      }
      const std::int64_t block = scatterDim >= 0 ? blockOf(global[scatterDim], s.parts, size, s.granule) : 0;
      if (scatterDim >= 0) {  // pad each part to size x its block
        const std::int64_t padded = size * block;
        auto p = resize(v, inner[scatterDim], padded, name + ".pad");
        if (!p) return p.error();
        v = *p;
      }
      const std::int64_t dim = s.dim >= 0 ? inner[s.dim] : s.dim;
      Expected<ir::TensorId> out = v;
      switch (s.kind) {
        case ReshardKind::kAllReduce:
          collective_ += bytes * 2 * (size - 1) / size;
          out = op(ir::OpKind::kAllReduce, name, {v}, attrs);
          break;
        case ReshardKind::kReduceScatter:
          collective_ += bytes * (size - 1) / size;
          attrs["axis"] = dim;
          out = op(ir::OpKind::kReduceScatter, name, {v}, attrs);
          break;
        case ReshardKind::kAllGather:
          collective_ += bytes * (size - 1);
          attrs["axis"] = dim;
          out = op(ir::OpKind::kAllGather, name, {v}, attrs);
          break;
        case ReshardKind::kAllToAll:
          collective_ += bytes * (size - 1) / size;
          attrs["split_axis"] = dim;
          attrs["concat_axis"] = std::int64_t{inner[s.fromDim]};
          out = op(ir::OpKind::kAllToAll, name, {v}, attrs);
          break;
        case ReshardKind::kSlice:  // the device's own block of each part (zeros past the part's end)
          out = op(ir::OpKind::kSlice, name, {v},
                   {{"starts", Shape{pos * block}}, {"ends", Shape{(pos + 1) * block}}, {"axes", Shape{dim}}});
          break;
        case ReshardKind::kHalo:
          out = halo(v, s, members, pos, name);
          break;
      }
      if (out && gathers)  // each gathered part cut back to its length
        out = resize(*out, inner[gatherDim], global[gatherDim] / s.fromParts, name + ".cut");
      if (out && moves && g_.tensor(*out).shape != result)
        out = op(ir::OpKind::kReshape, name + ".fold", {*out}, {{"shape", result}});
      if (!out) return out.error();
      v = *out;
    }
    return v;
  }

  // Edge rows from the neighbours along the axis (zeros, the padding, at the ends), joined around v.
  Expected<ir::TensorId> halo(ir::TensorId v, const ReshardStep& s, const std::vector<int>& members, int pos,
                              const std::string& name) {
    const Shape shape = g_.tensor(v).shape;
    const ir::DType dtype = g_.tensor(v).dtype;
    const std::int64_t size = shape[s.dim];
    if (s.haloBefore > size || s.haloAfter > size)
      return modelError(name, fmt::format("a halo of {}+{} elements is wider than the block of {}", s.haloBefore,
                                          s.haloAfter, size));
    const int last = static_cast<int>(members.size()) - 1;
    const std::int64_t tagBefore = (*tag_)++, tagAfter = (*tag_)++;
    auto edge = [&](std::int64_t start, std::int64_t end, int peer, std::int64_t tag, const char* what) -> Status {
      auto part = op(ir::OpKind::kSlice, name + what, {v}, {{"starts", Shape{start}}, {"ends", Shape{end}}, {"axes", Shape{s.dim}}});
      if (!part) return part.error();
      auto sent = g_.addMultiOp(ir::OpKind::kSend, name + what + ".send", {*part},
                                {{"peer", std::int64_t{peer}}, {"tag", tag}}, layer_);
      if (!sent) return sent.error();
      return {};
    };
    // Sends first: each device's last rows go to the next device's "before" halo, its first rows to the previous.
    if (s.haloBefore > 0 && pos < last)
      if (auto st = edge(size - s.haloBefore, size, members[pos + 1], tagBefore, ".tail"); !st) return st.error();
    if (s.haloAfter > 0 && pos > 0)
      if (auto st = edge(0, s.haloAfter, members[pos - 1], tagAfter, ".head"); !st) return st.error();
    std::vector<ir::TensorId> parts;
    auto piece = [&](std::int64_t rows, bool fromPeer, int peer, std::int64_t tag, const char* what) -> Status {
      Shape ps = shape;
      ps[s.dim] = rows;
      Expected<ir::TensorId> p = fromPeer
          ? op(ir::OpKind::kRecv, name + what, {}, {{"peer", std::int64_t{peer}}, {"tag", tag}, {"shape", ps},
                                                   {"dtype", std::string(ir::dtypeName(dtype))}})
          : Expected<ir::TensorId>(constant(name + what, ps, dtype, std::vector<double>(elementsOf(ps), 0.0)));
      if (!p) return p.error();
      if (fromPeer) halo_ += g_.tensor(*p).bytes();
      parts.push_back(*p);
      return {};
    };
    if (s.haloBefore > 0)
      if (auto st = piece(s.haloBefore, pos > 0, pos > 0 ? members[pos - 1] : -1, tagBefore, ".before"); !st) return st.error();
    parts.push_back(v);
    if (s.haloAfter > 0)
      if (auto st = piece(s.haloAfter, pos < last, pos < last ? members[pos + 1] : -1, tagAfter, ".after"); !st) return st.error();
    return op(ir::OpKind::kConcat, name + ".join", parts, {{"axis", std::int64_t{s.dim}}});
  }

  // The op on local operands, with attributes that name shapes made local.
  Expected<std::vector<ir::TensorId>> addOp(ir::OpId id, std::vector<ir::TensorId> inputs, const std::vector<int>& haloDims) {
    const ir::Op& op = global_.op(id);
    ir::Attrs attrs = op.attrs;
    const auto& dimAxis = plan_.opDimAxis[id];
    if (!op.outputs.empty() &&
        (op.kind == ir::OpKind::kReshape || op.kind == ir::OpKind::kExpand || op.kind == ir::OpKind::kConstantOfShape))
      attrs["shape"] = shapeOf(op.outputs[0]);
    if (!haloDims.empty() && (op.kind == ir::OpKind::kConv || op.kind == ir::OpKind::kMaxPool ||
                              op.kind == ir::OpKind::kAveragePool)) {
      // The halo brought the padding in as zeros: the local window op pads nothing on those dims.
      const size_t spatial = global_.tensor(op.inputs[0]).shape.size() - 2;
      Shape pads = op.intsAttr("pads", Shape(2 * spatial, 0));
      for (int d : haloDims) pads[d - 2] = pads[spatial + d - 2] = 0;
      attrs["pads"] = pads;
    }
    if (op.kind == ir::OpKind::kGemm && op.inputs.size() == 3 && dimAxis[2] >= 0 && coords_[dimAxis[2]] != 0)
      attrs["beta"] = 0.0;  // a split contraction: the bias joins the partial sums once, on the first device
    if (op.kind == ir::OpKind::kSplit) {
      // Split in parts: every output is whole parts, of which a device holds 1/size.
      const auto& x = global_.tensor(op.inputs[0]).shape;
      std::int64_t axis = op.intAttr("axis", 0);
      if (axis < 0) axis += static_cast<std::int64_t>(x.size());
      if (dimAxis[axis] >= 0) {
        Shape sizes;
        const auto& in = plan_.tensors[op.inputs[0]];
        const std::int64_t part = x[axis] / in.parts(axis),
                           block = blockOf(x[axis], in.parts(axis), mesh_.axisSizes[dimAxis[axis]], in.granule(axis));
        for (ir::TensorId out : op.outputs) sizes.push_back(global_.tensor(out).shape[axis] / part * block);
        attrs["split"] = sizes;
      }
    }
    if (op.kind == ir::OpKind::kSlice) {
      // A window of whole parts: the device's blocks of those parts.
      const auto& x = global_.tensor(op.inputs[0]).shape;
      const auto& y = global_.tensor(op.outputs[0]).shape;
      Shape starts = op.intsAttr("starts"), ends = op.intsAttr("ends"), axes = op.intsAttr("axes");
      if (axes.empty())
        for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
      for (size_t k = 0; k < starts.size(); ++k) {
        const std::int64_t a = axes[k] < 0 ? axes[k] + static_cast<std::int64_t>(x.size()) : axes[k];
        if (dimAxis[a] < 0) continue;
        const auto& in = plan_.tensors[op.inputs[0]];
        const std::int64_t part = x[a] / in.parts(a),
                           block = blockOf(x[a], in.parts(a), mesh_.axisSizes[dimAxis[a]], in.granule(a));
        const std::int64_t begin = ir::sliceStart(starts[k], x[a], 1);
        starts[k] = begin / part * block;
        ends[k] = starts[k] + y[a] / part * block;
      }
      attrs["starts"] = starts;
      attrs["ends"] = ends;
    }
    std::vector<std::string> names;
    for (ir::TensorId out : op.outputs) names.push_back(global_.tensor(out).name);
    if (op.kind == ir::OpKind::kGather) {
      // Vocabulary-parallel lookup (Megatron's): ids are mapped to rows of this device's block (ids
      // outside it to row 0), and the rows looked up are multiplied by a mask that zeroes those of
      // other devices' ids: partial sums, which one all-reduce adds. The table block is read in
      // place; the map and the mask are one small constant each, indexed by the global id.
      const Shape global = global_.tensor(op.inputs[0]).shape;
      std::int64_t axis = op.intAttr("axis", 0);
      if (axis < 0) axis += static_cast<std::int64_t>(global.size());
      const int v = static_cast<int>(dimAxis.size()) - 1;  // the table-row dim is the last of Gather's space
      if (dimAxis[v] >= 0) {
        const ir::Tensor table = g_.tensor(inputs[0]);
        const std::int64_t rows = table.shape[axis], lo = coords_[dimAxis[v]] * rows, total = global[axis];
        std::vector<double> map(total, 0.0), keep(total, 0.0);
        for (std::int64_t id = lo; id < std::min(lo + rows, total); ++id) {
          map[id] = static_cast<double>(id - lo);
          keep[id] = 1.0;
        }
        const ir::TensorId mapT = constant(op.name + ".row_map", {total}, g_.tensor(inputs[1]).dtype, std::move(map));
        // [total, 1, ..., 1]: looked up by the ids, it broadcasts over the table's dims after the rows.
        Shape maskShape(global.size() - axis, 1);
        maskShape[0] = total;
        const ir::TensorId maskT = constant(op.name + ".row_mask", maskShape, table.dtype, std::move(keep));
        auto ids = this->op(ir::OpKind::kGather, op.name + ".local_ids", {mapT, inputs[1]}, {{"axis", std::int64_t{0}}});
        if (!ids) return ids.error();
        auto mask = this->op(ir::OpKind::kGather, op.name + ".mask", {maskT, inputs[1]}, {{"axis", std::int64_t{0}}});
        if (!mask) return mask.error();
        auto rowsRead = g_.addMultiOp(op.kind, op.name, {inputs[0], *ids}, std::move(attrs), op.layer,
                                      {names[0] + ".rows"});
        if (!rowsRead) return rowsRead.error();
        return g_.addMultiOp(ir::OpKind::kMul, op.name + ".masked", {rowsRead->front(), *mask}, {}, op.layer, names);
      }
    }
    return g_.addMultiOp(op.kind, op.name, std::move(inputs), std::move(attrs), op.layer, names);
  }

  const ir::Graph& global_;
  const ShardingPlan& plan_;
  const Mesh& mesh_;
  int device_;
  bool weightValues_;
  std::vector<int> coords_;
  std::vector<ir::TensorId> local_;
  std::map<const Reshard*, ir::TensorId> moved_;  // reshards applied, by the reshard
  ir::Graph g_;
  int* tag_ = nullptr;
  int layer_ = 0;
  std::int64_t halo_ = 0, collective_ = 0;
};

}  // namespace

Expected<DeviceGraphs> shardGraph(const ir::Graph& graph, const ShardingPlan& plan) {
  DeviceGraphs out;
  out.mesh = plan.mesh;
  for (const auto& list : {graph.inputs(), graph.states()})
    for (ir::TensorId id : list) out.inputShardings.push_back(plan.tensors[id]);
  for (ir::TensorId id : graph.outputs()) {
    out.outputShapes.push_back(graph.tensor(id).shape);
    TensorSharding s = plan.tensors[id];
    s.partialAxes.clear();
    out.outputShardings.push_back(s);
  }
  for (int d = 0; d < plan.mesh.devices(); ++d) {
    int tag = 0;  // every device numbers its collectives in the same order
    std::int64_t halo = 0, collective = 0;
    auto g = DeviceBuilder(graph, plan, d, true).build(tag, halo, collective);
    if (!g) return g.error();
    out.graphs.push_back(std::move(*g));
    out.haloBytes.push_back(halo);
    out.collectiveBytes.push_back(collective);
  }
  return out;
}

Expected<ir::Graph> shardDevice(const ir::Graph& graph, const ShardingPlan& plan, int device, bool weightValues) {
  int tag = 0;
  std::int64_t halo = 0, collective = 0;
  return DeviceBuilder(graph, plan, device, weightValues).build(tag, halo, collective);
}

ir::Value sliceValue(const ir::Value& global, const TensorSharding& sharding, const Mesh& mesh, int device) {
  ir::Value v;
  v.dtype = global.dtype;
  v.shape = localShape(global.shape, sharding, mesh);
  v.data = sliceData(global.data, global.shape, sharding, mesh, device);
  return v;
}

namespace {

// Splits value into `parts` equal blocks along axis.
std::vector<ir::Value> splitValue(const ir::Value& value, std::int64_t axis, int parts) {
  std::vector<ir::Value> out;
  Shape block = value.shape;
  block[axis] /= parts;
  for (int p = 0; p < parts; ++p) {
    ir::Value v{value.dtype, block, std::vector<double>(elementsOf(block))};
    Shape offset(block.size(), 0);
    offset[axis] = p * block[axis];
    forBlock(value.shape, block, offset, [&](std::int64_t i, std::int64_t at) { v.data[i] = value.data[at]; });
    out.push_back(std::move(v));
  }
  return out;
}

ir::Value concatValues(const std::vector<ir::Value>& parts, std::int64_t axis) {
  Shape shape = parts[0].shape;
  shape[axis] *= static_cast<std::int64_t>(parts.size());
  ir::Value v{parts[0].dtype, shape, std::vector<double>(elementsOf(shape))};
  for (size_t p = 0; p < parts.size(); ++p) {
    Shape offset(shape.size(), 0);
    offset[axis] = static_cast<std::int64_t>(p) * parts[0].shape[axis];
    forBlock(shape, parts[p].shape, offset, [&](std::int64_t i, std::int64_t at) { v.data[at] = parts[p].data[i]; });
  }
  return v;
}

// Results of one collective for every member, in member order.
std::vector<ir::Value> runCollective(const ir::Op& op, const std::vector<const ir::Value*>& in) {
  const size_t n = in.size();
  std::vector<ir::Value> out;
  auto sum = [&]() {
    ir::Value total = *in[0];
    for (size_t m = 1; m < n; ++m)
      for (size_t e = 0; e < total.data.size(); ++e) total.data[e] = ir::castTo(total.data[e] + in[m]->data[e], total.dtype);
    return total;
  };
  switch (op.kind) {
    case ir::OpKind::kAllReduce: out.assign(n, sum()); break;
    case ir::OpKind::kReduceScatter: out = splitValue(sum(), op.intAttr("axis", 0), static_cast<int>(n)); break;
    case ir::OpKind::kAllGather: {
      std::vector<ir::Value> parts;
      for (const auto* v : in) parts.push_back(*v);
      out.assign(n, concatValues(parts, op.intAttr("axis", 0)));
      break;
    }
    case ir::OpKind::kAllToAll: {
      std::vector<std::vector<ir::Value>> chunks;
      for (const auto* v : in) chunks.push_back(splitValue(*v, op.intAttr("split_axis", 0), static_cast<int>(n)));
      for (size_t j = 0; j < n; ++j) {
        std::vector<ir::Value> parts;
        for (size_t i = 0; i < n; ++i) parts.push_back(chunks[i][j]);
        out.push_back(concatValues(parts, op.intAttr("concat_axis", 0)));
      }
      break;
    }
    default: break;
  }
  return out;
}

}  // namespace

Expected<std::vector<ir::Value>> interpretSharded(const DeviceGraphs& devices, const std::vector<ir::Value>& inputs) {
  const Mesh& mesh = devices.mesh;
  const int count = mesh.devices();
  if (inputs.size() != devices.inputShardings.size())
    return makeError(ExitCode::kModel, fmt::format("the graph takes {} inputs and states, {} were given",
                                                   devices.inputShardings.size(), inputs.size()));
  struct DeviceState {
    std::vector<ir::Value> values;
    size_t next = 0;
  };
  std::vector<DeviceState> state(count);
  for (int d = 0; d < count; ++d) {
    const ir::Graph& g = devices.graphs[d];
    state[d].values.resize(g.tensors().size());
    size_t k = 0;
    for (const auto& list : {g.inputs(), g.states()})
      for (ir::TensorId id : list) {
        state[d].values[id] = sliceValue(inputs[k], devices.inputShardings[k], mesh, d);
        ++k;
      }
    for (const auto& list : {g.weights(), g.constants()})
      for (ir::TensorId id : list) {
        const ir::Tensor& t = g.tensor(id);
        if (!t.data) return modelError(t.name, "weight values were not loaded; the interpreter needs them");
        state[d].values[id] = ir::Value{t.dtype, t.shape, *t.data};
      }
  }
  std::map<std::tuple<int, int, std::int64_t>, ir::Value> mailbox;   // (src, dst, tag)
  // One collective instance is (tag, members): devices number their collectives alike, groups differ.
  using Instance = std::pair<std::int64_t, std::vector<std::int64_t>>;
  std::map<Instance, std::map<int, const ir::Value*>> arrived;  // instance -> device -> input
  std::map<Instance, std::map<int, ir::Value>> results;         // instance -> device -> output
  bool progress = true;
  auto done = [&]() {
    for (int d = 0; d < count; ++d)
      if (state[d].next < devices.graphs[d].ops().size()) return false;
    return true;
  };
  while (!done()) {
    if (!progress) return makeError(ExitCode::kInternal, "the sharded graphs deadlock: a receive or collective never completes");
    progress = false;
    for (int d = 0; d < count; ++d) {
      const ir::Graph& g = devices.graphs[d];
      auto& st = state[d];
      while (st.next < g.ops().size()) {
        const ir::Op& op = g.op(st.next);
        const std::int64_t tag = op.intAttr("tag", -1);
        if (op.kind == ir::OpKind::kSend) {
          mailbox[{d, static_cast<int>(op.intAttr("peer", -1)), tag}] = st.values[op.inputs[0]];
        } else if (op.kind == ir::OpKind::kRecv) {
          auto found = mailbox.find({static_cast<int>(op.intAttr("peer", -1)), d, tag});
          if (found == mailbox.end()) break;
          st.values[op.outputs[0]] = std::move(found->second);
          mailbox.erase(found);
        } else if (op.kind == ir::OpKind::kAllReduce || op.kind == ir::OpKind::kAllGather ||
                   op.kind == ir::OpKind::kReduceScatter || op.kind == ir::OpKind::kAllToAll) {
          const Instance instance{tag, op.intsAttr("devices")};
          const auto& members = instance.second;
          auto& mine = results[instance];
          if (!mine.count(d)) {
            auto& here = arrived[instance];
            here[d] = &st.values[op.inputs[0]];
            if (here.size() < members.size()) break;
            std::vector<const ir::Value*> in;
            for (auto m : members) in.push_back(here.at(static_cast<int>(m)));
            auto outs = runCollective(op, in);
            for (size_t m = 0; m < members.size(); ++m) mine[static_cast<int>(members[m])] = std::move(outs[m]);
            arrived.erase(instance);
          }
          st.values[op.outputs[0]] = std::move(mine.at(d));
          mine.erase(d);
        } else {
          std::vector<const ir::Value*> ins;
          for (ir::TensorId in : op.inputs) ins.push_back(&st.values[in]);
          std::vector<ir::TensorType> types;
          for (ir::TensorId out : op.outputs) types.push_back({g.tensor(out).shape, g.tensor(out).dtype});
          auto outs = ir::evaluateOp(op.kind, op.name, op.attrs, ins, types);
          if (!outs) return outs.error();
          for (size_t k = 0; k < op.outputs.size(); ++k) st.values[op.outputs[k]] = std::move((*outs)[k]);
        }
        ++st.next;
        progress = true;
      }
    }
  }
  // Reassemble each output; replicas must agree exactly.
  std::vector<ir::Value> outputs;
  for (size_t o = 0; o < devices.outputShardings.size(); ++o) {
    const TensorSharding& s = devices.outputShardings[o];
    const ir::Value& first = state[0].values[devices.graphs[0].outputs()[o]];
    const Shape& global = devices.outputShapes[o];
    ir::Value value{first.dtype, global, std::vector<double>(elementsOf(global), 0.0)};
    std::vector<bool> filled(value.data.size(), false);
    for (int d = 0; d < count; ++d) {
      const ir::Value& local = state[d].values[devices.graphs[d].outputs()[o]];
      bool agree = true;
      forDeviceBlock(global, s, mesh, d, [&](std::int64_t i, std::int64_t at) {
        if (at < 0) return;
        if (filled[at] && value.data[at] != local.data[i]) agree = false;
        value.data[at] = local.data[i];
        filled[at] = true;
      });
      if (!agree)
        return makeError(ExitCode::kInternal, fmt::format("output {}: replicas on device {} differ from device 0", o, d));
    }
    outputs.push_back(std::move(value));
  }
  return outputs;
}

}  // namespace tsp::partition
