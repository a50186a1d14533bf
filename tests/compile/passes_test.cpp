// Tests of the graph passes: each on tiny graphs, and the reference interpreter showing that every
// pass leaves the results of whole models unchanged.
#include "compile/passes/passes.h"

#include <random>

#include <gtest/gtest.h>

#include "compile/frontend/builtin_models.h"
#include "compile/ir/interpreter.h"
#include "compile/ir/text_format.h"

namespace tsp::passes {
namespace {

using ir::DType;
using ir::OpKind;
using Shape = std::vector<std::int64_t>;

int count(const ir::Graph& g, OpKind kind) {
  int n = 0;
  for (const auto& op : g.ops()) n += op.kind == kind;
  return n;
}

// Gives every weight deterministic values so that the interpreter can run the graph.
ir::Graph withWeights(const ir::Graph& source) {
  ir::Graph g = source;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-0.5, 0.5);
  for (auto w : g.weights()) {
    std::vector<double> data(static_cast<size_t>(g.tensor(w).elements()));
    for (double& v : data) v = static_cast<float>(dist(rng));
    g.setData(w, ir::makeData(data));
  }
  return g;
}

std::vector<ir::Value> randomInputs(const ir::Graph& g) {
  std::mt19937 rng(11);
  std::vector<ir::Value> values;
  std::vector<ir::TensorId> fed(g.inputs());
  fed.insert(fed.end(), g.states().begin(), g.states().end());
  for (auto id : fed) {
    const auto& t = g.tensor(id);
    ir::Value v{t.dtype, t.shape, std::vector<double>(t.elements())};
    for (double& d : v.data)
      d = ir::isFloat(t.dtype) ? std::uniform_real_distribution<double>(-1, 1)(rng)
                               : static_cast<double>(std::uniform_int_distribution<int>(0, 1)(rng));
    values.push_back(v);
  }
  return values;
}

void expectSameResults(const ir::Graph& before, const ir::Graph& after) {
  const auto inputs = randomInputs(before);
  auto a = ir::interpret(before, inputs);
  auto b = ir::interpret(after, inputs);
  ASSERT_TRUE(a.ok()) << a.error().format();
  ASSERT_TRUE(b.ok()) << b.error().format();
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) {
    ASSERT_EQ((*a)[i].shape, (*b)[i].shape);
    for (size_t k = 0; k < (*a)[i].data.size(); ++k)
      ASSERT_NEAR((*a)[i].data[k], (*b)[i].data[k], 1e-5 + 1e-5 * std::abs((*a)[i].data[k])) << "output " << i << " at " << k;
  }
}

ir::Graph parse(const std::string& text) {
  auto g = ir::parseGraph(text);
  EXPECT_TRUE(g.ok()) << g.error().format();
  return g.ok() ? std::move(*g) : ir::Graph{};
}

TEST(Cse, MergesStructurallyEqualOpsOnly) {
  ir::Graph g;
  const auto x = g.addInput("x", {4, 8}, DType::kF32);
  const auto y = g.addInput("y", {4, 8}, DType::kF32);
  auto a1 = g.addOp(OpKind::kAdd, "a1", {x, y}, 0);
  auto a2 = g.addOp(OpKind::kAdd, "a2", {y, x}, 0);  // commutative: the same value
  auto s1 = g.addOp(OpKind::kSub, "s1", {x, y}, 0);
  auto s2 = g.addOp(OpKind::kSub, "s2", {y, x}, 0);  // not the same value
  auto t1 = g.addOp(OpKind::kSoftmax, "t1", {*a1}, {{"axis", std::int64_t{0}}}, 0);
  auto t2 = g.addOp(OpKind::kSoftmax, "t2", {*a2}, {{"axis", std::int64_t{1}}}, 0);  // other attribute
  auto t3 = g.addOp(OpKind::kSoftmax, "t3", {*a2}, {{"axis", std::int64_t{0}}}, 0);  // equal to t1 once a2 = a1
  for (auto t : {*s1, *s2, *t1, *t2, *t3}) g.markOutput(t);
  auto out = eliminateCommonSubexpressions(withWeights(g));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(count(*out, OpKind::kAdd), 1);
  EXPECT_EQ(count(*out, OpKind::kSub), 2);
  EXPECT_EQ(count(*out, OpKind::kSoftmax), 2);
  expectSameResults(g, *out);
}

