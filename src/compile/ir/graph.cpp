// The graph IR: construction, names of kinds and dtypes, attributes and whole-graph figures.
#include "compile/ir/graph.h"

#include "compile/ir/op_table.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace tsp::ir {

Expected<DType> parseDType(const std::string& text) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kI32, DType::kI64, DType::kBool})
    if (text == dtypeName(t)) return t;
  return makeError(ExitCode::kModel, fmt::format("unknown dtype '{}'", text));
}

namespace {

constexpr std::array<const char*, static_cast<size_t>(OpKind::kCount)> kOpNames = {
    "Input", "Weight",
    "MatMul", "Gemm", "Conv",
    "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Where",
    "Relu", "Gelu", "Tanh", "Sigmoid", "Exp", "Sqrt", "Erf",
    "Softmax", "LayerNormalization", "BatchNormalization", "ReduceMean", "ReduceSum", "ReduceMax",
    "Reshape", "Transpose", "Flatten", "Concat", "Split", "Slice", "Gather", "Unsqueeze", "Squeeze", "Cast", "Expand",
    "Identity",
    "MaxPool", "AveragePool", "GlobalAveragePool",
    "Shape", "ConstantOfShape", "Range",
    "AllReduce", "AllGather", "ReduceScatter", "Send", "Recv",
    "FusedMatMul", "FusedElementwise",
    "AllToAll",
    "SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad", "ConvInputGrad", "ConvWeightGrad", "GatherGrad",
    "MaxPoolGrad", "AveragePoolGrad",
    "Neg", "Abs", "Reciprocal", "Floor", "Ceil", "Log", "Sin", "Cos", "Not", "Softplus",
    "LeakyRelu", "Elu", "HardSigmoid", "HardSwish",
    "Min", "Max", "Mod", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
    "ScatterND"};

}  // namespace

const char* opKindName(OpKind kind) {
  const auto index = static_cast<size_t>(kind);
  return index < kOpNames.size() ? kOpNames[index] : "?";
}

std::optional<OpKind> parseOpKind(const std::string& text) {
  for (size_t i = 0; i < kOpNames.size(); ++i)
    if (text == kOpNames[i]) return static_cast<OpKind>(i);
  return std::nullopt;
}

bool hasSideEffects(OpKind kind) {
  return kind == OpKind::kSend || kind == OpKind::kRecv || kind == OpKind::kAllReduce ||
         kind == OpKind::kAllGather || kind == OpKind::kReduceScatter || kind == OpKind::kAllToAll;
}

bool isMacOp(OpKind kind) {
  return kind == OpKind::kMatMul || kind == OpKind::kGemm || kind == OpKind::kConv || kind == OpKind::kFusedMatMul ||
         kind == OpKind::kConvInputGrad || kind == OpKind::kConvWeightGrad;
}

WindowAttrs windowAttrs(const Op& op, size_t spatial, const std::vector<std::int64_t>& weightShape) {
  WindowAttrs w;
  std::vector<std::int64_t> fromWeight;
  if (weightShape.size() >= 2) fromWeight.assign(weightShape.begin() + 2, weightShape.end());
  w.kernel = op.intsAttr("kernel_shape", fromWeight);
  w.strides = op.intsAttr("strides", std::vector<std::int64_t>(spatial, 1));
  w.dilations = op.intsAttr("dilations", std::vector<std::int64_t>(spatial, 1));
  w.pads = op.intsAttr("pads", std::vector<std::int64_t>(2 * spatial, 0));
  return w;
}

std::int64_t Op::intAttr(const std::string& key, std::int64_t fallback) const {
  auto found = attrs.find(key);
  if (found == attrs.end()) return fallback;
  if (auto* i = std::get_if<std::int64_t>(&found->second)) return *i;
  if (auto* f = std::get_if<double>(&found->second)) {
    // Saturated: the cast of a NaN or of a double past int64's range is undefined.
    if (std::isnan(*f)) return fallback;
    if (*f >= 0x1p63) return std::numeric_limits<std::int64_t>::max();
    if (*f <= -0x1p63) return std::numeric_limits<std::int64_t>::min();
    return static_cast<std::int64_t>(*f);
  }
  return fallback;
}

double Op::floatAttr(const std::string& key, double fallback) const {
  auto found = attrs.find(key);
  if (found == attrs.end()) return fallback;
  if (auto* f = std::get_if<double>(&found->second)) return *f;
  if (auto* i = std::get_if<std::int64_t>(&found->second)) return static_cast<double>(*i);
  return fallback;
}

std::vector<std::int64_t> Op::intsAttr(const std::string& key, std::vector<std::int64_t> fallback) const {
  auto found = attrs.find(key);
  if (found == attrs.end()) return fallback;
  if (auto* v = std::get_if<std::vector<std::int64_t>>(&found->second)) return *v;
  if (auto* i = std::get_if<std::int64_t>(&found->second)) return {*i};
  return fallback;
}

