// The imported op forms (Clip, Pad, Einsum, Resize, ...) on models made by make_op_models.py: shapes
// and the reference interpreter's values against numpy, the one error listing every unsupported op
// kind, and the op table's completeness.
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "compile/frontend/onnx_importer.h"
#include "compile/ir/interpreter.h"
#include "compile/ir/op_table.h"
#include "compile/lower/lowering_internal.h"

namespace tsp::frontend {
namespace {

class OnnxOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::string(TSP_BINARY_DIR) + "/tests/compile/onnx_op_models";
    const std::string command = std::string(TSP_PYTHON) + " " + TSP_SOURCE_DIR + "/tests/compile/make_op_models.py " + dir_;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static std::string dir_;
};
std::string OnnxOps::dir_;

// Imports case `name`, runs the interpreter on its inputs and compares every output (shape and
// values) with numpy's.
void expectCaseMatches(const std::string& dir, const std::string& name) {
  SCOPED_TRACE(name);
  const std::string caseDir = dir + "/" + name;
  auto names = onnxInputNames(caseDir + "/model.onnx");
  ASSERT_TRUE(names.ok()) << names.error().format();
  std::vector<ir::Value> feeds;
  for (size_t i = 0; i < names->size(); ++i) {
    auto v = readTensorProtoFile(fmt::format("{}/test_data_set_0/input_{}.pb", caseDir, i));
    ASSERT_TRUE(v.ok()) << v.error().format();
    feeds.push_back(*v);
  }
  auto graph = importOnnx(caseDir + "/model.onnx");
  ASSERT_TRUE(graph.ok()) << graph.error().format();
  auto got = ir::interpret(*graph, feeds);
  ASSERT_TRUE(got.ok()) << got.error().format();
  ASSERT_EQ(got->size(), graph->outputs().size());
  for (size_t k = 0; k < got->size(); ++k) {
    auto want = readTensorProtoFile(fmt::format("{}/test_data_set_0/output_{}.pb", caseDir, k));
    ASSERT_TRUE(want.ok()) << want.error().format();
    EXPECT_EQ((*got)[k].shape, want->shape) << "output " << k;
    ASSERT_EQ((*got)[k].data.size(), want->data.size()) << "output " << k;
    for (size_t i = 0; i < want->data.size(); ++i)
      EXPECT_NEAR((*got)[k].data[i], want->data[i], 1e-5 + 1e-5 * std::abs(want->data[i]))
          << "output " << k << " element " << i;
  }
}

TEST_F(OnnxOps, ElementwiseOpsMatchNumpy) {
  expectCaseMatches(dir_, "unary");
  expectCaseMatches(dir_, "binary");
  expectCaseMatches(dir_, "mod_int");
}

TEST_F(OnnxOps, ClipWithInputBoundsAttributesOrOneBound) {
  expectCaseMatches(dir_, "clip_relu6");
  expectCaseMatches(dir_, "clip_max_only");
  expectCaseMatches(dir_, "clip_opset6");  // upgraded by ONNX's version converter
  auto g = importOnnx(dir_ + "/clip_relu6/model.onnx");
  ASSERT_TRUE(g.ok());
  std::vector<ir::OpKind> kinds;
  for (const auto& op : g->ops()) kinds.push_back(op.kind);
  EXPECT_EQ(kinds, (std::vector<ir::OpKind>{ir::OpKind::kMax, ir::OpKind::kMin}));
}

TEST_F(OnnxOps, PadConstantReflectEdgeNegativeAndAttributeForm) {
  for (const char* name : {"pad_constant", "pad_reflect", "pad_edge", "pad_negative", "pad_opset9"})
    expectCaseMatches(dir_, name);
}

TEST_F(OnnxOps, TileTriluCumSumExpandRange) {
  for (const char* name : {"tile", "trilu", "cumsum", "expand_range"}) expectCaseMatches(dir_, name);
}

TEST_F(OnnxOps, ScatterNDFoldedOrBuiltFromConcatAndGatherAndDropoutOfRatioZero) {
  expectCaseMatches(dir_, "scatternd");
  expectCaseMatches(dir_, "scatternd_mask");
  expectCaseMatches(dir_, "dropout_zero_ratio");
  auto g = importOnnx(dir_ + "/scatternd_input_indices/model.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, ExitCode::kModel);
  EXPECT_EQ(g.error().format(), "node 'at_run_time': ScatterND (opset 17): indices computed at run time are not "
                                "supported (they must be constants)");
}

TEST_F(OnnxOps, EinsumContractionsBecomeOneMatMul) {
  expectCaseMatches(dir_, "einsum");
  auto g = importOnnx(dir_ + "/einsum/model.onnx");
  ASSERT_TRUE(g.ok());
  int matmuls = 0;
  for (const auto& op : g->ops()) matmuls += op.kind == ir::OpKind::kMatMul;
  EXPECT_EQ(matmuls, 3);  // bmm, scores and outer; the transpose and the sum need none
}

TEST_F(OnnxOps, InstanceNormalizationAndResize) {
  for (const char* name : {"instancenorm", "resize_nearest", "resize_linear", "resize_cubic"})
    expectCaseMatches(dir_, name);
}

// GroupNormalization's scale and bias: per group at opset 18, per channel from 21.
TEST_F(OnnxOps, GroupNormalizationAtOpsets18And21) {
  for (const char* name : {"groupnorm18", "groupnorm21"}) expectCaseMatches(dir_, name);
}

TEST_F(OnnxOps, Opset18ReduceAxesInputAndSplitNumOutputs) { expectCaseMatches(dir_, "opset18_forms"); }

// Sizes from a Resize's scales or sizes are checked before any index list is built.
TEST_F(OnnxOps, ResizeRefusesSizesItCannotHold) {
  auto error = [&](const std::string& name) {
    auto g = importOnnx(dir_ + "/" + name + "/model.onnx");
    return g.ok() ? std::string("no error") : g.error().format();
  };
  EXPECT_EQ(error("resize_nan_scale"), "node 'nan_scale': Resize scale nan of axis 2 (size 3) is not a positive size factor");
  EXPECT_EQ(error("resize_empty_axis"), "node 'empty_axis': Resize of the empty axis 2 to size 5");
  EXPECT_EQ(error("resize_too_large"), "node 'too_large': Resize result [1, 2, 1099511627776, 1024] has a negative "
                                       "dimension or holds more than 2^48 bytes");
}

TEST_F(OnnxOps, ReductionsLogSoftmaxMeanAndGlobalMaxPool) { expectCaseMatches(dir_, "reductions"); }

TEST_F(OnnxOps, OneErrorListsEveryUnsupportedOpKind) {
  const std::string path = dir_ + "/unsupported_many/model.onnx";
  auto g = importOnnx(path);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, ExitCode::kModel);
  EXPECT_EQ(g.error().format(), "node '" + path + "': opset 17: 3 unsupported op kinds: Hardmax x 2 (first node "
                                "'first_hardmax'), Det x 1 (first node 'det'), Round x 1 (first node 'round')");
}

TEST(OpTable, EveryKindHasEveryEntryOrSaysWhyNot) {
  const auto& table = ir::opDefinitions();
  ASSERT_EQ(table.size(), static_cast<size_t>(ir::OpKind::kCount));
  for (size_t i = 0; i < table.size(); ++i) {
    const ir::OpDefinition& def = table[i];
    SCOPED_TRACE(def.name);
    EXPECT_EQ(static_cast<size_t>(def.kind), i) << "rows are in OpKind order";
    EXPECT_STREQ(def.name, ir::opKindName(def.kind));
    EXPECT_TRUE((def.onnx != nullptr) != (def.notImported != nullptr)) << "an import rule or why not";
    EXPECT_TRUE(def.gradient != (def.noGradient != nullptr)) << "a gradient rule or why not";
    EXPECT_TRUE((def.lowering == ir::LoweringFamily::kNone) == (def.noLowering != nullptr))
        << "a lowering family or why not";
    const bool elementwise = def.shape == ir::ShapeRule::kUnary || def.shape == ir::ShapeRule::kBinary ||
                             def.shape == ir::ShapeRule::kCompare;
    if (elementwise) {
      EXPECT_TRUE(def.shape == ir::ShapeRule::kUnary ? def.unary != nullptr : def.binary != nullptr)
          << "an elementwise kind's reference function";
      EXPECT_GE(def.flopsPerElement, 0);
      // Lowered elementwise kinds name the VXM function that computes them (Identity is a copy).
      if (def.lowering == ir::LoweringFamily::kElementwise) {
        EXPECT_NE(lower::detail::funcOf(def.kind), isa::VxmFunc::kNone);
        EXPECT_TRUE(lower::detail::computesValues(def.kind));
      }
    }
  }
  // Compositions are not also direct kinds, except Min and Max of other than two inputs.
  for (const auto& c : ir::onnxCompositions()) {
    SCOPED_TRACE(c.onnx);
    for (const auto& def : table)
      if (def.onnx) {
        EXPECT_STRNE(def.onnx, c.onnx);
      }
  }
}

}  // namespace
}  // namespace tsp::frontend