TEST(Cse, MergesEqualConstants) {
  auto g = parse("input %x: fp32[3]\nconst %a: fp32[3] = [1.0, 2.0, 3.0]\nconst %b: fp32[3] = [1.0, 2.0, 3.0]\n"
                 "%p: fp32[3] = Mul %p(%x, %a) @0\n%q: fp32[3] = Mul %q(%x, %b) @0\n"
                 "%r: fp32[3] = Add %r(%p, %q) @0\noutput %r\n");
  auto out = eliminateCommonSubexpressions(g);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(count(*out, OpKind::kMul), 1);
  EXPECT_EQ(out->constants().size(), 1u);
  expectSameResults(g, *out);
}

TEST(Dce, RemovesDeadOpsAndKeepsSideEffects) {
  auto g = parse("input %x: fp32[4]\nweight %w: fp32[4]\n"
                 "%dead: fp32[4] = Mul %dead(%x, %w) @0\n%live: fp32[4] = Relu %live(%x) @0\n"
                 "%ar: fp32[4] = AllReduce %ar(%x) {group = 1} @0\noutput %live\n");
  auto out = eliminateDeadCode(g);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->ops().size(), 2u);
  EXPECT_EQ(count(*out, OpKind::kMul), 0);
  EXPECT_EQ(count(*out, OpKind::kAllReduce), 1);
  EXPECT_TRUE(out->weights().empty());  // only the dead op read it
  EXPECT_EQ(out->inputs().size(), 1u);  // the interface stays
}

TEST(Fold, FoldsConstantsAndDropsNeutralOps) {
  auto g = parse("input %x: fp32[2,3]\nconst %s: int64[2] = [3, 2]\nconst %one: fp32[] = [1.0]\n"
                 "const %c: fp32[3] = [1.0, 2.0, 3.0]\n"
                 "%c2: fp32[3] = Mul %c2(%c, %c) @0\n"
                 "%shape: int64[2] = Shape %shape(%x) @0\n"
                 "%i: fp32[2,3] = Identity %i(%x) @0\n%m: fp32[2,3] = Mul %m(%i, %one) @0\n"
                 "%y: fp32[2,3] = Add %y(%m, %c2) @0\n%z: fp32[3,2] = Reshape %z(%y) {shape = [3, 2]} @0\n"
                 "output %z\noutput %shape\n");
  auto out = foldConstants(g);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->ops().size(), 2u);  // Add and Reshape remain
  const auto c2 = out->findTensor("c2");
  ASSERT_TRUE(c2);
  EXPECT_EQ(*out->tensor(*c2).data, (std::vector<double>{1, 4, 9}));
  expectSameResults(g, *out);
}

TEST(Fuse, MatMulBiasActivationAndElementwiseChains) {
  auto g = parse("input %x: fp32[4,8]\nweight %w: fp32[8,16]\nweight %b: fp32[16]\nweight %s: fp32[16]\n"
                 "%m: fp32[4,16] = MatMul %m(%x, %w) @0\n%a: fp32[4,16] = Add %a(%m, %b) @0\n"
                 "%g: fp32[4,16] = Gelu %g(%a) @0\n"
                 "%e1: fp32[4,16] = Mul %e1(%s, %g) @1\n%e2: fp32[4,16] = Tanh %e2(%e1) @1\n"
                 "%e3: fp32[4,16] = Sub %e3(%s, %e2) @1\noutput %e3\n");
  auto out = fuseOps(withWeights(g));
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->ops().size(), 2u);
  EXPECT_EQ(out->op(0).kind, OpKind::kFusedMatMul);
  EXPECT_EQ(out->op(0).stringAttr("activation", ""), "Gelu");
  EXPECT_EQ(out->op(1).kind, OpKind::kFusedElementwise);
  EXPECT_EQ(out->op(1).layer, 1);
  expectSameResults(withWeights(g), *out);
  // A fused graph prints and parses back.
  auto again = ir::parseGraph(out->print());
  ASSERT_TRUE(again.ok()) << again.error().format();
  EXPECT_EQ(again->print(), out->print());
}

TEST(Fuse, IntermediateWithTwoUsersIsNotFused) {
  auto g = parse("input %x: fp32[4]\n%a: fp32[4] = Relu %a(%x) @0\n%b: fp32[4] = Exp %b(%a) @0\n"
                 "%c: fp32[4] = Add %c(%a, %b) @0\noutput %c\n");
  auto out = fuseOps(g);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(count(*out, OpKind::kRelu), 1);  // %a has two users: it stays materialised
  expectSameResults(g, *out);
}

