// Built-in model generators: MLP, decoder LMs (GPT and Llama style, prefill and decode), a BERT
// encoder and ResNet-50, built as IR graphs without model files.
#include "compile/frontend/builtin_models.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tsp::frontend {

namespace {

using ir::OpKind;
using ir::TensorId;
using Shape = std::vector<std::int64_t>;

// Reads the parameters of spec, checking each is known and in range.
class ParamReader {
 public:
  explicit ParamReader(const ModelSpec& spec) : spec_(spec) {}
  Expected<std::int64_t> integer(const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
    known_.push_back(key);
    auto found = spec_.params.find(key);
    if (found == spec_.params.end()) {
      auto bound = spec_.overrides.find(key);
      if (bound == spec_.overrides.end()) return fallback;
      return check(key, bound->second, lo, hi);
    }
    std::int64_t value = 0;
    const auto& text = found->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
      return spec_.paramError(key, fmt::format("parameter '{}' must be an integer, got '{}'", key, text));
    return check(key, value, lo, hi);
  }
  Expected<std::string> text(const std::string& key, const std::string& fallback,
                             const std::vector<std::string>& choices) {
    known_.push_back(key);
    auto found = spec_.params.find(key);
    const std::string value = found == spec_.params.end() ? fallback : found->second;
    if (std::find(choices.begin(), choices.end(), value) == choices.end())
      return spec_.paramError(key, fmt::format("parameter '{}' is '{}', expected one of: {}", key, value,
                                               fmt::join(choices, ", ")));
    return value;
  }
  Status checkUnknown() const {
    for (const auto& [key, value] : spec_.params)
      if (std::find(known_.begin(), known_.end(), key) == known_.end())
        return spec_.paramError(key, fmt::format("unknown parameter '{}'", key));
    return {};
  }

 private:
  Expected<std::int64_t> check(const std::string& key, std::int64_t value, std::int64_t lo, std::int64_t hi) const {
    if (value < lo || value > hi)
      return spec_.paramError(key, fmt::format("parameter '{}' is {}, out of range [{}, {}]", key, value, lo, hi));
    return value;
  }

  const ModelSpec& spec_;
  std::vector<std::string> known_;
};

// Adds ops to a graph, keeping the first error so that generators read as straight-line code.
class Builder {
 public:
  explicit Builder(ir::Graph& graph) : g_(graph) {}
  TensorId op(OpKind kind, const std::string& name, std::vector<TensorId> inputs, ir::Attrs attrs = {}) {
    if (failed_) return 0;
    auto out = g_.addOp(kind, name, std::move(inputs), std::move(attrs), layer);
    if (!out) {
      failed_ = true;
      error_ = out.error();
      return 0;
    }
    return *out;
  }
  std::vector<TensorId> split(const std::string& name, TensorId x, std::int64_t axis, Shape sizes) {
    if (failed_) return std::vector<TensorId>(sizes.size(), 0);
    auto outs = g_.addMultiOp(OpKind::kSplit, name, {x}, {{"axis", axis}, {"split", sizes}}, layer);
    if (!outs) {
      failed_ = true;
      error_ = outs.error();
      return std::vector<TensorId>(sizes.size(), 0);
    }
    return *outs;
  }
  TensorId weight(const std::string& name, Shape shape) { return g_.addWeight(name, std::move(shape), weightType); }
  TensorId scalar(const std::string& name, double value) {
    return g_.addConstant(name, {}, activationType, std::vector<double>{value});
  }
  TensorId constant(const std::string& name, Shape shape, std::vector<double> values, ir::DType dtype) {
    return g_.addConstant(name, std::move(shape), dtype, std::move(values));
  }
  Status status() const { return failed_ ? Status(error_) : Status(); }

  int layer = 0;
  ir::DType weightType = ir::DType::kF16;
  ir::DType activationType = ir::DType::kF16;

