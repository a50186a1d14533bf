// Tests of the ONNX importer on models made by tests/compile/make_onnx_models.py at test time.
#include "compile/frontend/onnx_importer.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>

namespace tsp::frontend {
namespace {

class OnnxImport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::string(TSP_BINARY_DIR) + "/tests/compile/onnx_models";
    const std::string command = std::string(TSP_PYTHON) + " " + TSP_SOURCE_DIR + "/tests/compile/make_onnx_models.py " + dir_;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static std::string path(const std::string& name) { return dir_ + "/" + name; }
  static std::string dir_;
};
std::string OnnxImport::dir_;

// The interpreter's first output of `g` on the tensor in `input` equals the one in `output` (files
// the model script wrote beside the model) within `tolerance`, in the shape `shape` when given.
void expectComputes(const ir::Graph& g, const std::string& input, const std::string& output, double tolerance,
                    const std::vector<std::int64_t>& shape = {}) {
  auto x = readTensorProtoFile(input);
  auto expected = readTensorProtoFile(output);
  ASSERT_TRUE(x.ok() && expected.ok());
  auto y = ir::interpret(g, {*x});
  ASSERT_TRUE(y.ok()) << y.error().format();
  if (!shape.empty()) {
    EXPECT_EQ((*y)[0].shape, shape);
  }
  ASSERT_EQ((*y)[0].data.size(), expected->data.size());
  for (size_t i = 0; i < expected->data.size(); ++i) EXPECT_NEAR((*y)[0].data[i], expected->data[i], tolerance);
}

TEST_F(OnnxImport, ExternalWeightsAreReadForShapesOnlyWhenAsked) {
  ImportOptions options;
  options.overrides = {{"batch", 4}};
  options.loadWeights = false;
  options.precision = Precision{};  // fp16 storage
  auto g = importOnnx(path("mlp_external.onnx"), options);
  ASSERT_TRUE(g.ok()) << g.error().format();
  EXPECT_EQ(g->parameters(), 16 * 32 + 32 + 32 * 8);
  for (auto w : g->weights()) {
    EXPECT_EQ(g->tensor(w).data, nullptr);
    EXPECT_EQ(g->tensor(w).dtype, ir::DType::kF16);
  }
  EXPECT_EQ(g->tensor(g->outputs()[0]).shape, (std::vector<std::int64_t>{4, 8}));
  EXPECT_EQ(g->layerCount(), 3);  // /layers.0/ -> 1, /layers.1/ -> 2, stem 0 empty
}

TEST_F(OnnxImport, ExternalWeightsLoadAndComputeTheReference) {
  ImportOptions options;
  options.overrides = {{"batch", 4}};
  auto g = importOnnx(path("mlp_external.onnx"), options);
  ASSERT_TRUE(g.ok()) << g.error().format();
  expectComputes(*g, path("mlp_external_input.pb"), path("mlp_external_output.pb"), 1e-4);
}

// A tensor file read a block at a time gives the values read whole.
TEST_F(OnnxImport, TensorFileBlocksReadTheFilesValues) {
  const std::string file = path("mlp_external_output.pb");
  auto whole = readTensorProtoFile(file);
  auto blocks = readTensorProtoBlocks(file);
  ASSERT_TRUE(whole.ok() && blocks.ok());
  ASSERT_TRUE(blocks->read != nullptr);
  EXPECT_EQ(blocks->shape, whole->shape);
  ASSERT_EQ(blocks->count, static_cast<std::int64_t>(whole->data.size()));
  std::vector<double> read(whole->data.size());
  for (std::int64_t first = 0; first < blocks->count; first += 5)
    blocks->read(first, std::min<std::int64_t>(5, blocks->count - first), read.data() + first);
  EXPECT_EQ(read, whole->data);
}

// Opset 11's Softmax normalises the input coerced to a matrix at its axis: over the 12 values of
// each [3, 4] block of a [2, 3, 4] input at axis 1, which the importer builds as a Softmax over the
// last axis between two Reshapes.
TEST_F(OnnxImport, SoftmaxBeforeOpset13NormalisesTheFlattenedRows) {
  auto g = importOnnx(path("softmax_opset11.onnx"));
  ASSERT_TRUE(g.ok()) << g.error().format();
  ASSERT_EQ(g->ops().size(), 3u);
  EXPECT_EQ(g->op(1).kind, ir::OpKind::kSoftmax);
  EXPECT_EQ(g->tensor(g->op(1).inputs[0]).shape, (std::vector<std::int64_t>{2, 12}));
  expectComputes(*g, path("softmax_opset11_input.pb"), path("softmax_opset11_output.pb"), 1e-6, {2, 3, 4});
}

// A 1-D convolution and max-pool become the 2-D ones over [N, C, 1, L] between Reshapes (the
// weight initializer [6, 4, 3] as [6, 4, 1, 3]) and compute numpy's result.
TEST_F(OnnxImport, OneDimensionalWindowsAreTwoDimensionalOnesOfHeightOne) {
  auto g = importOnnx(path("conv_1d.onnx"));
  ASSERT_TRUE(g.ok()) << g.error().format();
  std::vector<ir::OpKind> kinds;
  for (const auto& op : g->ops()) kinds.push_back(op.kind);
  EXPECT_EQ(kinds, (std::vector<ir::OpKind>{ir::OpKind::kReshape, ir::OpKind::kConv, ir::OpKind::kReshape,
                                            ir::OpKind::kReshape, ir::OpKind::kMaxPool, ir::OpKind::kReshape}));
  EXPECT_EQ(g->tensor(*g->findTensor("w")).shape, (std::vector<std::int64_t>{6, 4, 1, 3}));
  expectComputes(*g, path("conv_1d_data/input_0.pb"), path("conv_1d_data/output_0.pb"), 1e-5, {1, 6, 7});
}

// An average pool whose divisor depends on the position (padding that does not count, ceil mode)
// is the pool over the kernel's size, with the padding extended to ceil mode's reach, times a
// constant of kernel size / divisor per position: numpy's result.
TEST_F(OnnxImport, AveragePoolDivisorsByPositionAreAConstantFactor) {
  auto g = importOnnx(path("avg_exclude.onnx"));
  ASSERT_TRUE(g.ok()) << g.error().format();
  ASSERT_EQ(g->ops().size(), 2u);
  EXPECT_EQ(g->op(0).kind, ir::OpKind::kAveragePool);
  EXPECT_EQ(g->op(0).intAttr("count_include_pad", 0), 1);
  EXPECT_EQ(g->op(0).intAttr("ceil_mode", 1), 0);
  EXPECT_EQ(g->op(1).kind, ir::OpKind::kMul);
  expectComputes(*g, path("avg_exclude_input.pb"), path("avg_exclude_output.pb"), 1e-5, {1, 2, 4, 4});
}

// mlp_external.onnx copied into folder without its weights file.
std::string copyWithoutWeights(const std::string& onnx, const std::string& folder) {
  std::filesystem::create_directories(folder);
  const std::string copy = folder + "/mlp_external.onnx";
  std::filesystem::copy_file(onnx, copy, std::filesystem::copy_options::overwrite_existing);
  return copy;
}

TEST_F(OnnxImport, ExternalFileMissingStillGivesShapes) {
  const auto copy = copyWithoutWeights(path("mlp_external.onnx"), path("copied"));
  ImportOptions options;
  options.overrides = {{"batch", 2}};
  options.loadWeights = false;
  auto g = importOnnx(copy, options);
  ASSERT_TRUE(g.ok()) << g.error().format();
  EXPECT_EQ(g->parameters(), 800);
  EXPECT_EQ(g->tensor(g->weights()[0]).data, nullptr);
}

// Values asked for and the external file absent: an error naming the initializer and the file,
// never values made up in its place.
TEST_F(OnnxImport, ExternalFileMissingIsAnErrorWhenValuesAreNeeded) {
  const auto copy = copyWithoutWeights(path("mlp_external.onnx"), path("copied_values"));
  ImportOptions options;
  options.overrides = {{"batch", 2}};
  auto g = importOnnx(copy, options);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, ExitCode::kModel);
  EXPECT_TRUE(std::regex_match(g.error().format(), std::regex(
      "node '[^']+': external data file '.*copied_values/mlp_external.weights' cannot be read; its values are needed to "
      "compute \\(timing runs do not read it\\)")))
      << g.error().format();
}

