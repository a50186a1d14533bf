// Tests of reverse-mode autodiff: every gradient rule against central finite differences of the
// reference interpreter, the optimizer steps, recomputation and the training FLOPs of GPT.
#include "compile/ir/autodiff.h"

#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "compile/frontend/builtin_models.h"
#include "compile/ir/interpreter.h"
#include "compile/ir/text_format.h"

namespace tsp::ir {
namespace {

using Shape = std::vector<std::int64_t>;

// Values in [lo, hi] with |v| >= gap (keeps Relu and Sqrt away from their kinks), seeded by the tensor.
Data randomData(std::int64_t n, unsigned seed, double lo = -1.0, double hi = 1.0, double gap = 0.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    x = dist(rng);
    if (std::abs(x) < gap) x = x < 0 ? x - gap : x + gap;
  }
  return makeData(v);
}

std::int64_t count(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// A test model: weights (the tensors differentiated) and a body that builds y from them; the loss is
// sum(y * r) with r a fixed random constant, so that every element of dy differs.
struct GradCase {
  Graph graph;
  std::vector<TensorId> inputs;
  std::vector<Value> inputValues;
  unsigned seed = 1;

  TensorId weight(const std::string& name, Shape shape, double lo = -1.0, double hi = 1.0, double gap = 0.0) {
    return graph.addWeight(name, shape, DType::kF32, randomData(count(shape), seed++, lo, hi, gap));
  }
  TensorId op(OpKind kind, const std::string& name, std::vector<TensorId> in, Attrs attrs = {}) {
    auto out = graph.addOp(kind, name, std::move(in), std::move(attrs), 0);
    EXPECT_TRUE(out.ok()) << out.error().format();
    return out.ok() ? *out : 0;
  }
  // Finishes the graph with the loss sum(y * r).
  void finish(TensorId y) {
    const Shape& s = graph.tensor(y).shape;
    const TensorId r = graph.addConstant("r", s, DType::kF32, randomData(count(s), 999));
    const TensorId prod = op(OpKind::kMul, "loss_mul", {y, r});
    const TensorId loss = op(OpKind::kReduceSum, "loss_sum", {prod}, {{"keepdims", std::int64_t{0}}});
    graph.markOutput(loss);
  }
};

double lossOf(const Graph& g, const std::vector<Value>& inputs) {
  auto out = interpret(g, inputs);
  EXPECT_TRUE(out.ok()) << out.error().format();
  return out.ok() ? (*out)[0].data[0] : 0.0;
}

// Checks every gradient element of every weight against (L(w + h) - L(w - h)) / 2h.
void expectGradientsMatch(const Graph& forward, const std::vector<Value>& inputs = {}, double h = 1e-2,
                          double atol = 2e-3, double rtol = 2e-2) {
  TrainingOptions options;
  options.optimizer = Optimizer::kNone;
  auto trained = differentiate(forward, options);
  ASSERT_TRUE(trained.ok()) << trained.error().format();
  auto out = interpret(trained->graph, inputs);
  ASSERT_TRUE(out.ok()) << out.error().format();
  EXPECT_NEAR((*out)[0].data[0], lossOf(forward, inputs), 1e-5 * (1 + std::abs((*out)[0].data[0])));
  size_t next = 1, checked = 0;
  for (size_t wi = 0; wi < forward.weights().size(); ++wi) {
    if (trained->tensors.gradients[wi] < 0) continue;
    const std::vector<double>& grad = (*out)[next++].data;
    const TensorId w = forward.weights()[wi];
    const std::vector<double> base = *forward.tensor(w).data;
    ASSERT_EQ(grad.size(), base.size()) << forward.tensor(w).name;
    for (size_t i = 0; i < base.size(); ++i) {
      Graph plus = forward, minus = forward;
      auto up = base, down = base;
      up[i] += h;
      down[i] -= h;
      plus.setData(w, makeData(up));
      minus.setData(w, makeData(down));
      const double fd = (lossOf(plus, inputs) - lossOf(minus, inputs)) / (2 * h);
      EXPECT_NEAR(grad[i], fd, atol + rtol * std::abs(fd)) << forward.tensor(w).name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u);
}

TEST(Autodiff, MatMulBatchedAndBroadcast) {
  GradCase c;
  const TensorId a = c.weight("a", {2, 1, 3, 4});
  const TensorId b = c.weight("b", {3, 4, 2});
  c.finish(c.op(OpKind::kMatMul, "mm", {a, b}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, Gemm) {
  GradCase c;
  const TensorId a = c.weight("a", {4, 3});
  const TensorId b = c.weight("b", {2, 4});
  const TensorId bias = c.weight("c", {2});
  c.finish(c.op(OpKind::kGemm, "gemm", {a, b, bias},
                {{"transA", std::int64_t{1}}, {"transB", std::int64_t{1}}, {"alpha", 0.5}, {"beta", 2.0}}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, ConvStridedPaddedGrouped) {
  GradCase c;
  const TensorId x = c.weight("x", {1, 4, 5, 5});
  const TensorId w = c.weight("w", {4, 2, 3, 3});
  const TensorId b = c.weight("b", {4});
  c.finish(c.op(OpKind::kConv, "conv", {x, w, b},
                {{"strides", Shape{2, 2}}, {"pads", Shape{1, 1, 1, 1}}, {"group", std::int64_t{2}}}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, ConvOneDimensionalDilated) {
  GradCase c;
  const TensorId x = c.weight("x", {2, 3, 9});
  const TensorId w = c.weight("w", {2, 3, 3});
  c.finish(c.op(OpKind::kConv, "conv1d", {x, w}, {{"dilations", Shape{2}}, {"pads", Shape{2, 1}}}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, ElementwiseBroadcasting) {
  GradCase c;
  const TensorId a = c.weight("a", {2, 3});
  const TensorId b = c.weight("b", {3});
  const TensorId d = c.weight("d", {2, 1}, 0.5, 1.5);
  const TensorId sum = c.op(OpKind::kAdd, "add", {a, b});
  const TensorId diff = c.op(OpKind::kSub, "sub", {sum, d});
  const TensorId prod = c.op(OpKind::kMul, "mul", {diff, b});
  c.finish(c.op(OpKind::kDiv, "div", {prod, d}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, PowWithConstantExponent) {
  GradCase c;
  const TensorId a = c.weight("a", {5}, 0.5, 2.0);
  const TensorId e = c.graph.addConstant("e", {}, DType::kF32, makeData(std::vector<double>(1, 3.0)));
  c.finish(c.op(OpKind::kPow, "pow", {a, e}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, Where) {
  GradCase c;
  const TensorId a = c.weight("a", {2, 3});
  const TensorId b = c.weight("b", {3});
  const TensorId cond = c.graph.addConstant("cond", {2, 3}, DType::kBool,
                                            makeData({1, 0, 1, 0, 0, 1}));
  c.finish(c.op(OpKind::kWhere, "where", {cond, a, b}));
  expectGradientsMatch(c.graph);
}

// One test per activation: y = act(x), x kept away from kinks and poles.
void checkActivation(OpKind kind, Attrs attrs = {}, double lo = -2.0, double hi = 2.0, double gap = 0.2) {
  GradCase c;
  const TensorId x = c.weight("x", {2, 5}, lo, hi, gap);
  c.finish(c.op(kind, "act", {x}, std::move(attrs)));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, Relu) { checkActivation(OpKind::kRelu); }
TEST(Autodiff, GeluErf) { checkActivation(OpKind::kGelu); }
TEST(Autodiff, GeluTanh) { checkActivation(OpKind::kGelu, {{"approximate", std::string("tanh")}}); }
TEST(Autodiff, Tanh) { checkActivation(OpKind::kTanh); }
TEST(Autodiff, Sigmoid) { checkActivation(OpKind::kSigmoid); }
TEST(Autodiff, Exp) { checkActivation(OpKind::kExp); }
TEST(Autodiff, Sqrt) { checkActivation(OpKind::kSqrt, {}, 0.5, 3.0); }
TEST(Autodiff, Erf) { checkActivation(OpKind::kErf); }
TEST(Autodiff, Abs) { checkActivation(OpKind::kAbs); }
TEST(Autodiff, SinAndCos) {
  checkActivation(OpKind::kSin);
  checkActivation(OpKind::kCos);
}
TEST(Autodiff, Softplus) { checkActivation(OpKind::kSoftplus); }
TEST(Autodiff, LeakyReluAndElu) {
  checkActivation(OpKind::kLeakyRelu, {{"alpha", 0.1}});
  checkActivation(OpKind::kElu, {{"alpha", 0.7}});
}
// Inputs over -4 to 4 reach both flat parts (kinks at -3 and 3 for HardSwish, -2.5 and 2.5 here).
TEST(Autodiff, HardSigmoidAndHardSwish) {
  checkActivation(OpKind::kHardSigmoid, {}, -4.0, 4.0);
  checkActivation(OpKind::kHardSwish, {}, -4.0, 4.0);
}
TEST(Autodiff, MinAndMax) {
  for (const OpKind kind : {OpKind::kMin, OpKind::kMax}) {
    // Operands at least 0.2 apart (no tie within a finite-difference step), each chosen somewhere.
    GradCase c;
    const TensorId a = c.graph.addWeight("a", {2, 3}, DType::kF32, makeData({-0.9, 0.2, 0.7, 0.4, -0.3, 0.95}));
    const TensorId b = c.graph.addWeight("b", {3}, DType::kF32, makeData({0.1, -0.5, 0.5}));
    c.finish(c.op(kind, "pick", {a, b}));
    expectGradientsMatch(c.graph);
  }
}

TEST(Autodiff, Softmax) {
  GradCase c;
  const TensorId x = c.weight("x", {2, 3, 4}, -2.0, 2.0);
  c.finish(c.op(OpKind::kSoftmax, "softmax", {x}, {{"axis", std::int64_t{1}}}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, LayerNormalization) {
  GradCase c;
  const TensorId x = c.weight("x", {3, 6}, -2.0, 2.0);
  const TensorId gamma = c.weight("gamma", {6}, 0.5, 1.5);
  const TensorId beta = c.weight("beta", {6});
  c.finish(c.op(OpKind::kLayerNormalization, "ln", {x, gamma, beta}, {{"axis", std::int64_t{-1}}, {"epsilon", 1e-5}}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, ReductionsAndShapes) {
  GradCase c;
  const TensorId x = c.weight("x", {2, 3, 4});
  const TensorId mean = c.op(OpKind::kReduceMean, "mean", {x}, {{"axes", Shape{2}}, {"keepdims", std::int64_t{1}}});
  const TensorId centred = c.op(OpKind::kSub, "centre", {x, mean});
  const TensorId t = c.op(OpKind::kTranspose, "t", {centred}, {{"perm", Shape{2, 0, 1}}});
  const TensorId r = c.op(OpKind::kReshape, "r", {t}, {{"shape", Shape{4, 6}}});
  const TensorId u = c.op(OpKind::kUnsqueeze, "u", {r}, {{"axes", Shape{0}}});
  const TensorId e = c.op(OpKind::kExpand, "e", {u}, {{"shape", Shape{2, 4, 6}}});
  c.finish(c.op(OpKind::kMul, "sq", {c.op(OpKind::kReduceSum, "sum", {e}, {{"axes", Shape{0}}, {"keepdims", std::int64_t{0}}}), r}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, IdentityCastFlattenSqueeze) {
  GradCase c;
  const TensorId x = c.weight("x", {2, 1, 3, 2});
  const TensorId id = c.op(OpKind::kIdentity, "id", {x});
  const TensorId cast = c.op(OpKind::kCast, "cast", {id}, {{"to", std::string("fp32")}});
  const TensorId sq = c.op(OpKind::kSqueeze, "sq", {cast}, {{"axes", Shape{1}}});
  const TensorId flat = c.op(OpKind::kFlatten, "flat", {sq}, {{"axis", std::int64_t{1}}});
  c.finish(c.op(OpKind::kMul, "sq2", {flat, flat}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, SplitConcatSlice) {
  GradCase c;
  const TensorId x = c.weight("x", {2, 6});
  auto parts = c.graph.addMultiOp(OpKind::kSplit, "split", {x}, {{"axis", std::int64_t{1}}, {"split", Shape{2, 3, 1}}}, 0);
  ASSERT_TRUE(parts.ok());
  // The last part is unused: its gradient is zero.
  const TensorId joined = c.op(OpKind::kConcat, "cat", {(*parts)[1], (*parts)[0]}, {{"axis", std::int64_t{1}}});
  c.finish(c.op(OpKind::kSlice, "slice", {joined}, {{"starts", Shape{1}}, {"ends", Shape{4}}, {"axes", Shape{1}}}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, EmbeddingGather) {
  GradCase c;
  const TensorId table = c.weight("table", {5, 3});
  // Index 1 is read twice: its gradient is the sum of both rows.
  const TensorId idx = c.graph.addConstant("idx", {2, 2}, DType::kI32,
                                           makeData({1, 4, 1, 0}));
  c.finish(c.op(OpKind::kGather, "embed", {table, idx}, {{"axis", std::int64_t{0}}}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, SoftmaxCrossEntropyLoss) {
  Graph g;
  const TensorId scores = g.addWeight("scores", {2, 3, 5}, DType::kF32, randomData(30, 7, -2.0, 2.0));
  const TensorId labels = g.addInput("labels", {2, 3}, DType::kI32);
  auto loss = g.addOp(OpKind::kSoftmaxCrossEntropyLoss, "loss", {scores, labels}, {{"axis", std::int64_t{-1}}}, 0);
  ASSERT_TRUE(loss.ok()) << loss.error().format();
  EXPECT_TRUE(g.tensor(*loss).shape.empty());
  g.markOutput(*loss);
  const std::vector<Value> in = {Value{DType::kI32, {2, 3}, {0, 4, 2, 2, 1, 3}}};
  // The loss itself: mean of -log softmax at the label, by hand for the first row.
  auto out = interpret(g, in);
  ASSERT_TRUE(out.ok());
  EXPECT_GT((*out)[0].data[0], 0.0);
  expectGradientsMatch(g, in);
}

TEST(Autodiff, LossRejectsBadLabels) {
  Graph g;
  const TensorId scores = g.addInput("scores", {2, 5}, DType::kF32);
  const TensorId labels = g.addInput("labels", {5}, DType::kI32);
  auto loss = g.addOp(OpKind::kSoftmaxCrossEntropyLoss, "loss", {scores, labels}, 0);
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.error().message.find("labels must be integers of shape [2]"), std::string::npos) << loss.error().message;
  Graph range;
  const TensorId s = range.addInput("s", {1, 3}, DType::kF32);
  const TensorId l = range.addInput("l", {1}, DType::kI32);
  range.markOutput(*range.addOp(OpKind::kSoftmaxCrossEntropyLoss, "loss", {s, l}, 0));
  auto out = interpret(range, {Value{DType::kF32, {1, 3}, {0, 0, 0}}, Value{DType::kI32, {1}, {3}}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("label 3 is out of range [0, 3)"), std::string::npos) << out.error().message;
}

TEST(Autodiff, NoRuleIsAnErrorNamingTheOp) {
  GradCase c;
  const TensorId x = c.weight("x", {2, 4});
  c.finish(c.op(OpKind::kReduceMax, "row_max", {x}, {{"axes", Shape{1}}}));
  TrainingOptions options;
  auto trained = differentiate(c.graph, options);
  ASSERT_FALSE(trained.ok());
  EXPECT_NE(trained.error().format().find("row_max"), std::string::npos);
  EXPECT_NE(trained.error().message.find("autodiff: no gradient rule for ReduceMax"), std::string::npos);
}

TEST(Autodiff, MaxPool) {
  GradCase c;
  // Distinct values (no ties inside a window), overlapping windows and padding.
  const TensorId x = c.weight("x", {1, 2, 5, 5});
  c.finish(c.op(OpKind::kMaxPool, "pool", {x},
                {{"kernel_shape", Shape{3, 3}}, {"strides", Shape{2, 2}}, {"pads", Shape{1, 1, 1, 1}}}));
  expectGradientsMatch(c.graph, {}, 1e-3);
}

TEST(Autodiff, AveragePoolAndGlobalAveragePool) {
  for (std::int64_t includePad : {0, 1}) {
    GradCase c;
    const TensorId x = c.weight("x", {1, 2, 5, 5});
    const TensorId p = c.op(OpKind::kAveragePool, "avg", {x},
                            {{"kernel_shape", Shape{3, 3}}, {"strides", Shape{2, 2}}, {"pads", Shape{1, 1, 1, 1}},
                             {"count_include_pad", includePad}});
    c.finish(c.op(OpKind::kGlobalAveragePool, "gap", {c.op(OpKind::kTanh, "t", {p})}));
    expectGradientsMatch(c.graph);
  }
}

TEST(Autodiff, BatchNormalizationWithRunningStatistics) {
  GradCase c;
  const TensorId x = c.weight("x", {2, 3, 2, 2});
  const TensorId scale = c.weight("scale", {3}, 0.5, 1.5);
  const TensorId bias = c.weight("bias", {3});
  const TensorId mean = c.graph.addConstant("mean", {3}, DType::kF32, randomData(3, 77));
  const TensorId var = c.graph.addConstant("var", {3}, DType::kF32, randomData(3, 78, 0.5, 2.0));
  c.finish(c.op(OpKind::kBatchNormalization, "bn", {x, scale, bias, mean, var}, {{"epsilon", 1e-5}}));
  expectGradientsMatch(c.graph);
}

TEST(Autodiff, ErrorsNameWhatIsWrong) {
  TrainingOptions options;
  auto message = [&](const Graph& g, const std::string& loss = "") {
    auto t = differentiate(g, options, loss);
    EXPECT_FALSE(t.ok());
    return t.ok() ? std::string() : t.error().format();
  };
  Graph empty;
  EXPECT_NE(message(empty).find("differentiate needs a loss: the graph has no output"), std::string::npos);
  GradCase constant;
  const TensorId x = constant.graph.addInput("x", {3}, DType::kF32);
  constant.finish(constant.op(OpKind::kExp, "exp", {x}));
  EXPECT_NE(message(constant.graph).find("the loss does not depend on any weight"), std::string::npos);
  EXPECT_NE(message(constant.graph, "nope").find("the loss tensor 'nope' does not exist"), std::string::npos);
  GradCase pow;
  const TensorId base = pow.weight("base", {3}, 0.5, 1.5);
  pow.finish(pow.op(OpKind::kPow, "pow", {base, pow.weight("exponent", {3})}));
  EXPECT_NE(message(pow.graph).find("autodiff: Pow has a gradient rule for its base only"), std::string::npos);
  GradCase vec;
  vec.finish(vec.op(OpKind::kMatMul, "mv", {vec.weight("m", {2, 3}), vec.weight("v", {3})}));
  EXPECT_NE(message(vec.graph).find("autodiff: MatMul with a 1-D operand has no gradient rule"), std::string::npos);
  GradCase strided;
  strided.finish(strided.op(OpKind::kSlice, "every2", {strided.weight("s", {6})},
                            {{"starts", Shape{0}}, {"ends", Shape{6}}, {"steps", Shape{2}}}));
  EXPECT_NE(message(strided.graph).find("autodiff: Slice with steps has no gradient rule"), std::string::npos);
  Graph noOutput;
  options.scores = "";
  auto built = buildTrainingGraph(noOutput, options);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.error().message.find("training: the model has no output to compute a loss on"), std::string::npos);
  options.scores = "logits";
  built = buildTrainingGraph(constant.graph, options);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.error().message.find("training: the scores tensor 'logits' does not exist"), std::string::npos);
}

// A two-layer MLP with a cross-entropy loss: the training graph of buildTrainingGraph.
Graph mlp() {
  Graph g;
  const TensorId x = g.addInput("x", {4, 3}, DType::kF32);
  const TensorId w1 = g.addWeight("w1", {3, 5}, DType::kF32, randomData(15, 11));
  const TensorId b1 = g.addWeight("b1", {5}, DType::kF32, randomData(5, 12));
  const TensorId w2 = g.addWeight("w2", {5, 6}, DType::kF32, randomData(30, 13));
  const TensorId h = *g.addOp(OpKind::kTanh, "act", {*g.addOp(OpKind::kAdd, "bias", {*g.addOp(OpKind::kMatMul, "fc1", {x, w1}, 1), b1}, 1)}, 1);
  g.markOutput(*g.addOp(OpKind::kMatMul, "fc2", {h, w2}, 2));
  return g;
}

const std::vector<Value> kMlpInputs = {Value{DType::kF32, {4, 3}, {0.1, -0.4, 0.9, 0.3, 0.2, -0.7, -0.5, 0.8, 0.6, 0.0, -0.2, 0.4}},
                                       Value{DType::kI32, {4}, {0, 5, 2, 3}}};

TEST(Autodiff, SgdStepUpdatesEveryWeight) {
  TrainingOptions options;
  options.optimizer = Optimizer::kNone;
  auto grads = buildTrainingGraph(mlp(), options);
  ASSERT_TRUE(grads.ok()) << grads.error().format();
  options.optimizer = Optimizer::kSgd;
  options.learningRate = 0.1;
  auto sgd = buildTrainingGraph(mlp(), options);
  ASSERT_TRUE(sgd.ok()) << sgd.error().format();
  auto g = interpret(grads->graph, kMlpInputs);
  auto s = interpret(sgd->graph, kMlpInputs);
  ASSERT_TRUE(g.ok() && s.ok());
  ASSERT_EQ(s->size(), 4u);  // loss, w1, b1, w2
  const Graph model = mlp();
  for (size_t w = 0; w < 3; ++w) {
    const auto& before = *model.tensor(model.weights()[w]).data;
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_NEAR((*s)[1 + w].data[i], before[i] - 0.1 * (*g)[1 + w].data[i], 1e-6);
  }
  // One step downhill lowers the loss.
  Graph stepped = mlp();
  for (size_t w = 0; w < 3; ++w)
    stepped.setData(stepped.weights()[w], makeData((*s)[1 + w].data));
  auto steppedTraining = buildTrainingGraph(stepped, options);
  ASSERT_TRUE(steppedTraining.ok());
  auto after = interpret(steppedTraining->graph, kMlpInputs);
  ASSERT_TRUE(after.ok());
  EXPECT_LT((*after)[0].data[0], (*s)[0].data[0]);
}

TEST(Autodiff, AdamStepMatchesTheFormula) {
  TrainingOptions options;
  options.optimizer = Optimizer::kNone;
  auto grads = buildTrainingGraph(mlp(), options);
  options.optimizer = Optimizer::kAdam;
  options.learningRate = 0.01;
  options.step = 3;
  auto adam = buildTrainingGraph(mlp(), options);
  ASSERT_TRUE(grads.ok() && adam.ok()) << adam.error().format();
  ASSERT_EQ(adam->graph.states().size(), 6u);  // m and v of three weights
  std::vector<Value> in = kMlpInputs;
  for (TensorId st : adam->graph.states()) {
    const auto& t = adam->graph.tensor(st);
    in.push_back(Value{DType::kF32, t.shape, *randomData(t.elements(), 50 + st, 0.0, 0.1)});
  }
  auto g = interpret(grads->graph, kMlpInputs);
  auto a = interpret(adam->graph, in);
  ASSERT_TRUE(g.ok() && a.ok()) << a.error().format();
  ASSERT_EQ(a->size(), 1u + 3u + 6u);
  const Graph model = mlp();
  const double rate = 0.01 * std::sqrt(1 - std::pow(0.999, 3)) / (1 - std::pow(0.9, 3));
  for (size_t w = 0; w < 3; ++w) {
    const auto& before = *model.tensor(model.weights()[w]).data;
    const auto& m = in[2 + 2 * w].data;
    const auto& v = in[3 + 2 * w].data;
    for (size_t i = 0; i < before.size(); ++i) {
      const double grad = (*g)[1 + w].data[i];
      const double m2 = 0.9 * m[i] + 0.1 * grad, v2 = 0.999 * v[i] + 0.001 * grad * grad;
      EXPECT_NEAR((*a)[4 + 2 * w].data[i], m2, 1e-6);
      EXPECT_NEAR((*a)[5 + 2 * w].data[i], v2, 1e-6);
      EXPECT_NEAR((*a)[1 + w].data[i], before[i] - rate * m2 / (std::sqrt(v2) + 1e-8), 1e-5);
    }
  }
}

TEST(Autodiff, RecomputeGivesTheSameGradients) {
  TrainingOptions options;
  options.optimizer = Optimizer::kNone;
  auto plain = buildTrainingGraph(mlp(), options);
  options.recompute = Recompute::kFull;
  auto again = buildTrainingGraph(mlp(), options);
  ASSERT_TRUE(plain.ok() && again.ok());
  auto p = interpret(plain->graph, kMlpInputs);
  auto r = interpret(again->graph, kMlpInputs);
  ASSERT_TRUE(p.ok() && r.ok());
  ASSERT_EQ(p->size(), r->size());
  for (size_t i = 0; i < p->size(); ++i) EXPECT_EQ((*p)[i].data, (*r)[i].data);
  // Layer 1 (fc1) is run again, layer 2 (the last) is not: one more MatMul of 4 x 3 x 5.
  EXPECT_EQ(again->graph.macFlops() - plain->graph.macFlops(), 2 * 4 * 3 * 5);
}

// A tiny GPT with random weights: the whole training graph against finite differences on a few elements.
TEST(Autodiff, TinyGptGradients) {
  frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", "1"}, {"hidden", "8"}, {"heads", "2"}, {"vocab", "7"}, {"seq", "3"}, {"batch", "2"},
                 {"dtype", "fp32"}};
  auto model = frontend::buildBuiltinModel(spec);
  ASSERT_TRUE(model.ok()) << model.error().format();
  unsigned seed = 100;
  for (TensorId w : model->weights()) model->setData(w, randomData(model->tensor(w).elements(), seed++, -0.5, 0.5));
  TrainingOptions options;
  options.optimizer = Optimizer::kNone;
  options.recompute = Recompute::kFull;
  auto trained = buildTrainingGraph(*model, options);
  ASSERT_TRUE(trained.ok()) << trained.error().format();
  const std::vector<Value> in = {Value{DType::kI32, {2, 3}, {1, 4, 6, 0, 2, 2}}, Value{DType::kI32, {2, 3}, {4, 6, 0, 2, 2, 5}}};
  auto out = interpret(trained->graph, in);
  ASSERT_TRUE(out.ok()) << out.error().format();
  // The loss graph alone, for the finite differences.
  options.optimizer = Optimizer::kNone;
  size_t next = 1, checked = 0;
  for (size_t wi = 0; wi < model->weights().size(); ++wi) {
    if (trained->tensors.gradients[wi] < 0) continue;
    const auto& grad = (*out)[next++].data;
    const TensorId w = model->weights()[wi];
    const std::vector<double> base = *model->tensor(w).data;
    for (size_t i = 0; i < base.size(); i += 7) {
      auto lossWith = [&](double delta) {
        Graph g = *model;
        auto d = base;
        d[i] += delta;
        g.setData(w, makeData(d));
        auto t = buildTrainingGraph(g, options);
        return (*interpret(t->graph, in))[0].data[0];
      };
      const double fd = (lossWith(1e-2) - lossWith(-1e-2)) / 2e-2;
      EXPECT_NEAR(grad[i], fd, 2e-3 + 2e-2 * std::abs(fd)) << model->tensor(w).name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 20u);
}

// The training ops, scalar tensors and Adam's states survive the text form (--dump-ir-after).
TEST(Autodiff, TrainingGraphRoundTripsThroughTheTextForm) {
  frontend::ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"layers", "1"}, {"hidden", "8"}, {"heads", "2"}, {"vocab", "7"}, {"seq", "3"}, {"batch", "2"}};
  auto model = frontend::buildBuiltinModel(spec);
  ASSERT_TRUE(model.ok());
  TrainingOptions options;
  options.optimizer = Optimizer::kAdam;
  options.recompute = Recompute::kFull;
  auto trained = buildTrainingGraph(*model, options);
  ASSERT_TRUE(trained.ok());
  const std::string text = trained->graph.print();
  EXPECT_NE(text.find("SoftmaxCrossEntropyLossGrad"), std::string::npos);
  EXPECT_NE(text.find("GatherGrad"), std::string::npos);
  auto back = parseGraph(text, "train.ir");
  ASSERT_TRUE(back.ok()) << back.error().format();
  EXPECT_EQ(back->print(), text);
}

// Megatron's equation 3: with recomputation the matmul FLOPs of one iteration are
// 96 B s l h^2 (1 + s / 6h + V / 16 l h), for the GPT configurations of Megatron's Table 1 (scaled
// in batch and sequence so that the graphs stay small) and GPT-3.
TEST(Autodiff, TrainingFlopsAreMegatronEquation3) {
  struct Config { std::int64_t layers, hidden, heads, vocab, seq, batch; };
  for (const Config& c : {Config{24, 2304, 24, 51200, 2048, 1}, Config{40, 6144, 48, 51200, 2048, 1},
                          Config{96, 12288, 96, 50257, 2048, 1}, Config{2, 256, 4, 1000, 64, 8}}) {
    frontend::ModelSpec spec;
    spec.builtin = "gpt";
    spec.params = {{"layers", std::to_string(c.layers)}, {"hidden", std::to_string(c.hidden)},
                   {"heads", std::to_string(c.heads)},   {"vocab", std::to_string(c.vocab)},
                   {"seq", std::to_string(c.seq)},       {"batch", std::to_string(c.batch)}};
    auto model = frontend::buildBuiltinModel(spec);
    ASSERT_TRUE(model.ok()) << model.error().format();
    TrainingOptions options;
    options.recompute = Recompute::kFull;
    options.optimizer = Optimizer::kAdam;
    auto trained = buildTrainingGraph(*model, options);
    ASSERT_TRUE(trained.ok()) << trained.error().format();
    const double B = c.batch, s = c.seq, l = c.layers, h = c.hidden, V = c.vocab;
    const double megatron = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    EXPECT_DOUBLE_EQ(static_cast<double>(trained->graph.macFlops()), megatron) << c.layers << "x" << c.hidden;
  }
}

}  // namespace
}  // namespace tsp::ir
