// The graph passes, the liveness analysis and the pass manager.
#include "compile/passes/passes.h"

#include <algorithm>
#include <functional>
#include <list>
#include <numeric>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compile/ir/interpreter.h"
#include "compile/passes/rewriter.h"
#include "support/strings.h"

namespace tsp::passes {

using ir::OpKind;
using ir::TensorId;
using Shape = std::vector<std::int64_t>;

// ---------------------------------------------------------------------------------------------
// Rewriter

Rewriter::Rewriter(const ir::Graph& source) : source_(source), map_(source.tensors().size(), -1) {
  for (TensorId id : source.inputs()) {
    const auto& t = source.tensor(id);
    map_[id] = graph_.addInput(t.name, t.shape, t.dtype);
  }
  for (TensorId id : source.states()) {
    const auto& t = source.tensor(id);
    map_[id] = graph_.addState(t.name, t.shape, t.dtype);
  }
}

TensorId Rewriter::map(TensorId old) {
  if (map_[old] >= 0) return map_[old];
  const auto& t = source_.tensor(old);
  assert(t.producer < 0 && "an op result is mapped when its op is copied");
  if (t.role == ir::TensorRole::kWeight) map_[old] = graph_.addWeight(t.name, t.shape, t.dtype, t.data);
  else map_[old] = graph_.addConstant(t.name, t.shape, t.dtype, t.data);
  return map_[old];
}

Status Rewriter::copy(const ir::Op& op) {
  std::vector<TensorId> inputs;
  for (TensorId in : op.inputs) inputs.push_back(map(in));
  std::vector<std::string> names;
  for (TensorId out : op.outputs) names.push_back(source_.tensor(out).name);
  auto outs = graph_.addMultiOp(op.kind, op.name, inputs, op.attrs, op.layer, names);
  if (!outs) return outs.error();
  for (size_t i = 0; i < op.outputs.size(); ++i) map_[op.outputs[i]] = (*outs)[i];
  return {};
}

Status Rewriter::replace(const ir::Op& old, OpKind kind, const std::string& name, std::vector<TensorId> inputs,
                         ir::Attrs attrs, int layer) {
  std::vector<std::string> names;
  for (TensorId out : old.outputs) names.push_back(source_.tensor(out).name);
  auto outs = graph_.addMultiOp(kind, name, std::move(inputs), std::move(attrs), layer, names);
  if (!outs) return outs.error();
  for (size_t i = 0; i < old.outputs.size() && i < outs->size(); ++i) map_[old.outputs[i]] = (*outs)[i];
  return {};
}

ir::Graph Rewriter::finish() {
  for (TensorId out : source_.outputs()) graph_.markOutput(map(out));
  return std::move(graph_);
}

namespace {

// Users of a tensor counted per use, and whether it is a graph output: the conditions under
// which a producer may be merged into its consumer.
struct UseCounts {
  explicit UseCounts(const ir::Graph& g) : uses(g.tensors().size(), 0), isOutput(g.tensors().size(), false) {
    for (const auto& op : g.ops())
      for (TensorId in : op.inputs) ++uses[in];
    for (TensorId out : g.outputs()) isOutput[out] = true;
  }
  bool soleUse(TensorId t) const { return uses[t] == 1 && !isOutput[t]; }
  std::vector<int> uses;
  std::vector<bool> isOutput;
};

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  // splitmix64 finaliser over the combination: good spread for small ids.
  std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t v, unsigned r) { return r % 64 == 0 ? v : (v << (r % 64)) | (v >> (64 - r % 64)); }

std::uint64_t hashAttrs(const ir::Attrs& attrs) {
  std::uint64_t h = 0x51ed27;
  for (const auto& [key, value] : attrs) {
    h = mix(h, std::hash<std::string>{}(key));
    h = mix(h, value.index());
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::int64_t>) h = mix(h, static_cast<std::uint64_t>(v));
          else if constexpr (std::is_same_v<V, double>) h = mix(h, std::hash<double>{}(v));
          else if constexpr (std::is_same_v<V, std::string>) h = mix(h, std::hash<std::string>{}(v));
          else
            for (const auto& e : v) h = mix(h, std::hash<std::decay_t<decltype(e)>>{}(e));
        },
        value);
  }
  return h;
}