// Embedded initializers are not decoded when only shapes are asked for; with values they are.
TEST_F(OnnxImport, EmbeddedWeightsAreReadOnlyWhenAsked) {
  ImportOptions options;
  options.loadWeights = false;
  auto shapesOnly = importOnnx(path("resnet_block.onnx"), options);
  ASSERT_TRUE(shapesOnly.ok()) << shapesOnly.error().format();
  ASSERT_FALSE(shapesOnly->weights().empty());
  for (auto w : shapesOnly->weights()) EXPECT_EQ(shapesOnly->tensor(w).data, nullptr);
  auto loaded = importOnnx(path("resnet_block.onnx"));
  ASSERT_TRUE(loaded.ok()) << loaded.error().format();
  EXPECT_EQ(loaded->parameters(), shapesOnly->parameters());
  for (auto w : loaded->weights()) ASSERT_NE(loaded->tensor(w).data, nullptr);
}

TEST_F(OnnxImport, ShapeSubgraphsFoldToAStaticGraph) {
  ImportOptions options;
  options.overrides = {{"batch", 5}};
  auto g = importOnnx(path("shape_subgraph.onnx"), options);
  ASSERT_TRUE(g.ok()) << g.error().format();
  ASSERT_EQ(g->ops().size(), 2u);  // Shape, Gather, Unsqueeze, Concat, Range and Cast folded
  EXPECT_EQ(g->op(0).kind, ir::OpKind::kReshape);
  EXPECT_EQ(g->op(0).intsAttr("shape"), (std::vector<std::int64_t>{5, -1}));
  EXPECT_EQ(g->tensor(g->outputs()[0]).shape, (std::vector<std::int64_t>{5, 12}));
}

