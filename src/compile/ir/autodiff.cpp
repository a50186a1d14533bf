// Reverse-mode automatic differentiation on ir::Graph: one gradient rule per op kind, written with IR ops.
#include "compile/ir/autodiff.h"

#include "compile/ir/op_table.h"

#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

namespace tsp::ir {

const char* optimizerName(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kNone: return "none";
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kAdam: return "adam";
  }
  return "?";
}

const char* recomputeName(Recompute recompute) { return recompute == Recompute::kFull ? "full" : "none"; }

bool parseOptimizer(const std::string& text, Optimizer& optimizer) {
  for (Optimizer o : {Optimizer::kNone, Optimizer::kSgd, Optimizer::kAdam})
    if (text == optimizerName(o)) {
      optimizer = o;
      return true;
    }
  return false;
}

bool parseRecompute(const std::string& text, Recompute& recompute) {
  for (Recompute r : {Recompute::kNone, Recompute::kFull})
    if (text == recomputeName(r)) {
      recompute = r;
      return true;
    }
  return false;
}

namespace {

using Shape = std::vector<std::int64_t>;

// Copies the leaves and ops of src into dst; returns the id in dst of every tensor of src.
Expected<std::vector<TensorId>> copyGraph(const Graph& src, Graph& dst) {
  std::vector<TensorId> map(src.tensors().size(), -1);
  for (TensorId id : src.inputs()) map[id] = dst.addInput(src.tensor(id).name, src.tensor(id).shape, src.tensor(id).dtype);
  for (TensorId id : src.weights())
    map[id] = dst.addWeight(src.tensor(id).name, src.tensor(id).shape, src.tensor(id).dtype, src.tensor(id).data);
  for (TensorId id : src.constants())
    map[id] = dst.addConstant(src.tensor(id).name, src.tensor(id).shape, src.tensor(id).dtype, src.tensor(id).data);
  for (TensorId id : src.states()) map[id] = dst.addState(src.tensor(id).name, src.tensor(id).shape, src.tensor(id).dtype);
  for (const Op& op : src.ops()) {
    std::vector<TensorId> inputs;
    for (TensorId in : op.inputs) inputs.push_back(map[in]);
    std::vector<std::string> outNames;
    for (TensorId out : op.outputs) outNames.push_back(src.tensor(out).name);
    auto outs = dst.addMultiOp(op.kind, op.name, inputs, op.attrs, op.layer, outNames);
    if (!outs) return outs.error();
    for (size_t i = 0; i < op.outputs.size(); ++i) map[op.outputs[i]] = (*outs)[i];
  }
  return map;
}

// The options with their tensor ids (partial gradients) carried through copyGraph's map.
TrainingOptions remapped(const TrainingOptions& options, const std::vector<TensorId>& map) {
  TrainingOptions out = options;
  out.partialGradients.clear();
  for (const auto& [id, attrs] : options.partialGradients)
    if (id >= 0 && static_cast<size_t>(id) < map.size() && map[id] >= 0) out.partialGradients[map[id]] = attrs;
  return out;
}

// Appends the backward pass (and the optimizer) of every op a graph has so far to it.
class BackwardBuilder {
 public:
  BackwardBuilder(Graph& graph, const TrainingOptions& options) : g_(graph), options_(options) {}

