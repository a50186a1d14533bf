// The op-definition table: one row per op kind; the elementwise kinds' reference functions live here.
#include "compile/ir/op_table.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace tsp::ir {

namespace {

std::int64_t toInt(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2e18) return std::numeric_limits<std::int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(v);
}

// --- unary reference functions ---
double relu(double x, const Op&) { return x > 0 ? x : 0; }
double tanhOf(double x, const Op&) { return std::tanh(x); }
double sigmoid(double x, const Op&) { return 1 / (1 + std::exp(-x)); }
double expOf(double x, const Op&) { return std::exp(x); }
double sqrtOf(double x, const Op&) { return std::sqrt(x); }
double erfOf(double x, const Op&) { return std::erf(x); }
double identity(double x, const Op&) { return x; }
double gelu(double x, const Op& op) {
  if (op.stringAttr("approximate", "none") == "tanh")
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
double neg(double x, const Op&) { return -x; }
double absOf(double x, const Op&) { return std::fabs(x); }
double reciprocal(double x, const Op&) { return 1 / x; }
double floorOf(double x, const Op&) { return std::floor(x); }
double ceilOf(double x, const Op&) { return std::ceil(x); }
double logOf(double x, const Op&) { return std::log(x); }
double sinOf(double x, const Op&) { return std::sin(x); }
double cosOf(double x, const Op&) { return std::cos(x); }
double notOf(double x, const Op&) { return x == 0 ? 1 : 0; }
double softplus(double x, const Op&) { return x > 30 ? x : std::log1p(std::exp(x)); }
double leakyRelu(double x, const Op& op) { return x >= 0 ? x : op.floatAttr("alpha", 0.01) * x; }
double elu(double x, const Op& op) { return x > 0 ? x : op.floatAttr("alpha", 1.0) * (std::exp(x) - 1); }
double hardSigmoid(double x, const Op& op) {
  return std::clamp(op.floatAttr("alpha", 0.2) * x + op.floatAttr("beta", 0.5), 0.0, 1.0);
}
double hardSwish(double x, const Op&) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }

// --- binary reference functions (integer: the output is an integer type, computed exactly and wrapped later) ---
double add(double a, double b, const Op&, bool integer) { return integer ? static_cast<double>(toInt(a) + toInt(b)) : a + b; }
double sub(double a, double b, const Op&, bool integer) { return integer ? static_cast<double>(toInt(a) - toInt(b)) : a - b; }
double mul(double a, double b, const Op&, bool integer) { return integer ? static_cast<double>(toInt(a) * toInt(b)) : a * b; }
double div(double a, double b, const Op&, bool integer) {
  if (integer) return toInt(b) == 0 ? 0.0 : static_cast<double>(toInt(a) / toInt(b));
  return a / b;
}
double pow(double a, double b, const Op&, bool integer) {
  if (!integer) return std::pow(a, b);
  std::int64_t r = 1, base = toInt(a), e = toInt(b);
  if (e < 0) return base == 1 ? 1.0 : 0.0;
  for (; e > 0; --e) r *= base;
  return static_cast<double>(r);
}
double equal(double a, double b, const Op&, bool) { return a == b ? 1 : 0; }
double minOf(double a, double b, const Op&, bool) { return a != a || a < b ? a : b; }
double maxOf(double a, double b, const Op&, bool) { return a != a || a > b ? a : b; }
// ONNX Mod: fmod = 1 is C's fmod (the dividend's sign); fmod = 0 the divisor's sign (Python's %).
// An integer divisor of 0 gives 0.
double mod(double a, double b, const Op& op, bool integer) {
  if (integer) {
    const std::int64_t x = toInt(a), y = toInt(b);
    if (y == 0) return 0.0;
    std::int64_t r = x % y;
    if (op.intAttr("fmod", 0) == 0 && r != 0 && ((r < 0) != (y < 0))) r += y;
    return static_cast<double>(r);
  }
  if (op.intAttr("fmod", 0) != 0) return std::fmod(a, b);
  const double r = std::fmod(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
double less(double a, double b, const Op&, bool) { return a < b ? 1 : 0; }
double greater(double a, double b, const Op&, bool) { return a > b ? 1 : 0; }
double lessOrEqual(double a, double b, const Op&, bool) { return a <= b ? 1 : 0; }
double greaterOrEqual(double a, double b, const Op&, bool) { return a >= b ? 1 : 0; }
double andOf(double a, double b, const Op&, bool) { return a != 0 && b != 0 ? 1 : 0; }
double orOf(double a, double b, const Op&, bool) { return a != 0 || b != 0 ? 1 : 0; }

using L = LoweringFamily;
using S = ShapeRule;
constexpr const char* kNoGradientYet = "no gradient rule is written for it yet";
constexpr const char* kNotDifferentiable = "its result is boolean or piecewise constant: no gradient flows through it";

OpDefinition own(OpKind kind, const char* name, const char* onnx, const char* notImported, bool gradient,
                 const char* noGradient, LoweringFamily lowering, const char* noLowering = nullptr) {
  return {kind, name, onnx, notImported, S::kOwn, nullptr, nullptr, -1, gradient, noGradient, lowering, noLowering};
}
OpDefinition unary(OpKind kind, const char* name, UnaryFunction f, int flops, bool gradient,
                   const char* noGradient = nullptr) {
  return {kind, name, name, nullptr, S::kUnary, f, nullptr, flops, gradient, noGradient, L::kElementwise, nullptr};
}
OpDefinition binary(OpKind kind, const char* name, BinaryFunction f, bool gradient, const char* noGradient = nullptr,
                    ShapeRule rule = S::kBinary) {
  return {kind, name, name, nullptr, rule, nullptr, f, 1, gradient, noGradient, L::kElementwise, nullptr};
}

constexpr const char* kPartitioner = "inserted by the partitioner (communication), not imported";
constexpr const char* kAutodiff = "made by ir::differentiate for training, not imported";

std::vector<OpDefinition> makeTable() {
  using K = OpKind;
  std::vector<OpDefinition> t = {
      {K::kInput, "Input", nullptr, "a leaf (graph input), not an op", S::kNotAnOp, nullptr, nullptr, 0, false,
       "a leaf, not an op", L::kNone, "a leaf, not an op"},
      {K::kWeight, "Weight", nullptr, "a leaf (initializer), not an op", S::kNotAnOp, nullptr, nullptr, 0, false,
       "a leaf, not an op", L::kNone, "a leaf, not an op"},
      own(K::kMatMul, "MatMul", "MatMul", nullptr, true, nullptr, L::kMatMul),
      own(K::kGemm, "Gemm", "Gemm", nullptr, true, nullptr, L::kMatMul),
      own(K::kConv, "Conv", "Conv", nullptr, true, nullptr, L::kConv),
      binary(K::kAdd, "Add", add, true),
      binary(K::kSub, "Sub", sub, true),
      binary(K::kMul, "Mul", mul, true),
      binary(K::kDiv, "Div", div, true),
      binary(K::kPow, "Pow", pow, true),
      binary(K::kEqual, "Equal", equal, false, kNotDifferentiable, S::kCompare),
      own(K::kWhere, "Where", "Where", nullptr, true, nullptr, L::kElementwise),
      unary(K::kRelu, "Relu", relu, 1, true),
      unary(K::kGelu, "Gelu", gelu, 1, true),
      unary(K::kTanh, "Tanh", tanhOf, 1, true),
      unary(K::kSigmoid, "Sigmoid", sigmoid, 1, true),
      unary(K::kExp, "Exp", expOf, 1, true),
      unary(K::kSqrt, "Sqrt", sqrtOf, 1, true),
      unary(K::kErf, "Erf", erfOf, 1, true),
      own(K::kSoftmax, "Softmax", "Softmax", nullptr, true, nullptr, L::kNormalization),
      own(K::kLayerNormalization, "LayerNormalization", "LayerNormalization", nullptr, true, nullptr,
          L::kNormalization),
      own(K::kBatchNormalization, "BatchNormalization", "BatchNormalization", nullptr, true, nullptr, L::kBatchNorm),
      own(K::kReduceMean, "ReduceMean", "ReduceMean", nullptr, true, nullptr, L::kReduction),
      own(K::kReduceSum, "ReduceSum", "ReduceSum", nullptr, true, nullptr, L::kReduction),
      own(K::kReduceMax, "ReduceMax", "ReduceMax", nullptr, false, kNoGradientYet, L::kReduction),
      own(K::kReshape, "Reshape", "Reshape", nullptr, true, nullptr, L::kDataMovement),
      own(K::kTranspose, "Transpose", "Transpose", nullptr, true, nullptr, L::kDataMovement),
      own(K::kFlatten, "Flatten", "Flatten", nullptr, true, nullptr, L::kDataMovement),
      own(K::kConcat, "Concat", "Concat", nullptr, true, nullptr, L::kCopy),
      own(K::kSplit, "Split", "Split", nullptr, true, nullptr, L::kCopy),
      own(K::kSlice, "Slice", "Slice", nullptr, true, nullptr, L::kCopy),
      own(K::kGather, "Gather", "Gather", nullptr, true, nullptr, L::kDataMovement),
      own(K::kUnsqueeze, "Unsqueeze", "Unsqueeze", nullptr, true, nullptr, L::kDataMovement),
      own(K::kSqueeze, "Squeeze", "Squeeze", nullptr, true, nullptr, L::kDataMovement),
      own(K::kCast, "Cast", "Cast", nullptr, true, nullptr, L::kElementwise),
      own(K::kExpand, "Expand", "Expand", nullptr, true, nullptr, L::kDataMovement),
      {K::kIdentity, "Identity", "Identity", nullptr, S::kUnary, identity, nullptr, 0, true, nullptr, L::kDataMovement,
       nullptr},
      own(K::kMaxPool, "MaxPool", "MaxPool", nullptr, true, nullptr, L::kPool),
      own(K::kAveragePool, "AveragePool", "AveragePool", nullptr, true, nullptr, L::kPool),
      own(K::kGlobalAveragePool, "GlobalAveragePool", "GlobalAveragePool", nullptr, true, nullptr, L::kReduction),
      own(K::kShape, "Shape", "Shape", nullptr, false, "an integer shape computation: no gradient flows through it",
          L::kNone, "folded to a constant at import (its result needs only its input's shape)"),
      own(K::kConstantOfShape, "ConstantOfShape", "ConstantOfShape", nullptr, false,
          "a constant: no gradient flows through it", L::kNone, "folded to a constant at import"),
      own(K::kRange, "Range", "Range", nullptr, false, "a constant: no gradient flows through it", L::kNone,
          "folded to a constant at import (its inputs must be constants)"),
      own(K::kAllReduce, "AllReduce", nullptr, kPartitioner, true, nullptr, L::kCommunication),
      own(K::kAllGather, "AllGather", nullptr, kPartitioner, true, nullptr, L::kCommunication),
      own(K::kReduceScatter, "ReduceScatter", nullptr, kPartitioner, true, nullptr, L::kCommunication),
      own(K::kSend, "Send", nullptr, kPartitioner, false, "a pipeline boundary: autodiff runs before partitioning",
          L::kCommunication),
      own(K::kRecv, "Recv", nullptr, kPartitioner, false, "a pipeline boundary: autodiff runs before partitioning",
          L::kCommunication),
      own(K::kFusedMatMul, "FusedMatMul", nullptr, "made by the fuse pass", false,
          "made by the fuse pass, which runs after autodiff", L::kMatMul),
      own(K::kFusedElementwise, "FusedElementwise", nullptr, "made by the fuse pass", false,
          "made by the fuse pass, which runs after autodiff", L::kNone,
          "the compile pipeline lowers elementwise chains op by op; the fuse pass serves --passes and --dump-ir-after"),
      own(K::kAllToAll, "AllToAll", nullptr, kPartitioner, true, nullptr, L::kCommunication),
      own(K::kSoftmaxCrossEntropyLoss, "SoftmaxCrossEntropyLoss", nullptr, kAutodiff, true, nullptr, L::kLoss),
      own(K::kSoftmaxCrossEntropyLossGrad, "SoftmaxCrossEntropyLossGrad", nullptr, kAutodiff, false,
          "a gradient kernel (no second derivatives)", L::kLossGrad),
      own(K::kConvInputGrad, "ConvInputGrad", nullptr, kAutodiff, false, "a gradient kernel (no second derivatives)",
          L::kNone, "training on the chip covers matmul models; convolution gradients are not lowered"),
      own(K::kConvWeightGrad, "ConvWeightGrad", nullptr, kAutodiff, false, "a gradient kernel (no second derivatives)",
          L::kNone, "training on the chip covers matmul models; convolution gradients are not lowered"),
      own(K::kGatherGrad, "GatherGrad", nullptr, kAutodiff, false, "a gradient kernel (no second derivatives)",
          L::kGatherGrad),
      own(K::kMaxPoolGrad, "MaxPoolGrad", nullptr, kAutodiff, false, "a gradient kernel (no second derivatives)",
          L::kNone, "training on the chip covers matmul models; pooling gradients are not lowered"),
      own(K::kAveragePoolGrad, "AveragePoolGrad", nullptr, kAutodiff, false,
          "a gradient kernel (no second derivatives)", L::kNone,
          "training on the chip covers matmul models; pooling gradients are not lowered"),
      unary(K::kNeg, "Neg", neg, 1, true),
      unary(K::kAbs, "Abs", absOf, 1, true),
      unary(K::kReciprocal, "Reciprocal", reciprocal, 1, true),
      unary(K::kFloor, "Floor", floorOf, 1, false, kNotDifferentiable),
      unary(K::kCeil, "Ceil", ceilOf, 1, false, kNotDifferentiable),
      unary(K::kLog, "Log", logOf, 1, true),
      unary(K::kSin, "Sin", sinOf, 1, true),
      unary(K::kCos, "Cos", cosOf, 1, true),
      unary(K::kNot, "Not", notOf, 1, false, kNotDifferentiable),
      unary(K::kSoftplus, "Softplus", softplus, 1, true),
      unary(K::kLeakyRelu, "LeakyRelu", leakyRelu, 1, true),
      unary(K::kElu, "Elu", elu, 1, true),
      unary(K::kHardSigmoid, "HardSigmoid", hardSigmoid, 1, true),
      unary(K::kHardSwish, "HardSwish", hardSwish, 1, true),
      binary(K::kMin, "Min", minOf, true),
      binary(K::kMax, "Max", maxOf, true),
      binary(K::kMod, "Mod", mod, false, kNotDifferentiable),
      binary(K::kLess, "Less", less, false, kNotDifferentiable, S::kCompare),
      binary(K::kGreater, "Greater", greater, false, kNotDifferentiable, S::kCompare),
      binary(K::kLessOrEqual, "LessOrEqual", lessOrEqual, false, kNotDifferentiable, S::kCompare),
      binary(K::kGreaterOrEqual, "GreaterOrEqual", greaterOrEqual, false, kNotDifferentiable, S::kCompare),
      binary(K::kAnd, "And", andOf, false, kNotDifferentiable, S::kCompare),
      binary(K::kOr, "Or", orOf, false, kNotDifferentiable, S::kCompare),
      own(K::kScatterND, "ScatterND", "ScatterND", nullptr, false, kNoGradientYet, L::kNone,
          "folded to a constant at import when its inputs are constants; with constant indices and computed data "
          "or updates the importer builds Concat, Gather and Reshape (and Add, Mul, Max or Min for a reduction)"),
  };
  return t;
}

}  // namespace

const std::vector<OpDefinition>& opDefinitions() {
  static const std::vector<OpDefinition> table = makeTable();
  return table;
}

const OpDefinition& opDefinition(OpKind kind) {
  const auto& table = opDefinitions();
  const auto index = static_cast<size_t>(kind);
  assert(index < table.size() && table[index].kind == kind && "the op table has one row per kind, in order");
  return table[index];
}

bool roundsItsResult(OpKind kind) {
  switch (opDefinition(kind).lowering) {
    case LoweringFamily::kDataMovement: case LoweringFamily::kCopy: case LoweringFamily::kCommunication:
      return false;
    default: break;
  }
  switch (kind) {
    case OpKind::kInput: case OpKind::kWeight: case OpKind::kShape: case OpKind::kConstantOfShape: case OpKind::kRange:
    case OpKind::kRelu: case OpKind::kNeg: case OpKind::kAbs: case OpKind::kFloor: case OpKind::kCeil:
    case OpKind::kMin: case OpKind::kMax: case OpKind::kWhere: case OpKind::kReduceMax: case OpKind::kMaxPool:
    case OpKind::kEqual: case OpKind::kLess: case OpKind::kGreater: case OpKind::kLessOrEqual:
    case OpKind::kGreaterOrEqual: case OpKind::kNot: case OpKind::kAnd: case OpKind::kOr:
      return false;
    default: return true;
  }
}

const std::vector<OnnxComposition>& onnxCompositions() {
  static const std::vector<OnnxComposition> list = {
      {"Clip", "Max and Min with constant (or input) bounds; an absent bound is left out"},
      {"Einsum", "Transpose, Reshape and ReduceSum around one batched MatMul (two operands), or Transpose and ReduceSum (one)"},
      {"Pad", "Concat with constant blocks (constant), Gather of clamped or reflected indices (edge, reflect), Slice "
              "(negative pads)"},
      {"Tile", "Reshape, Expand and Reshape"},
      {"Trilu", "Where with a constant triangular mask"},
      {"CumSum", "MatMul by a constant triangular matrix over the axis (Transposes around it)"},
      {"InstanceNormalization", "Reshape to [N, C, spatial], LayerNormalization over the last axis, Mul and Add of the "
                                "per-channel scale and bias, Reshape back"},
      {"GroupNormalization", "Reshape to [N, groups, channels per group x spatial], LayerNormalization over the last "
                             "axis, Mul and Add of the scale and bias (per group before opset 21, per channel from "
                             "21, after a Reshape to [N, C, spatial]), Reshape back"},
      {"Resize", "Gather of constant indices per resized axis (nearest), and two (linear) or four (cubic) Gathers "
                 "weighted by constant factors and added"},
      {"Sum", "a chain of Add (Identity for one input); Min and Max of more than two inputs likewise"},
      {"Dropout", "Identity (inference; training_mode must be a constant false), and a constant true mask"},
      {"Mean", "a chain of Add times a constant 1 / n"},
      {"Size", "a constant (the input's element count)"},
      {"CastLike", "Cast to the second input's type"},
      {"GlobalMaxPool", "ReduceMax over the spatial axes, keeping them"},
      {"LogSoftmax", "ReduceMax, Sub, Exp, ReduceSum, Log and Sub over the axis"},
      {"ReduceMin", "Neg, ReduceMax, Neg"},
      {"ReduceSumSquare", "Mul (the square), ReduceSum"},
      {"ReduceL1", "Abs, ReduceSum"},
      {"ReduceL2", "Mul, ReduceSum, Sqrt"},
      {"ReduceLogSum", "ReduceSum, Log"},
      {"ReduceLogSumExp", "Exp, ReduceSum, Log"},
  };
  return list;
}

}  // namespace tsp::ir