bool commutative(OpKind kind) { return kind == OpKind::kAdd || kind == OpKind::kMul || kind == OpKind::kEqual; }

bool isUnaryElementwise(OpKind kind) {
  return kind == OpKind::kRelu || kind == OpKind::kGelu || kind == OpKind::kTanh || kind == OpKind::kSigmoid ||
         kind == OpKind::kExp || kind == OpKind::kSqrt || kind == OpKind::kErf;
}

bool isBinaryElementwise(OpKind kind) {
  return kind == OpKind::kAdd || kind == OpKind::kSub || kind == OpKind::kMul || kind == OpKind::kDiv ||
         kind == OpKind::kPow;
}

bool allEqual(const ir::Tensor& t, double value) {
  return t.data && std::all_of(t.data->begin(), t.data->end(), [&](double v) { return v == value; });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CSE

Expected<ir::Graph> eliminateCommonSubexpressions(const ir::Graph& g) {
  Rewriter rw(g);
  // Value numbers of old tensors: leaves by identity (constants by content), op results by the
  // op's signature and output index.
  std::vector<std::uint64_t> number(g.tensors().size(), 0);
  std::unordered_map<std::uint64_t, std::vector<TensorId>> constantsBySignature;
  for (size_t id = 0; id < g.tensors().size(); ++id) {
    const auto& t = g.tensor(static_cast<TensorId>(id));
    if (t.producer >= 0) continue;
    number[id] = mix(0xc0ffee, id);
    if (t.role != ir::TensorRole::kConstant) continue;
    std::uint64_t h = mix(static_cast<std::uint64_t>(t.dtype), t.shape.size());
    for (auto d : t.shape) h = mix(h, static_cast<std::uint64_t>(d));
    for (double v : *t.data) h = mix(h, std::hash<double>{}(v));
    number[id] = h;
    // Identical constants share one tensor.
    auto& bucket = constantsBySignature[h];
    for (TensorId other : bucket) {
      const auto& o = g.tensor(other);
      if (o.dtype == t.dtype && o.shape == t.shape && *o.data == *t.data) {
        rw.alias(static_cast<TensorId>(id), rw.map(other));
        break;
      }
    }
    bucket.push_back(static_cast<TensorId>(id));
  }
  std::unordered_map<std::uint64_t, std::vector<ir::OpId>> available;
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const auto& op = g.op(static_cast<ir::OpId>(i));
    // The seed's signature: kind, each input's value number rotated by its position, attributes.
    std::vector<std::uint64_t> ins;
    for (TensorId in : op.inputs) ins.push_back(number[in]);
    if (commutative(op.kind)) std::sort(ins.begin(), ins.end());
    std::uint64_t sig = mix(0x5eed, static_cast<std::uint64_t>(op.kind));
    for (size_t k = 0; k < ins.size(); ++k) sig ^= rotl(ins[k], static_cast<unsigned>(7 * k + 1));
    sig = mix(sig, hashAttrs(op.attrs));
    for (size_t k = 0; k < op.outputs.size(); ++k) number[op.outputs[k]] = mix(sig, k);
    if (ir::hasSideEffects(op.kind)) {
      if (auto s = rw.copy(op); !s) return s.error();
      continue;
    }
    // Equivalence check: same kind and attributes, and the same new-graph inputs (in either
    // order for commutative ops). A hash collision never merges different ops.
    std::vector<TensorId> mine;
    for (TensorId in : op.inputs) mine.push_back(rw.map(in));
    const ir::Op* match = nullptr;
    for (ir::OpId other : available[sig]) {
      const auto& o = g.op(other);
      if (o.kind != op.kind || o.attrs != op.attrs || o.outputs.size() != op.outputs.size()) continue;
      std::vector<TensorId> theirs;
      for (TensorId in : o.inputs) theirs.push_back(rw.map(in));
      std::vector<TensorId> a = mine, b = theirs;
      if (commutative(op.kind)) {
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
      }
      if (a == b) {
        match = &o;
        break;
      }
    }
    if (match) {
      for (size_t k = 0; k < op.outputs.size(); ++k) rw.alias(op.outputs[k], rw.map(match->outputs[k]));
      continue;
    }
    available[sig].push_back(static_cast<ir::OpId>(i));
    if (auto s = rw.copy(op); !s) return s.error();
  }
  return rw.finish();
}