std::string Op::stringAttr(const std::string& key, const std::string& fallback) const {
  auto found = attrs.find(key);
  if (found == attrs.end()) return fallback;
  if (auto* s = std::get_if<std::string>(&found->second)) return *s;
  return fallback;
}

std::optional<std::int64_t> boundedElements(const std::vector<std::int64_t>& shape, int width) {
  std::int64_t n = 1;
  for (auto d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxTensorBytes / width) return std::nullopt;
  return n;
}

std::int64_t Tensor::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

TensorId Graph::addTensor(const std::string& name, std::vector<std::int64_t> shape, DType dtype, OpId producer,
                          TensorRole role) {
  Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.producer = producer;
  t.role = role;
  tensors_.push_back(std::move(t));
  const auto id = static_cast<TensorId>(tensors_.size() - 1);
  byName_.emplace(name, id);
  return id;
}

TensorId Graph::addInput(const std::string& name, std::vector<std::int64_t> shape, DType dtype) {
  const TensorId id = addTensor(name, std::move(shape), dtype, -1, TensorRole::kInput);
  inputs_.push_back(id);
  return id;
}

TensorId Graph::addWeight(const std::string& name, std::vector<std::int64_t> shape, DType dtype, Data data) {
  const TensorId id = addTensor(name, std::move(shape), dtype, -1, TensorRole::kWeight);
  tensors_[id].data = std::move(data);
  weights_.push_back(id);
  return id;
}

TensorId Graph::addConstant(const std::string& name, std::vector<std::int64_t> shape, DType dtype, Data data) {
  const TensorId id = addTensor(name, std::move(shape), dtype, -1, TensorRole::kConstant);
  assert(data && static_cast<std::int64_t>(data->size()) == tensors_[id].elements() && "one value per element");
  tensors_[id].data = std::move(data);
  constants_.push_back(id);
  return id;
}

TensorId Graph::addState(const std::string& name, std::vector<std::int64_t> shape, DType dtype) {
  const TensorId id = addTensor(name, std::move(shape), dtype, -1, TensorRole::kState);
  states_.push_back(id);
  return id;
}

Expected<TensorId> Graph::addOp(OpKind kind, const std::string& name, std::vector<TensorId> inputs, int layer) {
  return addOp(kind, name, std::move(inputs), Attrs{}, layer);
}

Expected<TensorId> Graph::addOp(OpKind kind, const std::string& name, std::vector<TensorId> inputs, Attrs attrs,
                                int layer) {
  auto outs = addMultiOp(kind, name, std::move(inputs), std::move(attrs), layer);
  if (!outs) return outs.error();
  if (outs->empty()) return modelError(name, fmt::format("{} has no output", opKindName(kind)));
  return outs->front();
}

Expected<std::vector<TensorId>> Graph::addMultiOp(OpKind kind, const std::string& name, std::vector<TensorId> inputs,
                                                  Attrs attrs, int layer, std::vector<std::string> outputNames) {
  for (TensorId in : inputs)
    if (in < 0 || in >= static_cast<TensorId>(tensors_.size()))
      return modelError(name, "input tensor does not exist");
  if (kind == OpKind::kInput || kind == OpKind::kWeight || kind == OpKind::kCount)
    return modelError(name, "not an op kind that computes");
  auto types = inferTypes(*this, kind, name, inputs, attrs);
  if (!types) return types.error();
  const OpId opId = static_cast<OpId>(ops_.size());
  std::vector<TensorId> outs;
  for (size_t i = 0; i < types->size(); ++i) {
    std::string outName = i < outputNames.size() && !outputNames[i].empty()
                              ? outputNames[i]
                              : (i == 0 ? name + ".out" : fmt::format("{}.out{}", name, i));
    outs.push_back(addTensor(outName, std::move((*types)[i].shape), (*types)[i].dtype, opId, TensorRole::kActivation));
  }
  for (TensorId in : inputs) {
    auto& users = tensors_[in].users;
    if (users.empty() || users.back() != opId) users.push_back(opId);
  }
  ops_.push_back(Op{kind, name, std::move(inputs), outs, std::move(attrs), layer});
  return outs;
}

std::optional<TensorId> Graph::findTensor(const std::string& name) const {
  auto found = byName_.find(name);
  if (found == byName_.end()) return std::nullopt;
  return found->second;
}

int Graph::layerCount() const {
  int layers = 0;
  for (const auto& op : ops_) layers = std::max(layers, op.layer + 1);
  return layers;
}

