// Sharding a real torch export: nn.TransformerEncoder's fused in_proj split per part over tp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "compile/frontend/onnx_importer.h"
#include "compile/ir/interpreter.h"
#include "partition/plan_shards.h"
#include "partition/sharding_spmd.h"
#include "test_values.h"

namespace tsp::partition {
namespace {

class TorchSharding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::string(TSP_BINARY_DIR) + "/tests/partition/torch_models";
    const std::string command =
        std::string(TSP_PYTHON) + " " + TSP_SOURCE_DIR + "/tests/partition/make_torch_encoder.py " + dir_;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static std::string dir_;
};
std::string TorchSharding::dir_;

// Megatron's annotations on `mesh`, propagated.
Expected<ShardingPlan> megatron(const ir::Graph& g, const Mesh& mesh) {
  auto annotations = planAnnotations(g, TensorSplit::kMegatron, mesh);
  if (!annotations) return annotations.error();
  return propagateShardings(g, mesh, *annotations);
}

// The splits of the fused [3d, d] (or [d, 3d]) weights, d = 32, sorted.
std::vector<std::string> fusedSplits(const ir::Graph& g, const ShardingPlan& plan, const Mesh& mesh) {
  std::vector<std::string> texts;
  for (ir::TensorId w : g.weights())
    if (g.tensor(w).shape == std::vector<std::int64_t>{32, 96} || g.tensor(w).shape == std::vector<std::int64_t>{96, 32})
      texts.push_back(plan.tensors[w].text(mesh));
  std::sort(texts.begin(), texts.end());
  return texts;
}

// Nothing gathered or exchanged between ranks, and `allReduces` all-reduces.
void expectOnlyAllReduces(const ShardingPlan& plan, int allReduces) {
  EXPECT_EQ(plan.count(ReshardKind::kAllGather), 0);
  EXPECT_EQ(plan.count(ReshardKind::kAllToAll), 0);
  EXPECT_EQ(plan.count(ReshardKind::kAllReduce), allReduces);
}

// The TP group's device graphs compute what the unsharded graph does on `inputs`.
void expectSameAsUnsharded(const ir::Graph& g, const DeviceGraphs& devices, const std::vector<ir::Value>& inputs) {
  auto want = ir::interpret(g, inputs);
  auto got = interpretSharded(devices, inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << (want.ok() ? got.error().format() : want.error().format());
  ASSERT_EQ((*want)[0].data.size(), (*got)[0].data.size());
  for (size_t e = 0; e < (*want)[0].data.size(); ++e)
    EXPECT_NEAR((*want)[0].data[e], (*got)[0].data[e], 1e-4 + 1e-4 * std::abs((*want)[0].data[e]));
}

// torch's encoder projects q, k and v with one [3d, d] weight, takes it apart with Slices and views
// the heads as [s, b * heads, hd]. Megatron splits each of q, k and v over tp: every rank holds
// whole heads, nothing is gathered, each layer all-reduces twice (attention output, FFN), and the
// TP group computes what the unsharded graph does.
TEST_F(TorchSharding, EncoderFusedInProjectionSplitsByHeads) {
  auto g = frontend::importOnnx(dir_ + "/encoder.onnx");
  ASSERT_TRUE(g.ok()) << g.error().format();
  ir::Value x{ir::DType::kF32, {2, 8, 32}, *testing::values(2 * 8 * 32, 3)};
  for (int tp : {2, 4}) {
    SCOPED_TRACE(tp);
    const Mesh mesh = tensorMesh(TensorSplit::kMegatron, tp);
    auto propagated = megatron(*g, mesh);
    ASSERT_TRUE(propagated.ok()) << propagated.error().format();
    EXPECT_EQ(fusedSplits(*g, *propagated, mesh), (std::vector<std::string>{"[-,3xtp]", "[-,3xtp]"}));
    expectOnlyAllReduces(*propagated, 4);
    auto devices = shardGraph(*g, *propagated);
    ASSERT_TRUE(devices.ok()) << devices.error().format();
    expectSameAsUnsharded(*g, *devices, {x});
  }
}

// nn.MultiheadAttention with query, key and value three inputs cuts its fused [3d, d] in_proj_weight
// (and its bias) into q, k and v with Slices before the projections, each then read through a Transpose.
// Megatron splits the whole weight in those three parts over tp, so every rank holds whole heads of
// each and 1/tp of every weight: the output projection's all-reduce is the only collective.
TEST_F(TorchSharding, CrossAttentionSlicedInProjectionSplitsByHeads) {
  // As a timing run imports it (a functional import folds the Slices of the weight into constants),
  // with values of its own in every weight.
  frontend::ImportOptions timing;
  timing.loadWeights = false;
  auto g = frontend::importOnnx(dir_ + "/cross_attention.onnx", timing);
  ASSERT_TRUE(g.ok()) << g.error().format();
  std::uint64_t seed = 11;
  for (ir::TensorId w : g->weights()) g->setData(w, testing::values(g->tensor(w).elements(), seed++));
  ir::Value q{ir::DType::kF32, {8, 2, 32}, *testing::values(8 * 2 * 32, 7)};
  ir::Value k{ir::DType::kF32, {6, 2, 32}, *testing::values(6 * 2 * 32, 8)};
  ir::Value v{ir::DType::kF32, {6, 2, 32}, *testing::values(6 * 2 * 32, 9)};
  Bytes whole = 0;
  for (ir::TensorId w : g->weights()) whole += g->tensor(w).bytes();
  for (int tp : {2, 4}) {
    SCOPED_TRACE(tp);
    const Mesh mesh = tensorMesh(TensorSplit::kMegatron, tp);
    auto propagated = megatron(*g, mesh);
    ASSERT_TRUE(propagated.ok()) << propagated.error().format();
    EXPECT_EQ(fusedSplits(*g, *propagated, mesh), std::vector<std::string>{"[3xtp,-]"});
    expectOnlyAllReduces(*propagated, 1);
    auto devices = shardGraph(*g, *propagated);
    ASSERT_TRUE(devices.ok()) << devices.error().format();
    Bytes held = 0;
    for (ir::TensorId w : devices->graphs[0].weights()) held += devices->graphs[0].tensor(w).bytes();
    EXPECT_LT(held, whole / tp + whole / 8);  // the output projection's bias stays whole
    expectSameAsUnsharded(*g, *devices, {q, k, v});
  }
}

// torch.einsum on weights imports as MatMuls reading each weight through a Reshape ([d, heads, hd]
// into [d, heads hd]) or a Transpose (nn.Linear's [out, in]), as a timing run sees the model (a
// functional import folds those into constants). Megatron splits every weight as it splits the
// equivalent MatMul's: the column-parallel ones on their output dim (the heads of the 3-D one),
// their partners on the contracted dim, each rank holding 1/tp of every weight; one all-reduce per
// pair, nothing gathered, and the TP group computes what the unsharded graph does (the weights'
// values taken from the functional import).
TEST_F(TorchSharding, EinsumWeightsSplitLikeMatMuls) {
  frontend::ImportOptions timing;
  timing.loadWeights = false;
  auto g = frontend::importOnnx(dir_ + "/einsum.onnx", timing);
  ASSERT_TRUE(g.ok()) << g.error().format();
  auto withValues = frontend::importOnnx(dir_ + "/einsum.onnx");
  ASSERT_TRUE(withValues.ok()) << withValues.error().format();
  Bytes whole = 0;
  for (ir::TensorId w : g->weights()) {
    whole += g->tensor(w).bytes();
    const auto found = withValues->findTensor(g->tensor(w).name);
    ASSERT_TRUE(found.has_value()) << g->tensor(w).name;
    g->setData(w, withValues->tensor(*found).data);
  }
  EXPECT_EQ(g->weights().size(), 4u);
  ir::Value x{ir::DType::kF32, {2, 8, 32}, *testing::values(2 * 8 * 32, 5)};
  for (int tp : {2, 4}) {
    SCOPED_TRACE(tp);
    const Mesh mesh = tensorMesh(TensorSplit::kMegatron, tp);
    auto propagated = megatron(*g, mesh);
    ASSERT_TRUE(propagated.ok()) << propagated.error().format();
    for (ir::TensorId w : g->weights()) {
      const auto& s = propagated->tensors[w];
      EXPECT_TRUE(std::any_of(s.dimAxis.begin(), s.dimAxis.end(), [](int a) { return a >= 0; })) << g->tensor(w).name;
    }
    expectOnlyAllReduces(*propagated, 2);
    auto devices = shardGraph(*g, *propagated);
    ASSERT_TRUE(devices.ok()) << devices.error().format();
    Bytes held = 0;
    for (ir::TensorId w : devices->graphs[0].weights()) held += devices->graphs[0].tensor(w).bytes();
    EXPECT_EQ(held, whole / tp);
    expectSameAsUnsharded(*g, *devices, {x});
  }
}

}  // namespace
}  // namespace tsp::partition