// ---------------------------------------------------------------------------------------------
// DCE

Expected<ir::Graph> eliminateDeadCode(const ir::Graph& g) {
  std::vector<bool> liveTensor(g.tensors().size(), false), liveOp(g.ops().size(), false);
  std::vector<TensorId> work(g.outputs().begin(), g.outputs().end());
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (ir::hasSideEffects(g.op(static_cast<ir::OpId>(i)).kind)) {
      liveOp[i] = true;
      for (TensorId in : g.op(static_cast<ir::OpId>(i)).inputs) work.push_back(in);
    }
  while (!work.empty()) {
    const TensorId t = work.back();
    work.pop_back();
    if (liveTensor[t]) continue;
    liveTensor[t] = true;
    const ir::OpId p = g.tensor(t).producer;
    if (p < 0 || liveOp[p]) continue;
    liveOp[p] = true;
    for (TensorId in : g.op(p).inputs) work.push_back(in);
  }
  Rewriter rw(g);
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (liveOp[i])
      if (auto s = rw.copy(g.op(static_cast<ir::OpId>(i))); !s) return s.error();
  return rw.finish();
}

// ---------------------------------------------------------------------------------------------
// Constant folding

namespace {
constexpr std::int64_t kMaxFoldElements = std::int64_t{1} << 22;
}

Expected<ir::Graph> foldConstants(const ir::Graph& g) {
  Rewriter rw(g);
  ir::Graph& out = rw.target();
  for (const auto& op : g.ops()) {
    std::vector<TensorId> ins;
    for (TensorId in : op.inputs) ins.push_back(rw.map(in));
    // Identity and multiplications by one / additions of zero that keep the shape are aliases.
    if (op.kind == OpKind::kIdentity) {
      rw.alias(op.outputs[0], ins[0]);
      continue;
    }
    if ((op.kind == OpKind::kMul || op.kind == OpKind::kAdd || op.kind == OpKind::kSub || op.kind == OpKind::kDiv) &&
        ins.size() == 2) {
      const double neutral = op.kind == OpKind::kMul || op.kind == OpKind::kDiv ? 1.0 : 0.0;
      const auto& result = g.tensor(op.outputs[0]);
      bool aliased = false;
      for (int side = 0; side < 2 && !aliased; ++side) {
        // x - 0 and x / 1 only: 0 - x and 1 / x are not x.
        if ((op.kind == OpKind::kSub || op.kind == OpKind::kDiv) && side == 0) continue;
        const auto& c = out.tensor(ins[side]);
        const auto& other = out.tensor(ins[1 - side]);
        if (c.role == ir::TensorRole::kConstant && allEqual(c, neutral) && other.shape == result.shape &&
            other.dtype == result.dtype) {
          rw.alias(op.outputs[0], ins[1 - side]);
          aliased = true;
        }
      }
      if (aliased) continue;
    }
    bool constant = !ins.empty() && !ir::hasSideEffects(op.kind);
    for (TensorId in : ins) constant = constant && out.tensor(in).role == ir::TensorRole::kConstant;
    if (op.kind == OpKind::kShape || op.kind == OpKind::kConstantOfShape) constant = true;
    std::int64_t elements = 0;
    for (TensorId o : op.outputs) elements += g.tensor(o).elements();
    if (constant && elements <= kMaxFoldElements) {
      std::vector<ir::Value> values;
      for (TensorId in : ins) {
        const auto& t = out.tensor(in);
        values.push_back(ir::Value{t.dtype, t.shape, t.data ? *t.data : std::vector<double>{}});
      }
      std::vector<const ir::Value*> pointers;
      for (const auto& v : values) pointers.push_back(&v);
      std::vector<ir::TensorType> types;
      for (TensorId o : op.outputs) types.push_back({g.tensor(o).shape, g.tensor(o).dtype});
      auto results = ir::evaluateOp(op.kind, op.name, op.attrs, pointers, types);
      if (!results) return results.error();
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        const auto& t = g.tensor(op.outputs[k]);
        rw.alias(op.outputs[k], out.addConstant(t.name, t.shape, t.dtype, (*results)[k].data));
      }
      continue;
    }
    if (auto s = rw.copy(op); !s) return s.error();
  }
  return rw.finish();
}

// ---------------------------------------------------------------------------------------------
// Fusion