 private:
  ir::Graph& g_;
  bool failed_ = false;
  Diagnostic error_;
};

// Storage dtypes: the `dtype` parameter when given (weights and activations alike), else model.precision.
Status readDType(ParamReader& params, const ModelSpec& spec, Builder& b) {
  auto dtype = params.text("dtype", "", {"", "fp32", "fp16", "bf16", "int8"});
  if (!dtype) return dtype.error();
  b.weightType = spec.precision.weights;
  b.activationType = spec.precision.activations;
  if (!dtype->empty()) b.weightType = b.activationType = *ir::parseDType(*dtype);
  return {};
}

// A multi-layer perceptron: layer i is MatMul (+ bias Add) + Relu, the last without activation.
Expected<ir::Graph> buildMlp(const ModelSpec& spec) {
  ParamReader params(spec);
  auto layers = params.integer("layers", 2, 1, 4096);
  if (!layers) return layers.error();
  auto hidden = params.integer("hidden", 1024, 1, 1 << 20);
  if (!hidden) return hidden.error();
  auto input = params.integer("input", *hidden, 1, 1 << 20);
  if (!input) return input.error();
  auto output = params.integer("output", *hidden, 1, 1 << 20);
  if (!output) return output.error();
  auto batch = params.integer("batch", spec.overrides.count("batch") ? spec.overrides.at("batch") : 8, 1, 1 << 20);
  if (!batch) return batch.error();
  ir::Graph graph;
  Builder types(graph);
  if (auto s = readDType(params, spec, types); !s) return s.error();
  if (auto s = params.checkUnknown(); !s) return s.error();

  const ir::DType act = types.activationType;
  ir::TensorId x = graph.addInput("x", {*batch, *input}, act);
  std::int64_t width = *input;
  for (int i = 0; i < *layers; ++i) {
    const std::int64_t next = i + 1 == *layers ? *output : *hidden;
    const auto w = graph.addWeight(fmt::format("w{}", i), {width, next}, types.weightType);
    const auto b = graph.addWeight(fmt::format("b{}", i), {next}, types.weightType);
    auto y = graph.addOp(ir::OpKind::kMatMul, fmt::format("fc{}", i), {x, w}, i);
    if (!y) return y.error();
    auto z = graph.addOp(ir::OpKind::kAdd, fmt::format("bias{}", i), {*y, b}, i);
    if (!z) return z.error();
    x = *z;
    if (i + 1 < *layers) {
      auto r = graph.addOp(ir::OpKind::kRelu, fmt::format("relu{}", i), {x}, i);
      if (!r) return r.error();
      x = *r;
    }
    width = next;
  }
  graph.markOutput(x);
  return graph;
}


// A decoder-only LM, GPT style (learned positions, LayerNorm, GELU MLP, biases, tied embeddings) or
// Llama style (RMSNorm, SwiGLU, no biases, separate LM head; rotary embeddings are left out: they
// hold no parameters and are elementwise work next to the matmuls). Layer 0 is the embedding,
// layers 1..L the blocks, L+1 the final norm and the logits.
Expected<ir::Graph> buildDecoder(const ModelSpec& spec, bool llama) {
  ParamReader params(spec);
  auto layers = params.integer("layers", llama ? 32 : 12, 1, 4096);
  if (!layers) return layers.error();
  auto hidden = params.integer("hidden", llama ? 4096 : 768, 1, 1 << 20);
  if (!hidden) return hidden.error();
  auto heads = params.integer("heads", llama ? 32 : 12, 1, 4096);
  if (!heads) return heads.error();
  auto kvHeads = params.integer("kv_heads", *heads, 1, *heads);
  if (!kvHeads) return kvHeads.error();
  auto ffn = params.integer("ffn", llama ? 11008 : 4 * *hidden, 1, 1 << 22);
  if (!ffn) return ffn.error();
  auto vocab = params.integer("vocab", llama ? 32000 : 50257, 1, 1 << 24);
  if (!vocab) return vocab.error();
  auto seq = params.integer("seq", llama ? 4096 : 1024, 1, 1 << 22);
  if (!seq) return seq.error();
  auto batch = params.integer("batch", 1, 1, 1 << 20);
  if (!batch) return batch.error();
  auto phase = params.text("phase", "prefill", {"prefill", "decode"});
  if (!phase) return phase.error();
  auto context = params.integer("context", *phase == "decode" ? *seq - 1 : 0, 0, 1 << 22);
  if (!context) return context.error();
  ir::Graph graph;
  Builder b(graph);
  if (auto s = readDType(params, spec, b); !s) return s.error();
  if (auto s = params.checkUnknown(); !s) return s.error();
  if (*hidden % *heads != 0)
    return spec.paramError("hidden", fmt::format("hidden {} is not a multiple of heads {}", *hidden, *heads));
  if (*heads % *kvHeads != 0)
    return spec.paramError("heads", fmt::format("heads {} is not a multiple of kv_heads {}", *heads, *kvHeads));
  if (*phase == "prefill" && spec.params.count("context"))
    return spec.paramError("context", "parameter 'context' applies to phase=decode only");
  if (*phase == "decode" && *context < 1)
    return spec.paramError("context", "phase=decode needs context >= 1 (the KV-cache length)");

  const bool decode = *phase == "decode";
  const std::int64_t B = *batch, H = *hidden, nh = *heads, nkv = *kvHeads, d = H / nh, group = nh / nkv;
  const std::int64_t S = decode ? 1 : *seq;     // tokens processed now
  const std::int64_t past = decode ? *context : 0;
  const std::int64_t T = past + S;              // tokens attended to
  const std::int64_t positions = std::max(*seq, T);

  const TensorId tokens = graph.addInput("tokens", {B, S}, ir::DType::kI32);
  const TensorId wte = b.weight("wte", {*vocab, H});
  TensorId x = b.op(OpKind::kGather, "embed", {wte, tokens}, {{"axis", std::int64_t{0}}});
  if (!llama) {
    std::vector<double> ids(static_cast<size_t>(S));
    for (std::int64_t i = 0; i < S; ++i) ids[i] = static_cast<double>(past + i);
    const TensorId pos = b.constant("positions", {S}, ids, ir::DType::kI32);
    const TensorId wpe = b.weight("wpe", {positions, H});
    x = b.op(OpKind::kAdd, "embed_add", {x, b.op(OpKind::kGather, "embed_pos", {wpe, pos}, {{"axis", std::int64_t{0}}})});
  }
  // The causal mask of the prompt; one new token sees the whole cache and needs none.
  TensorId mask = -1;
  if (!decode && S > 1) {
    std::vector<double> values(static_cast<size_t>(S * T), 0.0);
    for (std::int64_t i = 0; i < S; ++i)
      for (std::int64_t j = past + i + 1; j < T; ++j) values[i * T + j] = -1e4;
    mask = b.constant("causal_mask", {S, T}, values, b.activationType);
  }
  const TensorId scale = b.scalar("attn_scale", 1.0 / std::sqrt(static_cast<double>(d)));
  const TensorId eps = llama ? b.scalar("rms_eps", 1e-5) : -1;

  auto norm = [&](const std::string& p, TensorId in) {
    const TensorId gamma = b.weight(p + ".weight", {H});
    if (!llama)
      return b.op(OpKind::kLayerNormalization, p, {in, gamma, b.weight(p + ".bias", {H})},
                  {{"axis", std::int64_t{-1}}, {"epsilon", 1e-5}});
    // RMSNorm: x / sqrt(mean(x^2) + eps) * gamma.
    const TensorId sq = b.op(OpKind::kMul, p + ".square", {in, in});
    const TensorId ms = b.op(OpKind::kReduceMean, p + ".mean", {sq}, {{"axes", Shape{-1}}, {"keepdims", std::int64_t{1}}});
    const TensorId rms = b.op(OpKind::kSqrt, p + ".sqrt", {b.op(OpKind::kAdd, p + ".eps", {ms, eps})});
    return b.op(OpKind::kMul, p + ".scale", {b.op(OpKind::kDiv, p + ".div", {in, rms}), gamma});
  };
  auto linear = [&](const std::string& p, TensorId in, std::int64_t k, std::int64_t n) {
    const TensorId y = b.op(OpKind::kMatMul, p, {in, b.weight(p + ".weight", {k, n})});
    return llama ? y : b.op(OpKind::kAdd, p + ".bias_add", {y, b.weight(p + ".bias", {n})});
  };

  for (std::int64_t l = 0; l < *layers; ++l) {
    b.layer = static_cast<int>(l + 1);
    const std::string p = fmt::format("layers.{}", l);
    const TensorId h1 = norm(p + ".norm1", x);
    // Separate query, key and value projections (Megatron's split by heads): a column split of each
    // weight over tp gives every TP rank whole heads (the Reshapes' head dims), so each rank computes
    // its heads' attention with no collective.
    // q: [B,S,nkv,group,d] -> [B,nkv,group,S,d]; k, v: [B,S,nkv,d] -> [B,nkv,S,d].
    const TensorId q = b.op(OpKind::kTranspose, p + ".q_t",
                            {b.op(OpKind::kReshape, p + ".q_r", {linear(p + ".query", h1, H, nh * d)},
                                  {{"shape", Shape{B, S, nkv, group, d}}})},
                            {{"perm", Shape{0, 2, 3, 1, 4}}});
    TensorId k = b.op(OpKind::kTranspose, p + ".k_t",
                      {b.op(OpKind::kReshape, p + ".k_r", {linear(p + ".key", h1, H, nkv * d)}, {{"shape", Shape{B, S, nkv, d}}})},
                      {{"perm", Shape{0, 2, 1, 3}}});
    TensorId v = b.op(OpKind::kTranspose, p + ".v_t",
                      {b.op(OpKind::kReshape, p + ".v_r", {linear(p + ".value", h1, H, nkv * d)}, {{"shape", Shape{B, S, nkv, d}}})},
                      {{"perm", Shape{0, 2, 1, 3}}});
    // This step's keys and values are what gets appended to the KV cache.
    graph.markOutput(k);
    graph.markOutput(v);
    if (decode) {
      const TensorId pastK = graph.addState(p + ".past_k", {B, nkv, past, d}, b.activationType);
      const TensorId pastV = graph.addState(p + ".past_v", {B, nkv, past, d}, b.activationType);
      k = b.op(OpKind::kConcat, p + ".k_cat", {pastK, k}, {{"axis", std::int64_t{2}}});
      v = b.op(OpKind::kConcat, p + ".v_cat", {pastV, v}, {{"axis", std::int64_t{2}}});
    }
    const TensorId kT = b.op(OpKind::kUnsqueeze, p + ".k_u",
                             {b.op(OpKind::kTranspose, p + ".k_tt", {k}, {{"perm", Shape{0, 1, 3, 2}}})},
                             {{"axes", Shape{2}}});
    const TensorId vU = b.op(OpKind::kUnsqueeze, p + ".v_u", {v}, {{"axes", Shape{2}}});
    TensorId scores = b.op(OpKind::kMul, p + ".scale", {b.op(OpKind::kMatMul, p + ".qk", {q, kT}), scale});
    if (mask >= 0) scores = b.op(OpKind::kAdd, p + ".mask", {scores, mask});
    const TensorId probs = b.op(OpKind::kSoftmax, p + ".softmax", {scores}, {{"axis", std::int64_t{-1}}});
    const TensorId ctx = b.op(OpKind::kMatMul, p + ".pv", {probs, vU});
    const TensorId merged = b.op(OpKind::kReshape, p + ".ctx_r",
                                 {b.op(OpKind::kTranspose, p + ".ctx_t", {ctx}, {{"perm", Shape{0, 3, 1, 2, 4}}})},
                                 {{"shape", Shape{B, S, H}}});
    x = b.op(OpKind::kAdd, p + ".residual1", {x, linear(p + ".attn_out", merged, H, H)});
    const TensorId h2 = norm(p + ".norm2", x);
    TensorId mlp;
    if (llama) {
      const TensorId gate = linear(p + ".gate", h2, H, *ffn);
      const TensorId silu = b.op(OpKind::kMul, p + ".silu", {gate, b.op(OpKind::kSigmoid, p + ".gate_sigmoid", {gate})});
      mlp = b.op(OpKind::kMul, p + ".swiglu", {silu, linear(p + ".up", h2, H, *ffn)});
    } else {
      mlp = b.op(OpKind::kGelu, p + ".gelu", {linear(p + ".fc1", h2, H, *ffn)});
    }
    x = b.op(OpKind::kAdd, p + ".residual2", {x, linear(p + ".fc2", mlp, *ffn, H)});
  }
  b.layer = static_cast<int>(*layers + 1);
  const TensorId final = norm("final_norm", x);
  const TensorId head = llama ? b.weight("lm_head.weight", {H, *vocab})
                              : b.op(OpKind::kTranspose, "wte_t", {wte}, {{"perm", Shape{1, 0}}});
  const TensorId logits = b.op(OpKind::kMatMul, "logits", {final, head});
  if (auto s = b.status(); !s) return s.error();
  graph.markOutput(logits);
  return graph;
}

// A BERT encoder (post-LayerNorm blocks, GELU MLP, word + position + token-type embeddings and the
// tanh pooler), as in Devlin et al.; layer 0 is the embedding, L+1 the pooler.
Expected<ir::Graph> buildBert(const ModelSpec& spec) {
  ParamReader params(spec);
  auto layers = params.integer("layers", 12, 1, 4096);
  if (!layers) return layers.error();
  auto hidden = params.integer("hidden", 768, 1, 1 << 20);
  if (!hidden) return hidden.error();
  auto heads = params.integer("heads", 12, 1, 4096);
  if (!heads) return heads.error();
  auto ffn = params.integer("ffn", 4 * *hidden, 1, 1 << 22);
  if (!ffn) return ffn.error();
  auto vocab = params.integer("vocab", 30522, 1, 1 << 24);
  if (!vocab) return vocab.error();
  auto seq = params.integer("seq", 128, 1, 1 << 20);
  if (!seq) return seq.error();
  auto maxPositions = params.integer("max_positions", std::max<std::int64_t>(512, *seq), *seq, 1 << 22);
  if (!maxPositions) return maxPositions.error();
  auto batch = params.integer("batch", 1, 1, 1 << 20);
  if (!batch) return batch.error();
  ir::Graph graph;
  Builder b(graph);
  if (auto s = readDType(params, spec, b); !s) return s.error();
  if (auto s = params.checkUnknown(); !s) return s.error();
  if (*hidden % *heads != 0)
    return spec.paramError("hidden", fmt::format("hidden {} is not a multiple of heads {}", *hidden, *heads));
  const std::int64_t B = *batch, S = *seq, H = *hidden, nh = *heads, d = H / nh;

  const TensorId tokens = graph.addInput("tokens", {B, S}, ir::DType::kI32);
  const TensorId types = graph.addInput("token_types", {B, S}, ir::DType::kI32);
  std::vector<double> ids(static_cast<size_t>(S));
  for (std::int64_t i = 0; i < S; ++i) ids[i] = static_cast<double>(i);
  const TensorId pos = b.constant("positions", {S}, ids, ir::DType::kI32);
  auto gather = [&](const std::string& n, TensorId table, TensorId index) {
    return b.op(OpKind::kGather, n, {table, index}, {{"axis", std::int64_t{0}}});
  };
  auto layerNorm = [&](const std::string& p, TensorId in) {
    return b.op(OpKind::kLayerNormalization, p, {in, b.weight(p + ".weight", {H}), b.weight(p + ".bias", {H})},
                {{"axis", std::int64_t{-1}}, {"epsilon", 1e-12}});
  };
  auto linear = [&](const std::string& p, TensorId in, std::int64_t k, std::int64_t n) {
    const TensorId y = b.op(OpKind::kMatMul, p, {in, b.weight(p + ".weight", {k, n})});
    return b.op(OpKind::kAdd, p + ".bias_add", {y, b.weight(p + ".bias", {n})});
  };
  TensorId x = b.op(OpKind::kAdd, "embed_sum",
                    {b.op(OpKind::kAdd, "embed_add", {gather("embed_word", b.weight("word_embeddings", {*vocab, H}), tokens),
                                                      gather("embed_pos", b.weight("position_embeddings", {*maxPositions, H}), pos)}),
                     gather("embed_type", b.weight("token_type_embeddings", {2, H}), types)});
  x = layerNorm("embed_norm", x);
  const TensorId scale = b.scalar("attn_scale", 1.0 / std::sqrt(static_cast<double>(d)));
  for (std::int64_t l = 0; l < *layers; ++l) {
    b.layer = static_cast<int>(l + 1);
    const std::string p = fmt::format("layers.{}", l);
    auto heads4 = [&](const std::string& n, TensorId t, Shape perm) {
      return b.op(OpKind::kTranspose, n + "_t", {b.op(OpKind::kReshape, n + "_r", {t}, {{"shape", Shape{B, S, nh, d}}})},
                  {{"perm", perm}});
    };
    const TensorId q = heads4(p + ".q", linear(p + ".query", x, H, H), {0, 2, 1, 3});
    const TensorId kT = heads4(p + ".k", linear(p + ".key", x, H, H), {0, 2, 3, 1});
    const TensorId v = heads4(p + ".v", linear(p + ".value", x, H, H), {0, 2, 1, 3});
    const TensorId scores = b.op(OpKind::kMul, p + ".scale", {b.op(OpKind::kMatMul, p + ".qk", {q, kT}), scale});
    const TensorId probs = b.op(OpKind::kSoftmax, p + ".softmax", {scores}, {{"axis", std::int64_t{-1}}});
    const TensorId ctx = b.op(OpKind::kReshape, p + ".ctx_r",
                              {b.op(OpKind::kTranspose, p + ".ctx_t", {b.op(OpKind::kMatMul, p + ".pv", {probs, v})},
                                    {{"perm", Shape{0, 2, 1, 3}}})},
                              {{"shape", Shape{B, S, H}}});
    x = layerNorm(p + ".attn_norm", b.op(OpKind::kAdd, p + ".residual1", {x, linear(p + ".attn_out", ctx, H, H)}));
    const TensorId mlp = linear(p + ".fc2", b.op(OpKind::kGelu, p + ".gelu", {linear(p + ".fc1", x, H, *ffn)}), *ffn, H);
    x = layerNorm(p + ".mlp_norm", b.op(OpKind::kAdd, p + ".residual2", {x, mlp}));
  }
  b.layer = static_cast<int>(*layers + 1);
  const TensorId first = b.op(OpKind::kReshape, "pooler_first_r",
                              {b.op(OpKind::kSlice, "pooler_first", {x},
                                    {{"starts", Shape{0}}, {"ends", Shape{1}}, {"axes", Shape{1}}})},
                              {{"shape", Shape{B, H}}});
  const TensorId pooled = b.op(OpKind::kTanh, "pooler_tanh", {linear("pooler", first, H, H)});
  if (auto s = b.status(); !s) return s.error();
  graph.markOutput(x);
  graph.markOutput(pooled);
  return graph;
}

// ResNet-50 v1.5 (torchvision: the stride on the 3x3 conv of a bottleneck). Batch-norm scale and
// shift are parameters; running mean and variance are constants (buffers). Layer 0 is the stem,
// one layer per bottleneck block, then the classifier.
Expected<ir::Graph> buildResnet50(const ModelSpec& spec) {
  ParamReader params(spec);
  auto batch = params.integer("batch", 1, 1, 1 << 20);
  if (!batch) return batch.error();
  auto image = params.integer("image", 224, 32, 4096);
  if (!image) return image.error();
  auto classes = params.integer("classes", 1000, 1, 1 << 20);
  if (!classes) return classes.error();
  ir::Graph graph;
  Builder b(graph);
  if (auto s = readDType(params, spec, b); !s) return s.error();
  if (auto s = params.checkUnknown(); !s) return s.error();

  auto convBn = [&](const std::string& p, TensorId in, std::int64_t cin, std::int64_t cout, std::int64_t k,
                    std::int64_t stride, bool relu) {
    const std::int64_t pad = k / 2;
    const TensorId y = b.op(OpKind::kConv, p + ".conv", {in, b.weight(p + ".conv.weight", {cout, cin, k, k})},
                            {{"kernel_shape", Shape{k, k}}, {"strides", Shape{stride, stride}},
                             {"pads", Shape{pad, pad, pad, pad}}});
    const TensorId mean = b.constant(p + ".bn.running_mean", {cout}, std::vector<double>(cout, 0.0), b.weightType);
    const TensorId var = b.constant(p + ".bn.running_var", {cout}, std::vector<double>(cout, 1.0), b.weightType);
    const TensorId bn = b.op(OpKind::kBatchNormalization, p + ".bn",
                             {y, b.weight(p + ".bn.weight", {cout}), b.weight(p + ".bn.bias", {cout}), mean, var},
                             {{"epsilon", 1e-5}});
    return relu ? b.op(OpKind::kRelu, p + ".relu", {bn}) : bn;
  };
  TensorId x = graph.addInput("images", {*batch, 3, *image, *image}, b.activationType);
  x = convBn("stem", x, 3, 64, 7, 2, true);
  x = b.op(OpKind::kMaxPool, "stem.pool", {x},
           {{"kernel_shape", Shape{3, 3}}, {"strides", Shape{2, 2}}, {"pads", Shape{1, 1, 1, 1}}});
  const std::int64_t blocks[4] = {3, 4, 6, 3};
  std::int64_t cin = 64;
  int layer = 0;
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t width = 64 << stage, cout = 4 * width;
    for (std::int64_t i = 0; i < blocks[stage]; ++i) {
      b.layer = ++layer;
      const std::string p = fmt::format("layer{}.{}", stage + 1, i);
      const std::int64_t stride = i == 0 && stage > 0 ? 2 : 1;
      TensorId y = convBn(p + ".a", x, cin, width, 1, 1, true);
      y = convBn(p + ".b", y, width, width, 3, stride, true);
      y = convBn(p + ".c", y, width, cout, 1, 1, false);
      const TensorId shortcut = i == 0 ? convBn(p + ".downsample", x, cin, cout, 1, stride, false) : x;
      x = b.op(OpKind::kRelu, p + ".relu", {b.op(OpKind::kAdd, p + ".add", {y, shortcut})});
      cin = cout;
    }
  }
  b.layer = layer + 1;
  x = b.op(OpKind::kFlatten, "flatten", {b.op(OpKind::kGlobalAveragePool, "avgpool", {x})}, {{"axis", std::int64_t{1}}});
  x = b.op(OpKind::kAdd, "fc.bias_add", {b.op(OpKind::kMatMul, "fc", {x, b.weight("fc.weight", {cin, *classes})}),
                                         b.weight("fc.bias", {*classes})});
  if (auto s = b.status(); !s) return s.error();
  graph.markOutput(x);
  return graph;
}