TEST_F(OnnxImport, LayersFollowBlockNames) {
  auto g = importOnnx(path("gpt_like.onnx"));
  ASSERT_TRUE(g.ok()) << g.error().format();
  std::vector<int> layers;
  for (const auto& op : g->ops()) layers.push_back(op.layer);
  EXPECT_EQ(layers, (std::vector<int>{1, 1, 2, 2, 3, 3, 3}));  // h.N -> N+1; the head follows the last block
}

TEST_F(OnnxImport, ErrorsNameTheNodeTheOpAndTheOpset) {
  EXPECT_EQ(importOnnx(path("unsupported_op.onnx")).error().format(),
            "node '" + path("unsupported_op.onnx") + "': opset 13: 1 unsupported op kind: Hardmax x 1 (first node "
            "'unsupported_op')");
  EXPECT_EQ(importOnnx(path("new_opset.onnx")).error().format(),
            "node '" + path("new_opset.onnx") + "': opset 22 is not supported (supported: 11 to 21; older ones are "
            "upgraded to 11)");
  EXPECT_TRUE(importOnnx(path("old_opset.onnx")).ok());  // opset 9, upgraded by ONNX's version converter
  EXPECT_EQ(importOnnx(path("corrupt.onnx")).error().format(),
            "node '" + path("corrupt.onnx") + "': not a valid ONNX model (the protobuf does not parse or has no graph)");
  EXPECT_EQ(importOnnx(path("nope.onnx")).error().code, ExitCode::kModel);
  const auto dynamic = importOnnx(path("mlp_external.onnx"));
  EXPECT_EQ(dynamic.error().format(),
            "node 'x': dimension 0 of input 'x' is dynamic ('batch') and has no value (used by node '/layers.0/fc', op "
            "MatMul, opset 13); bind it with --override batch=N");
  EXPECT_EQ(importOnnx(path("unnamed_dim.onnx")).error().code, ExitCode::kModel);
}

TEST_F(OnnxImport, InitializerShapesMustCountTheirElements) {
  const auto negative = importOnnx(path("negative_dim.onnx"));
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.error().format(), "node 'w': tensor shape [-1, 2] has a negative dimension");
  EXPECT_EQ(negative.error().code, ExitCode::kModel);
  // 2^32 x 2^32 elements: the product overflows 64 bits, and is past the largest tensor in any case.
  const auto huge = importOnnx(path("huge_dims.onnx"));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().format(),
            "node 'w': tensor shape [4294967296, 4294967296] holds more than 2^48 bytes, more than the SRAM of any "
            "cluster this build simulates");
  EXPECT_EQ(huge.error().code, ExitCode::kModel);
}

}  // namespace
}  // namespace tsp::frontend