std::int64_t Graph::parameters() const {
  std::int64_t n = 0;
  for (TensorId w : weights_) n += tensors_[w].elements();
  return n;
}

std::int64_t Graph::flops() const {
  std::int64_t total = 0;
  for (const auto& op : ops_) total += opFlops(*this, op);
  return total;
}

std::int64_t Graph::macFlops() const {
  std::int64_t total = 0;
  for (const auto& op : ops_)
    if (isMacOp(op.kind)) total += opFlops(*this, op);
  return total;
}

std::int64_t Graph::weightBytes() const {
  std::int64_t n = 0;
  for (TensorId w : weights_) n += tensors_[w].bytes();
  for (TensorId c : constants_) n += tensors_[c].bytes();
  return n;
}

std::int64_t Graph::stateBytes() const {
  std::int64_t n = 0;
  for (TensorId s : states_) n += tensors_[s].bytes();
  return n;
}

std::int64_t opFlops(const Graph& graph, const Op& op) {
  auto elements = [&](TensorId t) { return graph.tensor(t).elements(); };
  const std::int64_t out = op.outputs.empty() ? 0 : elements(op.outputs[0]);
  if (const int perElement = opDefinition(op.kind).flopsPerElement; perElement >= 0) return out * perElement;
  switch (op.kind) {
    case OpKind::kMatMul: {
      const auto& a = graph.tensor(op.inputs[0]).shape;
      return 2 * out * (a.empty() ? 1 : a.back());
    }
    case OpKind::kFusedMatMul: {
      const auto& a = graph.tensor(op.inputs[0]).shape;
      const std::int64_t epilogue = (op.inputs.size() > 2 ? out : 0) + (op.hasAttr("activation") ? out : 0);
      return 2 * out * (a.empty() ? 1 : a.back()) + epilogue;
    }
    case OpKind::kGemm: {
      const auto& a = graph.tensor(op.inputs[0]).shape;
      const std::int64_t k = op.intAttr("transA", 0) ? a[0] : a[1];
      return 2 * out * k + (op.inputs.size() > 2 ? out : 0);
    }
    case OpKind::kConv: {
      const auto& w = graph.tensor(op.inputs[1]).shape;
      std::int64_t perOutput = 1;
      for (size_t i = 1; i < w.size(); ++i) perOutput *= w[i];
      return 2 * out * perOutput + (op.inputs.size() > 2 ? out : 0);
    }
    case OpKind::kConvInputGrad: case OpKind::kConvWeightGrad: {
      // The MACs of the forward convolution: dY's elements times one filter's (input channels x kernel).
      const auto& w = op.kind == OpKind::kConvInputGrad ? graph.tensor(op.inputs[1]).shape
                                                        : graph.tensor(op.outputs[0]).shape;
      std::int64_t perOutput = 1;
      for (size_t i = 1; i < w.size(); ++i) perOutput *= w[i];
      const std::int64_t dy = elements(op.kind == OpKind::kConvInputGrad ? op.inputs[0] : op.inputs[1]);
      return 2 * dy * perOutput;
    }
    case OpKind::kSoftmaxCrossEntropyLoss: case OpKind::kSoftmaxCrossEntropyLossGrad:
      return 5 * elements(op.inputs[op.kind == OpKind::kSoftmaxCrossEntropyLoss ? 0 : 1]);
    case OpKind::kWhere:
      return out;
    case OpKind::kFusedElementwise:
      return out * static_cast<std::int64_t>(op.intsAttr("steps").size() / 3);
    case OpKind::kSoftmax: case OpKind::kLayerNormalization:
      return 5 * out;
    case OpKind::kBatchNormalization:
      return 2 * out;
    case OpKind::kReduceMean: case OpKind::kReduceSum: case OpKind::kReduceMax: case OpKind::kAllReduce:
    case OpKind::kReduceScatter: case OpKind::kGlobalAveragePool:
      return elements(op.inputs[0]);
    case OpKind::kMaxPool: case OpKind::kAveragePool: {
      std::int64_t window = 1;
      for (auto k : op.intsAttr("kernel_shape")) window *= k;
      return out * window;
    }
    case OpKind::kMaxPoolGrad: case OpKind::kAveragePoolGrad: {
      // One per window element of the forward pool, whose output is dY.
      std::int64_t window = 1;
      for (auto k : op.intsAttr("kernel_shape")) window *= k;
      return elements(op.inputs[op.kind == OpKind::kMaxPoolGrad ? 1 : 0]) * window;
    }
    default:
      return 0;
  }
}

std::optional<std::vector<std::int64_t>> broadcastShapes(const std::vector<std::int64_t>& a,
                                                         const std::vector<std::int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<std::int64_t> shape(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    shape[i] = da == 1 ? db : da;
  }
  return shape;
}

}  // namespace tsp::ir