Expected<ir::Graph> fuseOps(const ir::Graph& g) {
  const UseCounts uses(g);
  std::vector<bool> absorbed(g.ops().size(), false);
  // For each op that heads a fusion: the ops it absorbs, in order.
  std::vector<std::vector<ir::OpId>> chainOf(g.ops().size());
  auto soleUser = [&](TensorId t) -> ir::OpId {
    return uses.soleUse(t) && g.tensor(t).users.size() == 1 ? g.tensor(t).users[0] : -1;
  };
  for (size_t i = 0; i < g.ops().size(); ++i) {
    if (absorbed[i]) continue;
    const auto& op = g.op(static_cast<ir::OpId>(i));
    if (op.kind == OpKind::kMatMul) {
      TensorId out = op.outputs[0];
      ir::OpId next = soleUser(out);
      if (next >= 0 && g.op(next).kind == OpKind::kAdd) {
        const auto& add = g.op(next);
        const TensorId other = add.inputs[0] == out ? add.inputs[1] : add.inputs[0];
        const auto& bias = g.tensor(other);
        if (bias.producer < 0 && bias.shape.size() == 1 && g.tensor(add.outputs[0]).shape == g.tensor(out).shape) {
          chainOf[i].push_back(next);
          absorbed[next] = true;
          out = add.outputs[0];
          next = soleUser(out);
        }
      }
      if (next >= 0 && isUnaryElementwise(g.op(next).kind)) {
        chainOf[i].push_back(next);
        absorbed[next] = true;
      }
      continue;
    }
    const bool startable = isUnaryElementwise(op.kind) || isBinaryElementwise(op.kind);
    if (!startable) continue;
    TensorId running = op.outputs[0];
    while (true) {
      const ir::OpId next = soleUser(running);
      if (next < 0) break;
      const auto& n = g.op(next);
      if (!isUnaryElementwise(n.kind) && !isBinaryElementwise(n.kind)) break;
      // The running value may feed only one operand of a binary op.
      if (n.inputs.size() == 2 && n.inputs[0] == n.inputs[1]) break;
      if (g.tensor(n.outputs[0]).dtype != g.tensor(op.outputs[0]).dtype) break;
      chainOf[i].push_back(next);
      absorbed[next] = true;
      running = n.outputs[0];
    }
  }

  // A fused op is emitted where its last op was: every operand of the chain exists by then.
  std::vector<ir::OpId> headOf(g.ops().size(), -1);
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (!chainOf[i].empty()) headOf[chainOf[i].back()] = static_cast<ir::OpId>(i);
  Rewriter rw(g);
  for (size_t position = 0; position < g.ops().size(); ++position) {
    if (absorbed[position] && headOf[position] < 0) continue;
    if (!absorbed[position] && !chainOf[position].empty()) continue;
    const size_t i = headOf[position] >= 0 ? static_cast<size_t>(headOf[position]) : position;
    const auto& op = g.op(static_cast<ir::OpId>(i));
    if (chainOf[i].empty()) {
      if (auto s = rw.copy(op); !s) return s.error();
      continue;
    }
    const auto& last = g.op(chainOf[i].back());
    if (op.kind == OpKind::kMatMul) {
      std::vector<TensorId> ins = {rw.map(op.inputs[0]), rw.map(op.inputs[1])};
      ir::Attrs attrs;
      std::string name = op.name;
      TensorId runningOld = op.outputs[0];
      for (ir::OpId k : chainOf[i]) {
        const auto& f = g.op(k);
        name += "+" + f.name;
        if (f.kind == OpKind::kAdd) ins.push_back(rw.map(f.inputs[0] == runningOld ? f.inputs[1] : f.inputs[0]));
        else attrs["activation"] = std::string(ir::opKindName(f.kind));
        if (f.kind == OpKind::kGelu && f.hasAttr("approximate")) attrs["approximate"] = f.attrs.at("approximate");
        runningOld = f.outputs[0];
      }
      if (auto s = rw.replace(last, OpKind::kFusedMatMul, name, ins, attrs, last.layer); !s) return s.error();
      continue;
    }
    // Elementwise chain: the running value starts as the head's first input.
    std::vector<TensorId> ins = {rw.map(op.inputs[0])};
    Shape steps;
    auto addStep = [&](const ir::Op& f, TensorId runningOld) {
      std::int64_t extra = -1, position = 0;
      if (f.inputs.size() == 2) {
        const int side = runningOld < 0 ? 0 : (f.inputs[0] == runningOld ? 0 : 1);
        const TensorId other = f.inputs[1 - side];
        position = side;
        ins.push_back(rw.map(other));
        extra = static_cast<std::int64_t>(ins.size() - 1);
      }
      steps.insert(steps.end(), {static_cast<std::int64_t>(f.kind), extra, position});
    };
    addStep(op, -1);
    TensorId runningOld = op.outputs[0];
    std::string name = op.name;
    for (ir::OpId k : chainOf[i]) {
      addStep(g.op(k), runningOld);
      runningOld = g.op(k).outputs[0];
      name += "+" + g.op(k).name;
    }
    ir::Attrs attrs = {{"steps", steps}};
    for (ir::OpId k : chainOf[i])
      if (g.op(k).kind == OpKind::kGelu && g.op(k).hasAttr("approximate")) attrs["approximate"] = g.op(k).attrs.at("approximate");
    if (op.kind == OpKind::kGelu && op.hasAttr("approximate")) attrs["approximate"] = op.attrs.at("approximate");
    if (auto s = rw.replace(last, OpKind::kFusedElementwise, name, ins, attrs, last.layer); !s) return s.error();
  }
  return rw.finish();
}