TEST(Layout, GemmBecomesMatMulOnKnWeightsAndTransposesCompose) {
  auto g = parse("input %x: fp32[3,4]\nweight %w: fp32[5,4]\nweight %c: fp32[5]\n"
                 "%y: fp32[3,5] = Gemm %y(%x, %w, %c) {alpha = 0.5, beta = 2.0, transB = 1} @0\n"
                 "%t1: fp32[5,3] = Transpose %t1(%y) {perm = [1, 0]} @0\n"
                 "%t2: fp32[3,5] = Transpose %t2(%t1) {perm = [1, 0]} @0\n"
                 "%f: fp32[1,15] = Flatten %f(%t2) {axis = 0} @0\noutput %f\n");
  auto before = withWeights(g);
  auto out = normalizeLayout(before);
  ASSERT_TRUE(out.ok()) << out.error().format();
  EXPECT_EQ(count(*out, OpKind::kGemm), 0);
  EXPECT_EQ(count(*out, OpKind::kTranspose), 0);
  EXPECT_EQ(count(*out, OpKind::kFlatten), 0);
  EXPECT_EQ(count(*out, OpKind::kReshape), 1);
  EXPECT_EQ(out->tensor(*out->findTensor("w.kn")).shape, (Shape{4, 5}));
  expectSameResults(before, *out);
}

TEST(Liveness, ReusesTheSpaceOfDeadActivations) {
  auto g = parse("input %x: fp32[256]\n%a: fp32[256] = Relu %a(%x) @0\n%b: fp32[256] = Exp %b(%a) @0\n"
                 "%c: fp32[256] = Tanh %c(%b) @0\n%d: fp32[256] = Sqrt %d(%c) @0\noutput %d\n");
  const auto live = analyzeLiveness(g);
  EXPECT_EQ(live.totalActivationBytes, 5 * 1024);
  EXPECT_EQ(live.peakLiveBytes, 2 * 1024);  // an op's input and output
  EXPECT_EQ(live.arenaBytes, 2 * 1024);     // first fit reuses the freed block
  EXPECT_EQ(live.first[*g.findTensor("b")], 1);
  EXPECT_EQ(live.last[*g.findTensor("b")], 2);
  EXPECT_EQ(live.last[*g.findTensor("d")], 4);  // a graph output lives to the end
}

TEST(PassManager, ParsesPipelinesAndNamesUnknownPasses) {
  auto p = parsePipeline("fold,cse,dce,layout,fuse,liveness");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(), 6u);
  EXPECT_TRUE(parsePipeline("")->empty());
  EXPECT_EQ(parsePipeline("cse,dcee").error().format(),
            "--passes: unknown pass 'dcee' (did you mean 'dce'?) (available: fold, cse, dce, layout, fuse, liveness)");
  std::vector<std::string> seen;
  auto g = parse("input %x: fp32[2]\n%i: fp32[2] = Identity %i(%x) @0\noutput %i\n");
  auto out = runPipeline(g, *parsePipeline("fold,dce"), [&](const std::string& pass, const ir::Graph&) { seen.push_back(pass); });
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"fold", "dce"}));
  EXPECT_TRUE(out->ops().empty());
}

// Every pass, and the whole pipeline, on real generated models: the interpreter's results agree.
class PassesKeepResults : public ::testing::TestWithParam<std::string> {};

TEST_P(PassesKeepResults, OnBuiltinModels) {
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> models = {
      {"mlp", {{"layers", "3"}, {"hidden", "16"}, {"batch", "2"}, {"dtype", "fp32"}}},
      {"gpt", {{"layers", "2"}, {"hidden", "16"}, {"heads", "2"}, {"vocab", "10"}, {"seq", "4"}, {"dtype", "fp32"}}},
      {"llama", {{"layers", "1"}, {"hidden", "16"}, {"heads", "4"}, {"kv_heads", "2"}, {"ffn", "24"}, {"vocab", "10"},
                 {"phase", "decode"}, {"context", "3"}, {"dtype", "fp32"}}},
      {"bert", {{"layers", "1"}, {"hidden", "8"}, {"heads", "2"}, {"vocab", "10"}, {"seq", "3"}, {"dtype", "fp32"}}},
  };
  for (const auto& [name, params] : models) {
    frontend::ModelSpec spec;
    spec.builtin = name;
    spec.params = params;
    auto built = frontend::buildBuiltinModel(spec);
    ASSERT_TRUE(built.ok()) << built.error().format();
    const ir::Graph g = withWeights(*built);
    auto pipeline = parsePipeline(GetParam());
    ASSERT_TRUE(pipeline.ok());
    auto out = runPipeline(g, *pipeline);
    ASSERT_TRUE(out.ok()) << name << ": " << out.error().format();
    SCOPED_TRACE(name);
    expectSameResults(g, *out);
  }
}

INSTANTIATE_TEST_SUITE_P(Pipelines, PassesKeepResults,
                         ::testing::Values("fold", "cse", "dce", "layout", "fuse", "liveness", "fold,cse,dce,layout,fuse"));

}  // namespace
}  // namespace tsp::passes
