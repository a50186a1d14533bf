// Iteration spaces: one loop nest per op kind, with the affine index map of every operand.
#include "compile/ir/iteration_space.h"

#include "compile/ir/op_table.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace tsp::ir {

namespace {

using Shape = std::vector<std::int64_t>;

AffineExpr dimExpr(int dim, std::int64_t coeff = 1) { return AffineExpr{{{dim, coeff}}, 0}; }
AffineExpr constExpr(std::int64_t value = 0) { return AffineExpr{{}, value}; }

void normalize(AffineExpr& e) {
  std::erase_if(e.terms, [](const AffineTerm& t) { return t.coeff == 0; });
  std::stable_sort(e.terms.begin(), e.terms.end(),
                   [](const AffineTerm& a, const AffineTerm& b) { return a.coeff > b.coeff; });
}

class SpaceBuilder {
 public:
  int dim(const std::string& name, std::int64_t extent, bool opaque = false) {
    s.dimNames.push_back(name);
    s.extents.push_back(extent);
    s.opaque.push_back(opaque);
    return static_cast<int>(s.dimNames.size()) - 1;
  }
  void read(int operand, std::vector<AffineExpr> index, bool selected = false) {
    for (auto& e : index) normalize(e);
    s.reads.push_back({operand, std::move(index)});
    s.selected.push_back(selected);
  }
  void write(int operand, std::vector<AffineExpr> index) {
    for (auto& e : index) normalize(e);
    s.writes.push_back({operand, std::move(index)});
  }
  IterationSpace s;
};

// Index of an operand of shape `in` broadcast (numpy, right-aligned) to the dims `outDims` of shape `out`.
std::vector<AffineExpr> broadcastIndex(const Shape& in, const Shape& out, const std::vector<int>& outDims) {
  std::vector<AffineExpr> index;
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t o = lead + i;
    index.push_back(in[i] == 1 && out[o] != 1 ? constExpr() : dimExpr(outDims[o]));
  }
  return index;
}

// Dims named d0.. over a shape, written identity to output 0.
std::vector<int> outputDims(SpaceBuilder& b, const Shape& out, const std::string& prefix = "d") {
  std::vector<int> dims;
  for (size_t i = 0; i < out.size(); ++i) dims.push_back(b.dim(fmt::format("{}{}", prefix, i), out[i]));
  std::vector<AffineExpr> index;
  for (int d : dims) index.push_back(dimExpr(d));
  b.write(0, index);
  return dims;
}

std::int64_t normAxis(std::int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis; }

// Reshape as a common refinement of both shapes: each refined dim lies inside one input and one output
// dim, so both index maps are affine (row-major strides). Nullopt when no refinement exists.
bool reshapeSpace(SpaceBuilder& b, const Shape& in, const Shape& out) {
  struct Factor { std::int64_t extent; int inDim, outDim; };
  std::vector<Factor> factors;  // innermost first
  int i = static_cast<int>(in.size()) - 1, o = static_cast<int>(out.size()) - 1;
  std::int64_t ri = 0, ro = 0;
  auto skipOnes = [&]() {
    while (i >= 0 && ri == 0 && in[i] == 1) --i;
    while (o >= 0 && ro == 0 && out[o] == 1) --o;
  };
  while (true) {
    skipOnes();
    if (i < 0 || o < 0) break;
    if (ri == 0) ri = in[i];
    if (ro == 0) ro = out[o];
    std::int64_t f;
    if (ri == ro) f = ri;
    else if (ri % ro == 0) f = ro;
    else if (ro % ri == 0) f = ri;
    else return false;
    factors.push_back({f, i, o});
    ri /= f;
    ro /= f;
    if (ri == 1) { ri = 0; --i; }
    if (ro == 1) { ro = 0; --o; }
  }
  skipOnes();
  if (i >= 0 || o >= 0) return false;
  std::reverse(factors.begin(), factors.end());
  std::vector<AffineExpr> inIndex(in.size(), constExpr()), outIndex(out.size(), constExpr());
  std::vector<std::int64_t> inStride(in.size(), 1), outStride(out.size(), 1);
  std::vector<int> dims;
  for (size_t f = 0; f < factors.size(); ++f) dims.push_back(b.dim(fmt::format("f{}", f), factors[f].extent));
  for (size_t f = factors.size(); f-- > 0;) {
    inIndex[factors[f].inDim].terms.push_back({dims[f], inStride[factors[f].inDim]});
    inStride[factors[f].inDim] *= factors[f].extent;
    outIndex[factors[f].outDim].terms.push_back({dims[f], outStride[factors[f].outDim]});
    outStride[factors[f].outDim] *= factors[f].extent;
  }
  b.read(0, inIndex);
  b.write(0, outIndex);
  return true;
}