// ---------------------------------------------------------------------------------------------
// Layout normalisation

Expected<ir::Graph> normalizeLayout(const ir::Graph& g) {
  const UseCounts uses(g);
  Rewriter rw(g);
  ir::Graph& out = rw.target();
  auto permuted = [](const ir::Tensor& t, const Shape& perm, const std::string& name) {
    Shape shape;
    for (auto p : perm) shape.push_back(t.shape[p]);
    ir::Data data;
    if (t.data) {
      ir::Op transpose{OpKind::kTranspose, name, {}, {}, {{"perm", perm}}, 0};
      ir::Value v{t.dtype, t.shape, *t.data};
      auto result = ir::evaluateOp(OpKind::kTranspose, name, transpose.attrs, {&v}, {{shape, t.dtype}});
      data = ir::makeData((*result)[0].data);
    }
    return std::pair{shape, data};
  };
  for (const auto& op : g.ops()) {
    const auto& result = g.tensor(op.outputs.empty() ? 0 : op.outputs[0]);
    if (op.kind == OpKind::kGemm) {
      // Y = alpha * A' B' + beta * C as MatMul on a [K,N] weight, then scale and bias ops.
      TensorId a = rw.map(op.inputs[0]);
      TensorId b = rw.map(op.inputs[1]);
      if (op.intAttr("transA", 0)) {
        auto t = out.addOp(OpKind::kTranspose, op.name + ".a_t", {a}, {{"perm", Shape{1, 0}}}, op.layer);
        if (!t) return t.error();
        a = *t;
      }
      if (op.intAttr("transB", 0)) {
        const auto& w = g.tensor(op.inputs[1]);
        if (w.producer < 0 && w.role == ir::TensorRole::kWeight && uses.uses[op.inputs[1]] == 1) {
          auto [shape, data] = permuted(w, {1, 0}, op.name);
          b = out.addWeight(w.name + ".kn", shape, w.dtype, data);
        } else {
          auto t = out.addOp(OpKind::kTranspose, op.name + ".b_t", {b}, {{"perm", Shape{1, 0}}}, op.layer);
          if (!t) return t.error();
          b = *t;
        }
      }
      const double alpha = op.floatAttr("alpha", 1.0), beta = op.floatAttr("beta", 1.0);
      const bool hasC = op.inputs.size() > 2;
      const bool last = alpha == 1.0 && !hasC;
      auto y = out.addMultiOp(OpKind::kMatMul, op.name, {a, b}, {}, op.layer,
                              {last ? result.name : op.name + ".matmul"});
      if (!y) return y.error();
      TensorId v = (*y)[0];
      auto scalar = [&](const std::string& n, double value) {
        return out.addConstant(n, {}, result.dtype, std::vector<double>{value});
      };
      if (alpha != 1.0) {
        auto s = out.addMultiOp(OpKind::kMul, op.name + ".alpha", {v, scalar(op.name + ".alpha_value", alpha)}, {},
                                op.layer, {hasC ? op.name + ".scaled" : result.name});
        if (!s) return s.error();
        v = (*s)[0];
      }
      if (hasC) {
        TensorId c = rw.map(op.inputs[2]);
        if (beta != 1.0) {
          auto s = out.addOp(OpKind::kMul, op.name + ".beta", {c, scalar(op.name + ".beta_value", beta)}, op.layer);
          if (!s) return s.error();
          c = *s;
        }
        auto s = out.addMultiOp(OpKind::kAdd, op.name + ".bias_add", {v, c}, {}, op.layer, {result.name});
        if (!s) return s.error();
        v = (*s)[0];
      }
      rw.alias(op.outputs[0], v);
      continue;
    }
    if (op.kind == OpKind::kTranspose) {
      const auto& x = g.tensor(op.inputs[0]);
      Shape perm = op.intsAttr("perm");
      if (perm.empty()) {
        perm.resize(x.shape.size());
        std::iota(perm.rbegin(), perm.rend(), 0);
      }
      TensorId source = op.inputs[0];
      // Compose with a producing transpose that has no other use.
      if (x.producer >= 0 && g.op(x.producer).kind == OpKind::kTranspose && uses.soleUse(op.inputs[0])) {
        const auto& inner = g.op(x.producer);
        Shape innerPerm = inner.intsAttr("perm");
        if (innerPerm.empty()) {
          innerPerm.resize(x.shape.size());
          std::iota(innerPerm.rbegin(), innerPerm.rend(), 0);
        }
        Shape composed;
        for (auto p : perm) composed.push_back(innerPerm[p]);
        perm = composed;
        source = inner.inputs[0];
      }
      Shape identity(perm.size());
      std::iota(identity.begin(), identity.end(), 0);
      if (perm == identity) {
        rw.alias(op.outputs[0], rw.map(source));
        continue;
      }
      if (auto s = rw.replace(op, OpKind::kTranspose, op.name, {rw.map(source)}, {{"perm", perm}}, op.layer); !s)
        return s.error();
      continue;
    }
    if (op.kind == OpKind::kFlatten || op.kind == OpKind::kSqueeze || op.kind == OpKind::kUnsqueeze ||
        op.kind == OpKind::kReshape) {
      // One canonical Reshape with the explicit result shape, reading through reshapes it replaces.
      TensorId source = op.inputs[0];
      const auto& x = g.tensor(source);
      if (x.producer >= 0 && uses.soleUse(source)) {
        const auto kind = g.op(x.producer).kind;
        if (kind == OpKind::kFlatten || kind == OpKind::kSqueeze || kind == OpKind::kUnsqueeze || kind == OpKind::kReshape)
          source = g.op(x.producer).inputs[0];
      }
      if (g.tensor(source).shape == result.shape) {
        rw.alias(op.outputs[0], rw.map(source));
        continue;
      }
      if (auto s = rw.replace(op, OpKind::kReshape, op.name, {rw.map(source)}, {{"shape", result.shape}}, op.layer); !s)
        return s.error();
      continue;
    }
    if (auto s = rw.copy(op); !s) return s.error();
  }
  // Reshapes and transposes whose result is only read by the op that replaced them are now dead.
  auto graph = rw.finish();
  return eliminateDeadCode(graph);
}