// One collective over the cluster (nccl-tests style): `bytes` per chip as [vectors, 320] int8, and one
// op that names the collective; `chips` = 0 means every chip of the cluster.
Expected<ir::Graph> buildCollective(const ModelSpec& spec) {
  ParamReader params(spec);
  auto op = params.text("op", "allreduce", {"allreduce", "allgather", "reducescatter", "alltoall", "broadcast"});
  if (!op) return op.error();
  auto bytes = params.integer("bytes", 1 << 20, 1, std::int64_t{1} << 36);
  if (!bytes) return bytes.error();
  auto chips = params.integer("chips", 0, 0, 1 << 20);
  if (!chips) return chips.error();
  auto algorithm = params.text("algorithm", "auto",
                               {"auto", "ring", "tree", "halving-doubling", "hierarchical", "direct", "one-shot", "multi-ring"});
  if (!algorithm) return algorithm.error();
  if (auto s = params.checkUnknown(); !s) return s.error();
  if (*chips == 1) return spec.paramError("chips", "parameter 'chips' must be 0 (all) or at least 2");
  ir::Graph graph;
  const auto x = graph.addInput("x", {(*bytes + 319) / 320, 320}, ir::DType::kI8);
  ir::Attrs attrs{{"collective", *op}, {"bytes", *bytes}, {"chips", *chips}, {"algorithm", *algorithm}};
  if (*op == "broadcast") {
    attrs["peer"] = std::int64_t{-1};  // every other chip
    auto sent = graph.addMultiOp(OpKind::kSend, "broadcast", {x}, attrs, 0);
    if (!sent) return sent.error();
    return graph;
  }
  attrs["group"] = std::int64_t{1};  // shapes are one chip's; the cluster decides the group
  const OpKind kind = *op == "allreduce" ? OpKind::kAllReduce : *op == "allgather" ? OpKind::kAllGather
                      : *op == "reducescatter" ? OpKind::kReduceScatter : OpKind::kAllToAll;
  auto y = graph.addOp(kind, *op, {x}, attrs, 0);
  if (!y) return y.error();
  graph.markOutput(*y);
  return graph;
}

}  // namespace

const std::vector<std::string>& builtinModelNames() {
  static const std::vector<std::string> kNames = {"mlp", "gpt", "llama", "bert", "resnet50", "collective"};
  return kNames;
}

Expected<ir::Graph> buildBuiltinModel(const ModelSpec& spec) {
  if (spec.builtin == "mlp") return buildMlp(spec);
  if (spec.builtin == "gpt") return buildDecoder(spec, false);
  if (spec.builtin == "llama") return buildDecoder(spec, true);
  if (spec.builtin == "bert") return buildBert(spec);
  if (spec.builtin == "resnet50") return buildResnet50(spec);
  if (spec.builtin == "collective") return buildCollective(spec);
  return modelError("builtin:" + spec.builtin,
                    fmt::format("unknown built-in model (available: {})", fmt::join(builtinModelNames(), ", ")));
}

std::int64_t samplesPerIteration(const ModelSpec&, const ir::Graph& graph) {
  // The leading dimension of the first input is the batch.
  if (graph.inputs().empty() || graph.tensor(graph.inputs()[0]).shape.empty()) return 1;
  return graph.tensor(graph.inputs()[0]).shape[0];
}

}  // namespace tsp::frontend