// Window ops (Conv, pools): out[..., h] reads in[..., h*stride + r*dilation - padLo].
struct Window {
  Shape strides, dilations, pads, kernel;
};

}  // namespace

Expected<IterationSpace> iterationSpace(const Graph& graph, const Op& op) {
  SpaceBuilder b;
  auto shapeIn = [&](size_t i) -> const Shape& { return graph.tensor(op.inputs[i]).shape; };
  const Shape out = op.outputs.empty() ? Shape{} : graph.tensor(op.outputs[0]).shape;

  // The op table's elementwise kinds share Where's broadcasting loop nest.
  const ShapeRule rule = opDefinition(op.kind).shape;
  const bool elementwise = rule == ShapeRule::kUnary || rule == ShapeRule::kBinary || rule == ShapeRule::kCompare;
  switch (elementwise ? OpKind::kWhere : op.kind) {
    case OpKind::kMatMul: case OpKind::kFusedMatMul: {
      Shape a = shapeIn(0), w = shapeIn(1);
      const bool aVec = a.size() == 1, bVec = w.size() == 1;
      if (aVec) a.insert(a.begin(), 1);
      if (bVec) w.push_back(1);
      const size_t batch = std::max(a.size(), w.size()) - 2;
      std::vector<int> batchDims;
      Shape batchShape;
      for (size_t i = 0; i < batch; ++i) {
        const size_t ai = i + a.size() - 2 - batch, bi = i + w.size() - 2 - batch;
        const std::int64_t ea = i + a.size() >= batch + 2 ? a[ai] : 1, eb = i + w.size() >= batch + 2 ? w[bi] : 1;
        batchShape.push_back(std::max(ea, eb));
        batchDims.push_back(b.dim(fmt::format("b{}", i), batchShape.back()));
      }
      const int m = b.dim("i", a[a.size() - 2]), n = b.dim("j", w.back()), k = b.dim("k", a.back());
      auto operand = [&](const Shape& s, int rowDim, int colDim, bool dropRow, bool dropCol) {
        Shape sb(s.begin(), s.end() - 2);
        std::vector<AffineExpr> index = broadcastIndex(sb, batchShape, batchDims);
        if (!dropRow) index.push_back(dimExpr(rowDim));
        if (!dropCol) index.push_back(dimExpr(colDim));
        return index;
      };
      b.read(0, operand(a, m, k, aVec, false));
      b.read(1, operand(w, k, n, false, bVec));
      std::vector<AffineExpr> y;
      for (int d : batchDims) y.push_back(dimExpr(d));
      if (!aVec) y.push_back(dimExpr(m));
      if (!bVec) y.push_back(dimExpr(n));
      if (op.inputs.size() == 3) {
        Shape full = batchShape;
        std::vector<int> fullDims = batchDims;
        if (!aVec) { full.push_back(a[a.size() - 2]); fullDims.push_back(m); }
        if (!bVec) { full.push_back(w.back()); fullDims.push_back(n); }
        b.read(2, broadcastIndex(shapeIn(2), full, fullDims));
      }
      b.write(0, y);
      b.s.combiner = Combiner::kSum;
      break;
    }
    case OpKind::kGemm: {
      const bool ta = op.intAttr("transA", 0) != 0, tb = op.intAttr("transB", 0) != 0;
      const int m = b.dim("i", out[0]), n = b.dim("j", out[1]);
      const int k = b.dim("k", ta ? shapeIn(0)[0] : shapeIn(0)[1]);
      b.read(0, ta ? std::vector{dimExpr(k), dimExpr(m)} : std::vector{dimExpr(m), dimExpr(k)});
      b.read(1, tb ? std::vector{dimExpr(n), dimExpr(k)} : std::vector{dimExpr(k), dimExpr(n)});
      if (op.inputs.size() == 3) b.read(2, broadcastIndex(shapeIn(2), out, {m, n}));
      b.write(0, {dimExpr(m), dimExpr(n)});
      b.s.combiner = Combiner::kSum;
      break;
    }
    case OpKind::kConv: case OpKind::kMaxPool: case OpKind::kAveragePool: {
      const Shape& x = shapeIn(0);
      const size_t spatial = x.size() - 2;
      const bool conv = op.kind == OpKind::kConv;
      const WindowAttrs window = windowAttrs(op, spatial, conv ? shapeIn(1) : Shape{});
      const Shape& kernel = window.kernel;
      const Shape& strides = window.strides;
      const Shape& dilations = window.dilations;
      const Shape& pads = window.pads;
      static const char* kSpatialNames[] = {"h", "w", "z"};
      static const char* kWindowNames[] = {"r", "q", "t"};
      const int n = b.dim("n", out[0]);
      const std::int64_t group = conv ? op.intAttr("group", 1) : 1;
      int g = -1;
      if (group > 1) g = b.dim("g", group);
      const int c = b.dim("c", out[1] / group);
      std::vector<int> sp, win;
      for (size_t i = 0; i < spatial; ++i)
        sp.push_back(b.dim(spatial <= 3 ? kSpatialNames[i] : fmt::format("s{}", i), out[2 + i]));
      int kin = -1;
      if (conv) kin = b.dim("k", shapeIn(1)[1]);
      for (size_t i = 0; i < spatial; ++i)
        win.push_back(b.dim(spatial <= 3 ? kWindowNames[i] : fmt::format("r{}", i), kernel[i]));
      auto channel = [&](int dim, std::int64_t perGroup) {
        AffineExpr e = dimExpr(dim);
        if (g >= 0) e.terms.push_back({g, perGroup});
        return e;
      };
      std::vector<AffineExpr> xi{dimExpr(n), conv ? channel(kin, shapeIn(1)[1]) : dimExpr(c)};
      for (size_t i = 0; i < spatial; ++i)
        xi.push_back(AffineExpr{{{sp[i], strides[i]}, {win[i], dilations[i]}}, -pads[i]});
      b.read(0, xi);
      std::vector<AffineExpr> yi{dimExpr(n), channel(c, out[1] / group)};
      for (int d : sp) yi.push_back(dimExpr(d));
      if (conv) {
        std::vector<AffineExpr> wi{channel(c, out[1] / group), dimExpr(kin)};
        for (int d : win) wi.push_back(dimExpr(d));
        b.read(1, wi);
        if (op.inputs.size() == 3) b.read(2, {channel(c, out[1] / group)});
      }
      b.write(0, yi);
      b.s.combiner = op.kind == OpKind::kMaxPool ? Combiner::kMax : Combiner::kSum;
      break;
    }
    case OpKind::kWhere: case OpKind::kFusedElementwise: case OpKind::kCast: case OpKind::kExpand: {
      const auto dims = outputDims(b, out);
      for (size_t i = 0; i < op.inputs.size(); ++i) b.read(static_cast<int>(i), broadcastIndex(shapeIn(i), out, dims));
      break;
    }
    case OpKind::kBatchNormalization: {
      const auto dims = outputDims(b, out);
      b.read(0, broadcastIndex(shapeIn(0), out, dims));
      for (int i = 1; i < 5; ++i) b.read(i, {dimExpr(dims[1])});
      break;
    }
    case OpKind::kSoftmax: case OpKind::kLayerNormalization: {
      // Y[.., j, ..] = f(X[.., j, ..], X[.., r, ..]): the statistics over r need the whole axis.
      const std::int64_t axis = normAxis(op.intAttr("axis", -1), out.size());
      const auto dims = outputDims(b, out);
      const size_t last = op.kind == OpKind::kSoftmax ? static_cast<size_t>(axis) + 1 : out.size();
      std::vector<AffineExpr> xj, xr;
      for (size_t i = 0; i < out.size(); ++i) {
        xj.push_back(dimExpr(dims[i]));
        xr.push_back(i >= static_cast<size_t>(axis) && i < last ? dimExpr(b.dim(fmt::format("r{}", i), out[i]))
                                                               : dimExpr(dims[i]));
      }
      b.read(0, xj);
      b.read(0, xr);
      const Shape normalized(out.begin() + axis, out.end());
      const std::vector<int> normDims(dims.begin() + axis, dims.end());
      for (size_t i = 1; i < op.inputs.size(); ++i) b.read(static_cast<int>(i), broadcastIndex(shapeIn(i), normalized, normDims));
      break;
    }
    case OpKind::kReduceMean: case OpKind::kReduceSum: case OpKind::kReduceMax: case OpKind::kGlobalAveragePool: {
      const Shape& x = shapeIn(0);
      std::vector<bool> reduced(x.size(), false);
      bool keep = true;
      if (op.kind == OpKind::kGlobalAveragePool) {
        for (size_t i = 2; i < x.size(); ++i) reduced[i] = true;
      } else {
        const Shape axes = op.intsAttr("axes");
        keep = op.intAttr("keepdims", 1) != 0;
        if (axes.empty() && op.intAttr("noop_with_empty_axes", 0) == 0) std::fill(reduced.begin(), reduced.end(), true);
        for (auto a : axes) reduced[normAxis(a, x.size())] = true;
      }
      std::vector<AffineExpr> xi, yi;
      for (size_t i = 0; i < x.size(); ++i) {
        const int d = b.dim(fmt::format("{}{}", reduced[i] ? "r" : "d", i), x[i]);
        xi.push_back(dimExpr(d));
        if (!reduced[i]) yi.push_back(dimExpr(d));
        else if (keep) yi.push_back(constExpr());
      }
      b.read(0, xi);
      b.write(0, yi);
      b.s.combiner = op.kind == OpKind::kReduceSum ? Combiner::kSum
                     : op.kind == OpKind::kReduceMax ? Combiner::kMax : Combiner::kNone;
      break;
    }
    case OpKind::kTranspose: {
      const Shape& x = shapeIn(0);
      Shape perm = op.intsAttr("perm");
      if (perm.empty()) {
        perm.resize(x.size());
        std::iota(perm.rbegin(), perm.rend(), 0);
      }
      const auto dims = outputDims(b, out);
      std::vector<AffineExpr> xi(x.size());
      for (size_t o = 0; o < perm.size(); ++o) xi[perm[o]] = dimExpr(dims[o]);
      b.read(0, xi);
      break;
    }
    case OpKind::kReshape: case OpKind::kFlatten: case OpKind::kSqueeze: case OpKind::kUnsqueeze: {
      if (!reshapeSpace(b, shapeIn(0), out)) {
        // No common factorisation: one opaque dim over the elements.
        b = SpaceBuilder{};
        const int d = b.dim("e", graph.tensor(op.outputs[0]).elements(), true);
        b.read(0, std::vector<AffineExpr>(shapeIn(0).size(), dimExpr(d)));
        b.write(0, std::vector<AffineExpr>(out.size(), dimExpr(d)));
      }
      break;
    }
    case OpKind::kConcat: {
      const std::int64_t axis = normAxis(op.intAttr("axis", 0), out.size());
      const auto dims = outputDims(b, out);
      b.s.opaque[dims[axis]] = true;
      std::int64_t offset = 0;
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        std::vector<AffineExpr> xi;
        for (int d : dims) xi.push_back(dimExpr(d));
        xi[axis].offset = -offset;
        offset += shapeIn(i)[axis];
        b.read(static_cast<int>(i), xi);
      }
      break;
    }
    case OpKind::kSplit: {
      const Shape& x = shapeIn(0);
      const std::int64_t axis = normAxis(op.intAttr("axis", 0), x.size());
      std::vector<int> dims;
      std::vector<AffineExpr> xi;
      for (size_t i = 0; i < x.size(); ++i) {
        dims.push_back(b.dim(fmt::format("d{}", i), x[i], static_cast<std::int64_t>(i) == axis));
        xi.push_back(dimExpr(dims.back()));
      }
      b.read(0, xi);
      std::int64_t offset = 0;
      for (size_t o = 0; o < op.outputs.size(); ++o) {
        std::vector<AffineExpr> yi = xi;
        yi[axis].offset = -offset;
        offset += graph.tensor(op.outputs[o]).shape[axis];
        b.write(static_cast<int>(o), yi);
      }
      break;
    }
    case OpKind::kSlice: {
      const Shape& x = shapeIn(0);
      const Shape starts = op.intsAttr("starts");
      Shape axes = op.intsAttr("axes"), steps = op.intsAttr("steps");
      if (axes.empty())
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
      if (steps.empty()) steps.assign(starts.size(), 1);
      const auto dims = outputDims(b, out);
      std::vector<AffineExpr> xi;
      for (int d : dims) xi.push_back(dimExpr(d));
      for (size_t i = 0; i < starts.size(); ++i) {
        const auto a = normAxis(axes[i], x.size());
        xi[a] = AffineExpr{{{dims[a], steps[i]}}, sliceStart(starts[i], x[a], steps[i])};
        b.s.opaque[dims[a]] = true;
      }
      b.read(0, xi);
      break;
    }
    case OpKind::kGather: {
      // Y[o.., i.., t..] = sum_v onehot(I[i..] == v) * D[o.., v, t..]: the table row is a sum dim.
      const Shape& data = shapeIn(0);
      const Shape& idx = shapeIn(1);
      const std::int64_t axis = normAxis(op.intAttr("axis", 0), data.size());
      const auto dims = outputDims(b, out);
      const int v = b.dim("v", data[axis]);
      std::vector<AffineExpr> di, ii;
      for (std::int64_t i = 0; i < axis; ++i) di.push_back(dimExpr(dims[i]));
      di.push_back(dimExpr(v));
      for (size_t i = axis + 1; i < data.size(); ++i) di.push_back(dimExpr(dims[i - 1 + idx.size()]));
      for (size_t i = 0; i < idx.size(); ++i) ii.push_back(dimExpr(dims[axis + i]));
      b.read(0, di, true);
      b.read(1, ii);
      b.s.combiner = Combiner::kSum;
      break;
    }
    case OpKind::kShape: case OpKind::kConstantOfShape: case OpKind::kRange: case OpKind::kAllReduce:
    case OpKind::kAllGather: case OpKind::kReduceScatter: case OpKind::kAllToAll: case OpKind::kSend:
    case OpKind::kRecv: case OpKind::kScatterND: {
      // Shape computations and communication: per-chip loops over their result, never split again.
      if (!op.outputs.empty()) {
        const auto dims = outputDims(b, out);
        for (int d : dims) b.s.opaque[d] = true;
        for (size_t i = 0; i < op.inputs.size(); ++i)
          if (graph.tensor(op.inputs[i]).shape.size() == out.size())
            b.read(static_cast<int>(i), broadcastIndex(shapeIn(i), out, dims));
      }
      break;
    }
    case OpKind::kSoftmaxCrossEntropyLoss: case OpKind::kSoftmaxCrossEntropyLossGrad: case OpKind::kConvInputGrad:
    case OpKind::kConvWeightGrad: case OpKind::kGatherGrad: case OpKind::kMaxPoolGrad: case OpKind::kAveragePoolGrad:
      // Training kernels: loops over their result on one chip; the partitioner costs them per layer.
      for (int d : outputDims(b, out)) b.s.opaque[d] = true;
      break;
    default:  // the leaves and kCount
      return modelError(op.name, "not an op kind that computes");
  }
  return std::move(b.s);
}