// ---------------------------------------------------------------------------------------------
// Liveness

Liveness analyzeLiveness(const ir::Graph& g) {
  const size_t n = g.tensors().size();
  const int end = static_cast<int>(g.ops().size());
  Liveness live;
  live.first.assign(n, -1);
  live.last.assign(n, -1);
  live.offset.assign(n, -1);
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const auto& op = g.op(static_cast<ir::OpId>(i));
    for (TensorId in : op.inputs) live.last[in] = static_cast<int>(i);
    for (TensorId out : op.outputs) live.first[out] = live.last[out] = static_cast<int>(i);
  }
  for (TensorId out : g.outputs()) live.last[out] = end;
  auto isActivation = [&](TensorId t) {
    const auto role = g.tensor(t).role;
    return role == ir::TensorRole::kActivation || role == ir::TensorRole::kInput;
  };
  // Sweep over op positions: allocate results first-fit, free what died at the previous op.
  struct Block { std::int64_t offset, size; TensorId tensor; };
  std::list<Block> used;  // by offset
  auto allocate = [&](TensorId t) {
    const std::int64_t size = g.tensor(t).bytes();
    std::int64_t at = 0;
    auto it = used.begin();
    for (; it != used.end(); ++it) {
      if (it->offset - at >= size) break;
      at = it->offset + it->size;
    }
    used.insert(it, Block{at, size, t});
    live.offset[t] = at;
    live.arenaBytes = std::max(live.arenaBytes, at + size);
  };
  std::vector<std::vector<TensorId>> dieAfter(g.ops().size() + 1);
  std::int64_t liveBytes = 0;
  for (TensorId in : g.inputs()) {
    allocate(in);
    liveBytes += g.tensor(in).bytes();
    live.totalActivationBytes += g.tensor(in).bytes();
    if (live.last[in] >= 0 && live.last[in] < end) dieAfter[live.last[in]].push_back(in);
  }
  live.peakLiveBytes = liveBytes;
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const auto& op = g.op(static_cast<ir::OpId>(i));
    for (TensorId out : op.outputs) {
      if (!isActivation(out)) continue;
      allocate(out);
      liveBytes += g.tensor(out).bytes();
      live.totalActivationBytes += g.tensor(out).bytes();
      if (live.last[out] < end) dieAfter[live.last[out]].push_back(out);
    }
    live.peakLiveBytes = std::max(live.peakLiveBytes, liveBytes);
    for (TensorId dead : dieAfter[i]) {
      liveBytes -= g.tensor(dead).bytes();
      used.remove_if([&](const Block& b) { return b.tensor == dead; });
    }
  }
  return live;
}

