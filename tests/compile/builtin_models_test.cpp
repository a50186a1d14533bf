// Tests of the built-in generators against published parameter and FLOP counts.
#include <gtest/gtest.h>

#include "compile/frontend/builtin_models.h"

namespace tsp::frontend {
namespace {

ir::Graph build(const std::string& name, std::map<std::string, std::string> params) {
  ModelSpec spec;
  spec.builtin = name;
  spec.params = std::move(params);
  auto g = buildBuiltinModel(spec);
  EXPECT_TRUE(g.ok()) << g.error().format();
  return g.ok() ? std::move(*g) : ir::Graph{};
}

// Megatron-LM (Narayanan et al. 2021): P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)).
double megatronParameters(double l, double h, double V, double s) {
  return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
}

TEST(BuiltinGpt, Gpt3HasMegatronsParameterCount) {
  const auto g = build("gpt", {{"layers", "96"}, {"hidden", "12288"}, {"heads", "96"}, {"vocab", "50257"},
                               {"seq", "2048"}});
  // Megatron's formula leaves out the final LayerNorm (2h); GPT-3 is "175B".
  const std::int64_t l = 96, h = 12288, V = 50257, s = 2048;
  EXPECT_EQ(g.parameters(), 12 * l * h * h + 13 * l * h + (V + s) * h + 2 * h);
  EXPECT_NEAR(static_cast<double>(g.parameters()), megatronParameters(96, 12288, 50257, 2048) + 2 * 12288, 1e-3 * 1e3);
  EXPECT_NEAR(static_cast<double>(g.parameters()) / 1e9, 175.0, 0.5);
  EXPECT_EQ(g.layerCount(), 98);  // embedding, 96 blocks, head
}

TEST(BuiltinGpt, FlopsFollowMegatronsFormula) {
  // F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per training iteration with recomputation: four
  // passes over the blocks (forward, recompute, backward x2) and three over the logits.
  const double B = 2, s = 256, l = 4, h = 512, V = 1000;
  const auto g = build("gpt", {{"layers", "4"}, {"hidden", "512"}, {"heads", "8"}, {"vocab", "1000"}, {"seq", "256"},
                               {"batch", "2"}});
  std::int64_t logits = 0;
  for (const auto& op : g.ops())
    if (op.name == "logits") logits = ir::opFlops(g, op);
  EXPECT_EQ(static_cast<double>(logits), 2 * B * s * h * V);
  const double blocks = static_cast<double>(g.macFlops() - logits);
  EXPECT_EQ(blocks, 24 * B * s * l * h * h * (1 + s / (6 * h)));
  EXPECT_EQ(4 * blocks + 3 * static_cast<double>(logits), 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)));
}

TEST(BuiltinLlama, Llama2SevenAndSeventyBillion) {
  // Published (Touvron et al. 2023, model cards): 6,738,415,616 and 68,976,648,192 parameters.
  EXPECT_EQ(build("llama", {{"seq", "128"}}).parameters(), 6738415616);
  EXPECT_EQ(build("llama", {{"layers", "80"}, {"hidden", "8192"}, {"heads", "64"}, {"kv_heads", "8"},
                            {"ffn", "28672"}, {"seq", "128"}})
                .parameters(),
            68976648192);
}

TEST(BuiltinLlama, DecodeReadsTheKvCacheAndMakesOneToken) {
  const std::map<std::string, std::string> p = {{"layers", "2"}, {"hidden", "256"}, {"heads", "8"}, {"kv_heads", "2"},
                                                {"ffn", "512"}, {"vocab", "1000"}, {"batch", "3"}};
  auto decodeParams = p;
  decodeParams["phase"] = "decode";
  decodeParams["context"] = "100";
  const auto decode = build("llama", decodeParams);
  const auto prefill = build("llama", p);
  EXPECT_EQ(decode.parameters(), prefill.parameters());
  // K and V per layer: batch x kv_heads x context x head_dim, fp16.
  EXPECT_EQ(decode.stateBytes(), 2 * 2 * 3 * 2 * 100 * 32 * 2);
  EXPECT_EQ(prefill.stateBytes(), 0);
  const auto logits = decode.tensor(decode.outputs().back());
  EXPECT_EQ(logits.shape, (std::vector<std::int64_t>{3, 1, 1000}));
  // Attention of one token over 101 positions: QK^T and PV are 2 * 2*B*heads*101*head_dim each.
  std::int64_t attention = 0;
  for (const auto& op : decode.ops())
    if (op.name.size() > 3 && (op.name.substr(op.name.size() - 3) == ".qk" || op.name.substr(op.name.size() - 3) == ".pv"))
      attention += ir::opFlops(decode, op);
  EXPECT_EQ(attention, 2 * 2 * (2 * 3 * 8 * 101 * 32));
}

TEST(BuiltinGpt, BadParametersAreModelErrors) {
  ModelSpec spec;
  spec.builtin = "gpt";
  spec.params = {{"hidden", "100"}, {"heads", "12"}};
  EXPECT_EQ(buildBuiltinModel(spec).error().format(), "node 'builtin:gpt': hidden 100 is not a multiple of heads 12");
  spec.params = {{"phase", "train"}};
  EXPECT_EQ(buildBuiltinModel(spec).error().format(),
            "node 'builtin:gpt': parameter 'phase' is 'train', expected one of: prefill, decode");
  spec.params = {{"context", "5"}};
  EXPECT_EQ(buildBuiltinModel(spec).error().format(),
            "node 'builtin:gpt': parameter 'context' applies to phase=decode only");
}

TEST(BuiltinBert, BaseAndLargeParameters) {
  // HuggingFace bert-base-uncased / bert-large-uncased with the pooler.
  EXPECT_EQ(build("bert", {}).parameters(), 109482240);
  EXPECT_EQ(build("bert", {{"layers", "24"}, {"hidden", "1024"}, {"heads", "16"}}).parameters(), 335141888);
}

TEST(BuiltinResnet50, ParametersAndMacs) {
  const auto g = build("resnet50", {});
  // torchvision resnet50: 25,557,032 parameters, 4.09 GMACs at 224x224.
  EXPECT_EQ(g.parameters(), 25557032);
  EXPECT_NEAR(static_cast<double>(g.macFlops()) / 2 / 1e9, 4.09, 0.02);
  EXPECT_EQ(g.layerCount(), 18);
  EXPECT_EQ(g.tensor(g.outputs()[0]).shape, (std::vector<std::int64_t>{1, 1000}));
}

TEST(Builtin, UnknownModelListsTheChoices) {
  ModelSpec spec;
  spec.builtin = "gpt5";
  EXPECT_EQ(buildBuiltinModel(spec).error().format(),
            "node 'builtin:gpt5': unknown built-in model (available: mlp, gpt, llama, bert, resnet50, collective)");
}

}  // namespace
}  // namespace tsp::frontend