std::string exprText(const IterationSpace& space, const AffineExpr& expr) {
  std::string text;
  for (const auto& t : expr.terms) {
    if (!text.empty()) text += "+";
    text += space.dimNames[t.dim];
    if (t.coeff != 1) text += fmt::format("*{}", t.coeff);
  }
  if (expr.offset != 0 || text.empty()) text += text.empty() ? fmt::format("{}", expr.offset) : fmt::format("{:+}", expr.offset);
  return text;
}

std::string IterationSpace::text(const Graph& graph, const Op& op) const {
  auto access = [&](const OperandAccess& a, bool write) {
    const TensorId id = write ? op.outputs[a.operand] : op.inputs[a.operand];
    std::vector<std::string> parts;
    for (const auto& e : a.index) parts.push_back(exprText(*this, e));
    return fmt::format("{}[{}]", graph.tensor(id).name, fmt::join(parts, ","));
  };
  std::vector<std::string> ws, rs;
  for (const auto& w : writes) ws.push_back(access(w, true));
  for (const auto& r : reads) rs.push_back(access(r, false));
  bool reduces = false;
  for (size_t d = 0; d < dimNames.size(); ++d) {
    bool written = false;
    for (const auto& w : writes)
      for (const auto& e : w.index)
        for (const auto& t : e.terms) written |= t.dim == static_cast<int>(d);
    reduces |= !written;
  }
  const char* assign = !reduces || combiner == Combiner::kNone ? "=" : combiner == Combiner::kSum ? "+=" : "max=";
  return fmt::format("{} {} {}({})", fmt::join(ws, ", "), assign, opKindName(op.kind), fmt::join(rs, ", "));
}

}  // namespace tsp::ir