// ---------------------------------------------------------------------------------------------
// Pass manager

const std::vector<Pass>& allPasses() {
  static const std::vector<Pass> kPasses = {
      {"fold", "constant folding; drops Identity, x*1 and x+0", foldConstants},
      {"cse", "common-subexpression elimination by structural (Merkle) hashing", eliminateCommonSubexpressions},
      {"dce", "dead-code elimination from the outputs, keeping side effects", eliminateDeadCode},
      {"layout", "Gemm to MatMul on [K,N] weights, transposes composed, reshapes canonical", normalizeLayout},
      {"fuse", "MatMul+bias+activation and elementwise chains into fused ops", fuseOps},
      {"liveness", "live ranges and a memory plan for activations (analysis; the graph is unchanged)",
       [](const ir::Graph& g) -> Expected<ir::Graph> {
         const Liveness live = analyzeLiveness(g);
         // The plan must never place two tensors that are live at once over the same bytes.
         for (size_t a = 0; a < g.tensors().size(); ++a)
           if (live.offset[a] >= 0 && live.arenaBytes < live.offset[a] + g.tensor(static_cast<TensorId>(a)).bytes())
             return makeError(ExitCode::kInternal, "liveness: a tensor lies outside the arena");
         return g;
       }},
  };
  return kPasses;
}

const char* defaultPipeline() { return "fold,cse,dce"; }

Expected<std::vector<const Pass*>> parsePipeline(const std::string& list) {
  std::vector<const Pass*> pipeline;
  std::vector<std::string> names;
  for (const auto& p : allPasses()) names.push_back(p.name);
  size_t start = 0;
  while (start <= list.size() && !list.empty()) {
    const size_t comma = list.find(',', start);
    const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const Pass* found = nullptr;
    for (const auto& p : allPasses())
      if (p.name == name) found = &p;
    if (!found) {
      const std::string hint = closestMatch(name, names);
      return makeError(ExitCode::kConfig, fmt::format("--passes: unknown pass '{}'{} (available: {})", name,
                                                      hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
                                                      fmt::join(names, ", ")));
    }
    pipeline.push_back(found);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return pipeline;
}

Expected<ir::Graph> runPipeline(ir::Graph graph, const std::vector<const Pass*>& pipeline, const AfterPass& after) {
  for (const Pass* pass : pipeline) {
    auto next = pass->run(graph);
    if (!next) {
      Diagnostic d = next.error();
      d.message = fmt::format("pass '{}': {}", pass->name, d.message);
      return d;
    }
    graph = std::move(*next);
    if (after) after(pass->name, graph);
  }
  return graph;
}

}  // namespace tsp::passes