  Expected<TrainingTensors> run(TensorId loss, TensorId seed) {
    const size_t forwardOps = g_.ops().size();
    needsGrad_.assign(g_.tensors().size(), false);
    for (TensorId w : g_.weights()) needsGrad_[w] = isFloat(g_.tensor(w).dtype);
    if (options_.inputGradients)
      for (TensorId in : g_.inputs()) needsGrad_[in] = isFloat(g_.tensor(in).dtype);
    int lastLayer = 0;
    for (size_t i = 0; i < forwardOps; ++i) {
      const Op& op = g_.op(static_cast<OpId>(i));
      lastLayer = std::max(lastLayer, op.layer);
      bool any = false;
      for (TensorId in : op.inputs) any |= needsGrad_[in];
      for (TensorId out : op.outputs) needsGrad_[out] = any && isFloat(g_.tensor(out).dtype);
    }
    if (!needsGrad_[loss]) return modelError(g_.tensor(loss).name, "the loss does not depend on any weight");
    layer_ = g_.tensor(loss).producer >= 0 ? g_.op(g_.tensor(loss).producer).layer : 0;
    addGrad(loss, seed >= 0 ? seed : scalar(1.0, g_.tensor(loss).dtype));
    int recomputedLayer = -1;
    for (size_t i = forwardOps; i-- > 0;) {
      const Op op = g_.op(static_cast<OpId>(i));  // a copy: adding ops moves the op list
      bool hasGrad = false;
      for (TensorId out : op.outputs) hasGrad |= grads_.count(out) > 0;
      if (!hasGrad) continue;
      layer_ = op.layer;
      if (options_.recompute == Recompute::kFull && op.layer != lastLayer && op.layer != recomputedLayer) {
        recomputedLayer = op.layer;
        if (auto s = recomputeLayer(op.layer, forwardOps); !s) return s.error();
      }
      for (TensorId out : op.outputs) {
        auto partial = options_.partialGradients.find(out);
        auto grad = grads_.find(out);
        if (partial == options_.partialGradients.end() || grad == grads_.end()) continue;
        where_ = g_.tensor(out).name + "/grad";
        grad->second = this->op(OpKind::kAllReduce, {grad->second}, partial->second);
      }
      if (auto s = backward(op); !s) return s.error();
      if (!error_.empty()) return modelError(errorWhere_, error_);
    }
    TrainingTensors result;
    result.loss = loss;
    for (TensorId w : g_.weights()) {
      result.weights.push_back(w);
      auto found = grads_.find(w);
      result.gradients.push_back(found == grads_.end() ? -1 : found->second);
    }
    g_.markOutput(loss);
    if (auto s = optimize(result); !s) return s.error();
    if (!error_.empty()) return modelError(errorWhere_, error_);
    return result;
  }

 private:
  // --- building blocks ---
  TensorId op(OpKind kind, std::vector<TensorId> inputs, Attrs attrs = {}) {
    if (!error_.empty()) return inputs.empty() ? 0 : inputs[0];
    auto out = g_.addOp(kind, fmt::format("{}/{}{}", where_, opKindName(kind), counter_++), std::move(inputs),
                        std::move(attrs), layer_);
    if (!out) {
      error_ = out.error().message;
      errorWhere_ = where_;
      return 0;
    }
    return *out;
  }
  TensorId scalar(double value, DType dtype) {
    return g_.addConstant(fmt::format("autodiff.const{}", counter_++), {}, dtype,
                          std::vector<double>{value});
  }
  Shape shape(TensorId t) const { return g_.tensor(t).shape; }  // a copy: adding tensors moves the list
  DType dtype(TensorId t) const { return g_.tensor(t).dtype; }
  TensorId mul(TensorId a, TensorId b) { return op(OpKind::kMul, {a, b}); }
  TensorId mulScalar(TensorId a, double v) { return mul(a, scalar(v, dtype(a))); }
  TensorId add(TensorId a, TensorId b) { return op(OpKind::kAdd, {a, b}); }
  TensorId sub(TensorId a, TensorId b) { return op(OpKind::kSub, {a, b}); }
  TensorId div(TensorId a, TensorId b) { return op(OpKind::kDiv, {a, b}); }
  TensorId zeros(const Shape& s, DType type) { return op(OpKind::kExpand, {scalar(0.0, type)}, {{"shape", s}}); }
  TensorId reshape(TensorId t, const Shape& s) { return shape(t) == s ? t : op(OpKind::kReshape, {t}, {{"shape", s}}); }
  // Swaps the last two axes.
  TensorId transposeLast(TensorId t) {
    Shape perm(shape(t).size());
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    return op(OpKind::kTranspose, {t}, {{"perm", perm}});
  }
  // Sums a broadcast gradient back to the shape of the operand it belongs to.
  TensorId reduceTo(TensorId grad, const Shape& target) {
    const Shape s = shape(grad);
    if (s == target) return grad;
    Shape axes;
    const size_t lead = s.size() - target.size();
    for (size_t i = 0; i < s.size(); ++i)
      if (i < lead || (target[i - lead] == 1 && s[i] != 1)) axes.push_back(static_cast<std::int64_t>(i));
    TensorId summed = axes.empty() ? grad
                                   : op(OpKind::kReduceSum, {grad}, {{"axes", axes}, {"keepdims", std::int64_t{1}}});
    return reshape(summed, target);
  }
  // Axes from axis to the last one.
  static Shape trailingAxes(std::int64_t axis, size_t rank) {
    Shape axes;
    for (auto a = axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis; a < static_cast<std::int64_t>(rank); ++a)
      axes.push_back(a);
    return axes;
  }

  // The value of a forward tensor the backward pass reads: the recomputed copy when there is one.
  TensorId value(TensorId t) const {
    auto found = recomputed_.find(t);
    return found == recomputed_.end() ? t : found->second;
  }
  void addGrad(TensorId t, TensorId grad) {
    if (!needsGrad_[t]) return;
    auto [it, fresh] = grads_.emplace(t, grad);
    if (!fresh) it->second = add(it->second, grad);
  }

  // Runs the forward ops of `layer` again on the layer's inputs (the checkpoint).
  Status recomputeLayer(int layer, size_t forwardOps) {
    for (size_t i = 0; i < forwardOps; ++i) {
      const Op src = g_.op(static_cast<OpId>(i));
      if (src.layer != layer) continue;
      std::vector<TensorId> inputs;
      for (TensorId in : src.inputs) inputs.push_back(value(in));
      auto outs = g_.addMultiOp(src.kind, src.name + "/recompute", inputs, src.attrs, layer);
      if (!outs) return outs.error();
      for (size_t k = 0; k < src.outputs.size(); ++k) recomputed_[src.outputs[k]] = (*outs)[k];
    }
    return {};
  }

  // --- gradient rules ---
  Status backward(const Op& fwd) {
    where_ = fwd.name + "/grad";
    auto in = [&](size_t i) { return value(fwd.inputs[i]); };
    auto needs = [&](size_t i) { return i < fwd.inputs.size() && needsGrad_[fwd.inputs[i]]; };
    const TensorId y = value(fwd.outputs[0]);
    auto found = grads_.find(fwd.outputs[0]);
    if (fwd.outputs.size() > 1 && fwd.kind != OpKind::kSplit)
      return modelError(fwd.name, fmt::format("autodiff: no gradient rule for {}", opKindName(fwd.kind)));
    const TensorId dy = found == grads_.end() ? -1 : found->second;
    auto give = [&](size_t i, TensorId grad) {
      if (needs(i)) addGrad(fwd.inputs[i], reduceTo(grad, shape(fwd.inputs[i])));
    };
    switch (fwd.kind) {
      case OpKind::kMatMul: {
        if (shape(in(0)).size() < 2 || shape(in(1)).size() < 2)
          return modelError(fwd.name, "autodiff: MatMul with a 1-D operand has no gradient rule");
        if (needs(0)) give(0, op(OpKind::kMatMul, {dy, transposeLast(in(1))}));
        if (needs(1)) give(1, op(OpKind::kMatMul, {transposeLast(in(0)), dy}));
        return {};
      }
      case OpKind::kGemm: {
        const bool ta = fwd.intAttr("transA", 0) != 0, tb = fwd.intAttr("transB", 0) != 0;
        const double alpha = fwd.floatAttr("alpha", 1.0), beta = fwd.floatAttr("beta", 1.0);
        const TensorId g = alpha == 1.0 ? dy : mulScalar(dy, alpha);
        const TensorId a = ta ? transposeLast(in(0)) : in(0), b = tb ? transposeLast(in(1)) : in(1);
        if (needs(0)) {
          const TensorId da = op(OpKind::kMatMul, {g, transposeLast(b)});
          give(0, ta ? transposeLast(da) : da);
        }
        if (needs(1)) {
          const TensorId db = op(OpKind::kMatMul, {transposeLast(a), g});
          give(1, tb ? transposeLast(db) : db);
        }
        if (needs(2)) give(2, beta == 1.0 ? dy : mulScalar(dy, beta));
        return {};
      }
      case OpKind::kConv: {
        Attrs attrs = fwd.attrs;
        if (needs(0)) {
          attrs["input_shape"] = shape(in(0));
          give(0, op(OpKind::kConvInputGrad, {dy, in(1)}, attrs));
        }
        if (needs(1)) {
          attrs["weight_shape"] = shape(in(1));
          give(1, op(OpKind::kConvWeightGrad, {in(0), dy}, attrs));
        }
        if (needs(2)) {
          Shape axes = {0};
          for (size_t a = 2; a < shape(dy).size(); ++a) axes.push_back(static_cast<std::int64_t>(a));
          give(2, op(OpKind::kReduceSum, {dy}, {{"axes", axes}, {"keepdims", std::int64_t{0}}}));
        }
        return {};
      }
      case OpKind::kMaxPool:
        give(0, op(OpKind::kMaxPoolGrad, {in(0), dy}, fwd.attrs));
        return {};
      case OpKind::kAveragePool: {
        Attrs attrs = fwd.attrs;
        attrs["input_shape"] = shape(in(0));
        give(0, op(OpKind::kAveragePoolGrad, {dy}, attrs));
        return {};
      }
      case OpKind::kGlobalAveragePool: {
        const Shape xs = shape(in(0));
        std::int64_t plane = 1;
        for (size_t a = 2; a < xs.size(); ++a) plane *= xs[a];
        give(0, mulScalar(op(OpKind::kExpand, {dy}, {{"shape", xs}}), 1.0 / static_cast<double>(plane)));
        return {};
      }
      case OpKind::kBatchNormalization: {
        // Inference form: the running mean and variance are constants, so y is affine in x per channel.
        const TensorId x = in(0);
        const Shape xs = shape(x);
        Shape channel(xs.size() - 1, 1);
        channel[0] = xs[1];
        auto perChannel = [&](TensorId t) { return reshape(t, channel); };
        const TensorId rstd = div(scalar(1.0, dtype(in(4))),
                                  op(OpKind::kSqrt, {add(in(4), scalar(fwd.floatAttr("epsilon", 1e-5), dtype(in(4))))}));
        Shape sumAxes = {0};
        for (size_t a = 2; a < xs.size(); ++a) sumAxes.push_back(static_cast<std::int64_t>(a));
        const Attrs sum = {{"axes", sumAxes}, {"keepdims", std::int64_t{0}}};
        if (needs(0)) give(0, mul(dy, perChannel(mul(in(1), rstd))));
        if (needs(1)) {
          const TensorId xhat = mul(sub(x, perChannel(in(3))), perChannel(rstd));
          give(1, op(OpKind::kReduceSum, {mul(dy, xhat)}, sum));
        }
        if (needs(2)) give(2, op(OpKind::kReduceSum, {dy}, sum));
        if (needs(3) || needs(4))
          return modelError(fwd.name, "autodiff: BatchNormalization's mean and variance must be constants");
        return {};
      }
      case OpKind::kAdd:
        give(0, dy);
        give(1, dy);
        return {};
      case OpKind::kSub:
        give(0, dy);
        if (needs(1)) give(1, mulScalar(dy, -1.0));
        return {};
      case OpKind::kMul:
        if (needs(0)) give(0, mul(dy, in(1)));
        if (needs(1)) give(1, mul(dy, in(0)));
        return {};
      case OpKind::kDiv:
        if (needs(0)) give(0, div(dy, in(1)));
        if (needs(1)) give(1, mulScalar(div(mul(dy, y), in(1)), -1.0));
        return {};
      case OpKind::kPow: {
        if (needs(1)) return modelError(fwd.name, "autodiff: Pow has a gradient rule for its base only");
        const TensorId exponent = in(1);
        const TensorId lower = op(OpKind::kPow, {in(0), sub(exponent, scalar(1.0, dtype(exponent)))});
        give(0, mul(dy, mul(lower, exponent)));
        return {};
      }
      case OpKind::kWhere: {
        const TensorId zero = scalar(0.0, dtype(dy));
        if (needs(1)) give(1, op(OpKind::kWhere, {in(0), dy, zero}));
        if (needs(2)) give(2, op(OpKind::kWhere, {in(0), zero, dy}));
        return {};
      }
      case OpKind::kRelu: {
        const TensorId zero = scalar(0.0, dtype(dy));
        give(0, op(OpKind::kWhere, {op(OpKind::kEqual, {y, zero}), zero, dy}));
        return {};
      }
      case OpKind::kGelu: {
        const TensorId x = in(0);
        TensorId slope;
        if (fwd.stringAttr("approximate", "none") == "tanh") {
          // d/dx 0.5 x (1 + tanh(u)), u = c (x + 0.044715 x^3).
          const double c = std::sqrt(2.0 / M_PI);
          const TensorId x2 = mul(x, x);
          const TensorId u = mulScalar(mul(x, add(mulScalar(x2, 0.044715), scalar(1.0, dtype(x)))), c);
          const TensorId t = op(OpKind::kTanh, {u});
          const TensorId sech2 = sub(scalar(1.0, dtype(x)), mul(t, t));
          const TensorId du = mulScalar(add(mulScalar(x2, 3 * 0.044715), scalar(1.0, dtype(x))), c);
          slope = add(mulScalar(add(t, scalar(1.0, dtype(x))), 0.5), mulScalar(mul(mul(x, sech2), du), 0.5));
        } else {
          // Phi(x) + x phi(x).
          const TensorId cdf = mulScalar(add(op(OpKind::kErf, {mulScalar(x, 1 / std::sqrt(2.0))}), scalar(1.0, dtype(x))), 0.5);
          const TensorId pdf = mulScalar(op(OpKind::kExp, {mulScalar(mul(x, x), -0.5)}), 1 / std::sqrt(2 * M_PI));
          slope = add(cdf, mul(x, pdf));
        }
        give(0, mul(dy, slope));
        return {};
      }
      case OpKind::kTanh:
        give(0, mul(dy, sub(scalar(1.0, dtype(y)), mul(y, y))));
        return {};
      case OpKind::kSigmoid:
        give(0, mul(dy, mul(y, sub(scalar(1.0, dtype(y)), y))));
        return {};
      case OpKind::kExp:
        give(0, mul(dy, y));
        return {};
      case OpKind::kSqrt:
        give(0, div(dy, mulScalar(y, 2.0)));
        return {};
      case OpKind::kErf:
        give(0, mul(dy, mulScalar(op(OpKind::kExp, {mulScalar(mul(in(0), in(0)), -1.0)}), 2 / std::sqrt(M_PI))));
        return {};
      case OpKind::kNeg:
        give(0, mulScalar(dy, -1.0));
        return {};
      // dy where the condition on the input holds, else dy times `otherwise` (0 for none).
      case OpKind::kAbs: case OpKind::kLeakyRelu: case OpKind::kElu: {
        const TensorId x = in(0), zero = scalar(0.0, dtype(x));
        const TensorId negative = op(OpKind::kLess, {x, zero});
        TensorId other;
        if (fwd.kind == OpKind::kAbs) other = mulScalar(dy, -1.0);
        else if (fwd.kind == OpKind::kLeakyRelu) other = mulScalar(dy, fwd.floatAttr("alpha", 0.01));
        else other = mul(dy, add(y, scalar(fwd.floatAttr("alpha", 1.0), dtype(y))));  // alpha e^x = y + alpha
        give(0, op(OpKind::kWhere, {fwd.kind == OpKind::kElu ? op(OpKind::kLessOrEqual, {x, zero}) : negative, other, dy}));
        return {};
      }
      case OpKind::kSin:
        give(0, mul(dy, op(OpKind::kCos, {in(0)})));
        return {};
      case OpKind::kCos:
        give(0, mulScalar(mul(dy, op(OpKind::kSin, {in(0)})), -1.0));
        return {};
      case OpKind::kSoftplus:
        give(0, mul(dy, op(OpKind::kSigmoid, {in(0)})));
        return {};
      case OpKind::kHardSigmoid: case OpKind::kHardSwish: {
        // HardSigmoid: alpha inside 0 < alpha x + beta < 1; HardSwish x h(x), h = HardSigmoid(1/6, 1/2):
        // h(x) + x / 6 inside, 0 below, 1 above.
        const bool swish = fwd.kind == OpKind::kHardSwish;
        const double alpha = swish ? 1.0 / 6 : fwd.floatAttr("alpha", 0.2), beta = swish ? 0.5 : fwd.floatAttr("beta", 0.5);
        const TensorId x = in(0), zero = scalar(0.0, dtype(x)), one = scalar(1.0, dtype(x));
        const TensorId t = add(mulScalar(x, alpha), scalar(beta, dtype(x)));
        const TensorId inside = op(OpKind::kAnd, {op(OpKind::kGreater, {t, zero}), op(OpKind::kLess, {t, one})});
        const TensorId slope = swish ? add(t, mulScalar(x, alpha)) : scalar(alpha, dtype(x));
        const TensorId outside = swish ? op(OpKind::kWhere, {op(OpKind::kLessOrEqual, {t, zero}), zero, one}) : zero;
        give(0, mul(dy, op(OpKind::kWhere, {inside, slope, outside})));
        return {};
      }
      case OpKind::kMin: case OpKind::kMax: {
        // The gradient goes to the operand chosen (the first on a tie).
        const TensorId first = op(fwd.kind == OpKind::kMax ? OpKind::kGreaterOrEqual : OpKind::kLessOrEqual, {in(0), in(1)});
        const TensorId zero = scalar(0.0, dtype(dy));
        if (needs(0)) give(0, op(OpKind::kWhere, {first, dy, zero}));
        if (needs(1)) give(1, op(OpKind::kWhere, {first, zero, dy}));
        return {};
      }
      case OpKind::kReciprocal:  // d(1/x) = -dy / x^2 = -dy y^2
        give(0, mulScalar(mul(dy, mul(y, y)), -1.0));
        return {};
      case OpKind::kLog:
        give(0, div(dy, in(0)));
        return {};
      case OpKind::kIdentity: case OpKind::kCast:
        give(0, dy);
        return {};
      case OpKind::kSoftmax: {
        const std::int64_t axis = fwd.intAttr("axis", -1);
        const TensorId dot = op(OpKind::kReduceSum, {mul(dy, y)}, {{"axes", Shape{axis}}, {"keepdims", std::int64_t{1}}});
        give(0, mul(y, sub(dy, dot)));
        return {};
      }
      case OpKind::kLayerNormalization: {
        const TensorId x = in(0);
        const Attrs keep = {{"axes", trailingAxes(fwd.intAttr("axis", -1), shape(x).size())},
                            {"keepdims", std::int64_t{1}}};
        const TensorId centred = sub(x, op(OpKind::kReduceMean, {x}, keep));
        const TensorId var = op(OpKind::kReduceMean, {mul(centred, centred)}, keep);
        const TensorId rstd = div(scalar(1.0, dtype(x)),
                                  op(OpKind::kSqrt, {add(var, scalar(fwd.floatAttr("epsilon", 1e-5), dtype(x)))}));
        const TensorId xhat = mul(centred, rstd);
        if (needs(1)) give(1, mul(dy, xhat));
        if (needs(2)) give(2, dy);
        if (needs(0)) {
          const TensorId gy = mul(dy, in(1));
          const TensorId meanG = op(OpKind::kReduceMean, {gy}, keep);
          const TensorId meanGx = op(OpKind::kReduceMean, {mul(gy, xhat)}, keep);
          give(0, mul(rstd, sub(sub(gy, meanG), mul(xhat, meanGx))));
        }
        return {};
      }
      case OpKind::kReduceSum: case OpKind::kReduceMean: {
        const Shape& xs = shape(in(0));
        std::vector<bool> reduced(xs.size(), fwd.intsAttr("axes").empty() && fwd.intAttr("noop_with_empty_axes", 0) == 0);
        for (auto a : fwd.intsAttr("axes")) reduced[a < 0 ? a + static_cast<std::int64_t>(xs.size()) : a] = true;
        Shape kept(xs.size());
        std::int64_t count = 1;
        for (size_t i = 0; i < xs.size(); ++i) {
          kept[i] = reduced[i] ? 1 : xs[i];
          if (reduced[i]) count *= xs[i];
        }
        TensorId g = op(OpKind::kExpand, {reshape(dy, kept)}, {{"shape", xs}});
        if (fwd.kind == OpKind::kReduceMean) g = mulScalar(g, 1.0 / static_cast<double>(count));
        give(0, g);
        return {};
      }
      case OpKind::kReshape: case OpKind::kFlatten: case OpKind::kSqueeze: case OpKind::kUnsqueeze:
        give(0, reshape(dy, shape(in(0))));
        return {};
      case OpKind::kExpand:
        give(0, dy);
        return {};
      case OpKind::kTranspose: {
        Shape perm = fwd.intsAttr("perm");
        if (perm.empty()) {
          perm.resize(shape(dy).size());
          std::iota(perm.rbegin(), perm.rend(), 0);
        }
        Shape inverse(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<std::int64_t>(i);
        give(0, op(OpKind::kTranspose, {dy}, {{"perm", inverse}}));
        return {};
      }
      case OpKind::kSplit: {
        std::vector<TensorId> parts;
        for (TensorId out : fwd.outputs) {
          auto g = grads_.find(out);
          parts.push_back(g == grads_.end() ? zeros(shape(out), dtype(out)) : g->second);
        }
        give(0, op(OpKind::kConcat, parts, {{"axis", fwd.intAttr("axis", 0)}}));
        return {};
      }
      case OpKind::kConcat: {
        const std::int64_t rank = static_cast<std::int64_t>(shape(dy).size());
        std::int64_t axis = fwd.intAttr("axis", 0);
        if (axis < 0) axis += rank;
        std::int64_t offset = 0;
        for (size_t i = 0; i < fwd.inputs.size(); ++i) {
          const std::int64_t n = shape(fwd.inputs[i])[axis];
          if (needs(i))
            give(i, op(OpKind::kSlice, {dy}, {{"starts", Shape{offset}}, {"ends", Shape{offset + n}}, {"axes", Shape{axis}}}));
          offset += n;
        }
        return {};
      }
      case OpKind::kSlice: {
        // Pads the gradient back with zeros on every sliced axis (unit steps only).
        const Shape& xs = shape(in(0));
        const auto starts = fwd.intsAttr("starts"), axes = fwd.intsAttr("axes"), steps = fwd.intsAttr("steps");
        TensorId g = dy;
        for (size_t i = 0; i < starts.size(); ++i) {
          if (!steps.empty() && steps[i] != 1) return modelError(fwd.name, "autodiff: Slice with steps has no gradient rule");
          std::int64_t axis = axes.empty() ? static_cast<std::int64_t>(i) : axes[i];
          if (axis < 0) axis += static_cast<std::int64_t>(xs.size());
          const std::int64_t begin = sliceStart(starts[i], xs[axis], 1), size = shape(g)[axis];
          std::vector<TensorId> pieces;
          Shape piece = shape(g);
          if (begin > 0) {
            piece[axis] = begin;
            pieces.push_back(zeros(piece, dtype(g)));
          }
          pieces.push_back(g);
          if (begin + size < xs[axis]) {
            piece[axis] = xs[axis] - begin - size;
            pieces.push_back(zeros(piece, dtype(g)));
          }
          if (pieces.size() > 1) g = op(OpKind::kConcat, pieces, {{"axis", axis}});
        }
        give(0, g);
        return {};
      }
      case OpKind::kAllReduce:  // y = the sum of every device's x: each device's dx is dy
        give(0, dy);
        return {};
      case OpKind::kAllGather: {
        // y = every device's x joined on `axis`: dx is the device's block of dy. The device graph
        // does not know its position, so every device takes block 0 (the same shape and cost).
        const std::int64_t axis = fwd.intAttr("axis", 0);
        give(0, op(OpKind::kSlice, {dy}, {{"starts", Shape{0}}, {"ends", Shape{shape(in(0))[axis]}},
                                         {"axes", Shape{axis}}}));
        return {};
      }
      case OpKind::kReduceScatter:  // y = the device's block of the sum: dx gathers every device's dy
        give(0, op(OpKind::kAllGather, {dy}, fwd.attrs));
        return {};
      case OpKind::kAllToAll: {
        Attrs attrs = fwd.attrs;
        std::swap(attrs["split_axis"], attrs["concat_axis"]);
        give(0, op(OpKind::kAllToAll, {dy}, attrs));
        return {};
      }
      case OpKind::kGather:
        if (needs(0))
          give(0, op(OpKind::kGatherGrad, {dy, in(1)}, {{"axis", fwd.intAttr("axis", 0)}, {"data_shape", shape(in(0))}}));
        return {};
      case OpKind::kSoftmaxCrossEntropyLoss:
        give(0, op(OpKind::kSoftmaxCrossEntropyLossGrad, {dy, in(0), in(1)}, {{"axis", fwd.intAttr("axis", -1)}}));
        return {};
      default: {
        const char* why = opDefinition(fwd.kind).noGradient;
        return modelError(fwd.name, fmt::format("autodiff: no gradient rule for {}{}", opKindName(fwd.kind),
                                                why ? fmt::format(" ({})", why) : std::string()));
      }
    }
  }

  // --- optimizer ---
  Status optimize(TrainingTensors& result) {
    std::vector<TensorId> moments;
    for (size_t i = 0; i < result.weights.size(); ++i) {
      const TensorId w = result.weights[i], grad = result.gradients[i];
      result.updatedWeights.push_back(-1);
      if (grad < 0) continue;
      if (options_.optimizer == Optimizer::kNone) {
        g_.markOutput(grad);
        continue;
      }
      const Tensor t = g_.tensor(w);  // a copy: adding tensors moves the tensor list
      where_ = t.name + "/" + optimizerName(options_.optimizer);
      layer_ = t.users.empty() ? 0 : g_.op(t.users.front()).layer;
      TensorId updated;
      if (options_.optimizer == Optimizer::kSgd) {
        updated = sub(w, mulScalar(grad, options_.learningRate));
      } else {
        const TensorId m = g_.addState(t.name + ".adam_m", t.shape, DType::kF32);
        const TensorId v = g_.addState(t.name + ".adam_v", t.shape, DType::kF32);
        const TensorId m2 = add(mulScalar(m, options_.beta1), mulScalar(grad, 1 - options_.beta1));
        const TensorId v2 = add(mulScalar(v, options_.beta2), mulScalar(mul(grad, grad), 1 - options_.beta2));
        const double step = static_cast<double>(std::max(1, options_.step));
        const double rate = options_.learningRate * std::sqrt(1 - std::pow(options_.beta2, step)) /
                            (1 - std::pow(options_.beta1, step));
        const TensorId denom = add(op(OpKind::kSqrt, {v2}), scalar(options_.epsilon, DType::kF32));
        updated = sub(w, mulScalar(div(m2, denom), rate));
        moments.push_back(m2);
        moments.push_back(v2);
        g_.markOverwrites(m2, m);
        g_.markOverwrites(v2, v);
      }
      g_.markOutput(updated);
      g_.markOverwrites(updated, w);
      result.updatedWeights.back() = updated;
    }
    for (TensorId m : moments) g_.markOutput(m);
    return {};
  }

  Graph& g_;
  const TrainingOptions& options_;
  std::vector<bool> needsGrad_;
  std::map<TensorId, TensorId> grads_;
  std::map<TensorId, TensorId> recomputed_;
  std::string where_ = "loss";
  int layer_ = 0;
  int counter_ = 0;
  std::string error_, errorWhere_;
};

}  // namespace

Expected<TrainingGraph> differentiate(const Graph& forward, const TrainingOptions& options, const std::string& loss) {
  TrainingGraph result;
  auto map = copyGraph(forward, result.graph);
  if (!map) return map.error();
  TensorId lossId = -1;
  if (!loss.empty()) {
    auto found = forward.findTensor(loss);
    if (!found) return makeError(ExitCode::kModel, fmt::format("the loss tensor '{}' does not exist", loss));
    lossId = (*map)[*found];
  } else if (!forward.outputs().empty()) {
    lossId = (*map)[forward.outputs().front()];
  }
  if (lossId < 0) return makeError(ExitCode::kModel, "differentiate needs a loss: the graph has no output");
  // A tensor that is not a scalar gets its gradient from outside: a new input NAME.grad (what a
  // pipeline stage receives from the next one, or a loss computed elsewhere).
  TensorId seed = -1;
  if (!result.graph.tensor(lossId).shape.empty()) {
    const Tensor& t = result.graph.tensor(lossId);
    seed = result.graph.addInput(t.name + ".grad", t.shape, t.dtype);
  }
  const TrainingOptions copied = remapped(options, *map);
  BackwardBuilder builder(result.graph, copied);
  auto tensors = builder.run(lossId, seed);
  if (!tensors) return tensors.error();
  result.tensors = std::move(*tensors);
  return result;
}

Expected<TrainingGraph> buildTrainingGraph(const Graph& forward, const TrainingOptions& options) {
  TensorId scoresId = -1;
  if (!options.scores.empty()) {
    auto found = forward.findTensor(options.scores);
    if (!found) return makeError(ExitCode::kModel, fmt::format("training: the scores tensor '{}' does not exist", options.scores));
    scoresId = *found;
  } else if (!forward.outputs().empty()) {
    scoresId = forward.outputs().back();
  }
  if (scoresId < 0 || forward.tensor(scoresId).shape.empty())
    return makeError(ExitCode::kModel, "training: the model has no output to compute a loss on");
  Graph withLoss;
  auto map = copyGraph(forward, withLoss);
  if (!map) return map.error();
  const Tensor& scores = forward.tensor(scoresId);
  const Shape labelShape(scores.shape.begin(), scores.shape.end() - 1);
  const TensorId labels = withLoss.addInput("labels", labelShape, DType::kI32);
  const int layer = scores.producer >= 0 ? forward.op(scores.producer).layer : 0;
  auto lossId = withLoss.addOp(OpKind::kSoftmaxCrossEntropyLoss, "loss", {(*map)[scoresId], labels},
                               {{"axis", std::int64_t{-1}}}, layer);
  if (!lossId) return lossId.error();
  withLoss.markOutput(*lossId);
  return differentiate(withLoss, remapped(options, *map), withLoss.tensor(*lossId).name);
}

}  // namespace tsp::ir
