"""The zoo's models: torchvision classifiers, torch.nn transformer modules, and plain-PyTorch GPT-2
(Hugging Face layout), Llama (prefill and decode) and BERT written here.

Each entry builds a model and its example inputs at two sizes: "full" (CNNs at 224x224, transformers at
their full width and reduced depth: what tsp-sim compiles and simulates in timing mode) and "small" (a
seeded reduced version that tsp-sim computes in functional mode and compares with PyTorch's outputs)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------------
# GPT-2 in the Hugging Face layout: Conv1D (addmm, weight [in, out]), fused c_attn QKV, a boolean
# causal-mask buffer, tanh GELU, tied LM head.

class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x):
        y = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return y.view(*x.size()[:-1], -1)


class GPT2Attention(nn.Module):
    def __init__(self, d, heads, positions, width):
        super().__init__()
        self.d, self.heads = d, heads
        mask = torch.tril(torch.ones((positions, positions), dtype=torch.bool)).view(1, 1, positions, positions)
        self.register_buffer("bias", mask, persistent=False)
        self.c_attn = Conv1D(3 * d, width)
        self.c_proj = Conv1D(width, d)

    def split_heads(self, x):
        b, t, _ = x.size()
        return x.view(b, t, self.heads, self.d // self.heads).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.d, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
        q_len, k_len = q.size(-2), k.size(-2)
        causal = self.bias[:, :, k_len - q_len:k_len, :k_len]
        w = torch.where(causal, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
        w = F.softmax(w, dim=-1)
        a = torch.matmul(w, v)
        b, h, t, hd = a.size()
        a = a.permute(0, 2, 1, 3).contiguous().view(b, t, h * hd)
        return self.c_proj(a)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Block(nn.Module):
    def __init__(self, d, heads, positions, width):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width, eps=1e-5)
        self.attn = GPT2Attention(d, heads, positions, width)
        self.ln_2 = nn.LayerNorm(width, eps=1e-5)
        self.c_fc = Conv1D(4 * d, width)
        self.c_proj = Conv1D(width, 4 * d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(gelu_new(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    """width: the residual stream's width when it differs from the attention's d (a test of the
    importer's costs only; GPT-2 has width = d)."""

    def __init__(self, vocab=50257, positions=1024, d=768, layers=12, heads=12, width=None):
        super().__init__()
        width = width or d
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(positions, width)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)
        self.h = nn.ModuleList([GPT2Block(d, heads, positions, width) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width, eps=1e-5)

    def forward(self, input_ids):
        positions = torch.arange(0, input_ids.size(-1), dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return F.linear(x, self.wte.weight)  # the head tied to the token embedding


# ---------------------------------------------------------------------------------------------------
# Llama: RMSNorm, rotary embeddings (rotate_half), grouped-query attention with repeat_kv, SwiGLU,
# untied head. Prefill takes token ids; decode takes one token and the past keys and values of every
# layer, and returns the logits and the present keys and values.

class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, n_rep):
    b, kv_heads, t, hd = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(b, kv_heads, n_rep, t, hd)
    return x.reshape(b, kv_heads * n_rep, t, hd)


class LlamaAttention(nn.Module):
    def __init__(self, d, heads, kv_heads, head_dim):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(d, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, d, bias=False)

    def forward(self, x, cos, sin, past=None):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        present = (k, v)
        k, v = repeat_kv(k, self.heads // self.kv_heads), repeat_kv(v, self.heads // self.kv_heads)
        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd)
        if past is None:  # prefill: causal
            mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
            w = w + mask
        w = F.softmax(w.float(), dim=-1).to(q.dtype)
        a = torch.matmul(w, v).transpose(1, 2).reshape(b, t, self.heads * self.hd)
        return self.o_proj(a), present


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn, head_dim):
        super().__init__()
        self.input_layernorm = RMSNorm(d)
        self.self_attn = LlamaAttention(d, heads, kv_heads, head_dim)
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj = nn.Linear(d, ffn, bias=False)
        self.up_proj = nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin, past=None):
        a, present = self.self_attn(self.input_layernorm(x), cos, sin, past)
        x = x + a
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)), present


class Llama(nn.Module):
    def __init__(self, vocab=32000, d=2048, layers=22, heads=32, kv_heads=4, ffn=5632, positions=2048,
                 past=0, head_dim=None):
        super().__init__()
        self.past = past
        hd = head_dim or d // heads
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaBlock(d, heads, kv_heads, ffn, hd) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(positions).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None], persistent=False)

    def forward(self, input_ids, *past):
        t = input_ids.shape[1]
        cos = self.cos_cached[:, :, self.past:self.past + t]
        sin = self.sin_cached[:, :, self.past:self.past + t]
        x = self.embed_tokens(input_ids)
        presents = []
        for i, layer in enumerate(self.layers):
            x, present = layer(x, cos, sin, (past[2 * i], past[2 * i + 1]) if past else None)
            presents += present
        logits = self.lm_head(self.norm(x))
        return (logits, *presents) if past else logits


# ---------------------------------------------------------------------------------------------------
# BERT: word, position and token-type embeddings, post-LayerNorm encoder layers with an additive
# attention mask from the padding mask, erf GELU, and the tanh pooler on the first token.

class BertLayer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.attention_output = nn.Linear(d, d)
        self.attention_norm = nn.LayerNorm(d, eps=1e-12)
        self.intermediate = nn.Linear(d, ffn)
        self.output = nn.Linear(ffn, d)
        self.output_norm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, mask):
        b, t, d = x.shape
        hd = d // self.heads

        def heads(y):
            return y.view(b, t, self.heads, hd).permute(0, 2, 1, 3)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd) + mask
        a = torch.matmul(F.softmax(w, dim=-1), v).permute(0, 2, 1, 3).reshape(b, t, d)
        x = self.attention_norm(x + self.attention_output(a))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self, vocab=30522, d=768, layers=12, heads=12, ffn=3072, positions=512, types=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(positions, d)
        self.token_type_embeddings = nn.Embedding(types, d)
        self.embedding_norm = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(d, heads, ffn) for _ in range(layers)])
        self.pooler = nn.Linear(d, d)

    def forward(self, input_ids, token_type_ids, attention_mask):
        t = input_ids.shape[1]
        positions = torch.arange(t, dtype=torch.long).unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + \
            self.token_type_embeddings(token_type_ids)
        x = self.embedding_norm(x)
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler(x[:, 0]))


# ---------------------------------------------------------------------------------------------------
# torch.nn's own transformer modules (exported with gradients enabled: their fused inference path has
# no ONNX form).

class TransformerDecoderLM(nn.Module):
    """nn.TransformerDecoder over a target with a causal mask and an encoder memory."""

    def __init__(self, d, heads, ffn, layers):
        super().__init__()
        layer = nn.TransformerDecoderLayer(d, heads, ffn, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, layers)

    def forward(self, tgt, memory):
        t = tgt.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        return self.decoder(tgt, memory, tgt_mask=mask)


class MultiheadSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.attention = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, query, key, value):
        out, _ = self.attention(query, key, value, need_weights=False)
        return out


# ---------------------------------------------------------------------------------------------------
# The zoo. build(size) returns (module, example inputs, input names, output names).

def _tokens(vocab, batch, seq):
    return torch.randint(0, vocab, (batch, seq), dtype=torch.long)


def _torchvision(name, small, small_side, full=None):
    """A torchvision classifier at 224x224: the named one, or full() when given; small() builds the reduced one."""
    import torchvision

    def build(size):
        if size == "full":
            model = full(torchvision.models) if full else getattr(torchvision.models, name)()
            return model, (torch.randn(1, 3, 224, 224),), ["image"], ["logits"]
        return small(torchvision.models), (torch.randn(1, 3, small_side, small_side),), ["image"], ["logits"]
    return build


def _group_norm(channels):
    return nn.GroupNorm(32, channels)


def _gpt2(size):
    cfg = dict(d=768, heads=12, layers=2, seq=128) if size == "full" else dict(d=64, heads=4, layers=2, seq=16)
    vocab = 50257 if size == "full" else 512
    model = GPT2(vocab=vocab, positions=1024 if size == "full" else 64, d=cfg["d"], layers=cfg["layers"],
                 heads=cfg["heads"])
    return model, (_tokens(vocab, 1, cfg["seq"]),), ["input_ids"], ["logits"]


def _llama_config(size):
    if size == "full":  # TinyLlama's width (2048, 32 heads, 4 KV heads, SwiGLU 5632), 1 layer, 8k vocabulary
        return dict(vocab=8192, d=2048, layers=1, heads=32, kv_heads=4, ffn=5632, positions=256), 128
    return dict(vocab=256, d=64, layers=2, heads=4, kv_heads=2, ffn=176, positions=64), 16


def _llama_prefill(size):
    cfg, seq = _llama_config(size)
    return Llama(**cfg), (_tokens(cfg["vocab"], 1, seq),), ["input_ids"], ["logits"]


def _llama_decode(size):
    cfg, past = _llama_config(size)
    model = Llama(**cfg, past=past)
    hd = cfg["d"] // cfg["heads"]
    pasts, names, outs = [], [], []
    for i in range(cfg["layers"]):
        for kind in ("key", "value"):
            pasts.append(torch.randn(1, cfg["kv_heads"], past, hd))
            names.append(f"past_{kind}.{i}")
            outs.append(f"present_{kind}.{i}")
    return model, (_tokens(cfg["vocab"], 1, 1), *pasts), ["input_ids"] + names, ["logits"] + outs


def _bert(size):
    cfg = dict(d=768, heads=12, ffn=3072, layers=2, seq=128, vocab=30522) if size == "full" else \
        dict(d=64, heads=4, ffn=256, layers=2, seq=16, vocab=512)
    model = Bert(vocab=cfg["vocab"], d=cfg["d"], layers=cfg["layers"], heads=cfg["heads"], ffn=cfg["ffn"])
    seq = cfg["seq"]
    mask = torch.ones(1, seq, dtype=torch.long)
    mask[:, seq - seq // 4:] = 0
    types = torch.zeros(1, seq, dtype=torch.long)
    types[:, seq // 2:] = 1
    return model, (_tokens(cfg["vocab"], 1, seq), types, mask), ["input_ids", "token_type_ids", "attention_mask"], \
        ["last_hidden_state", "pooler_output"]


def _encoder(size):
    d, heads, ffn, layers, seq = (512, 8, 2048, 2, 128) if size == "full" else (64, 4, 128, 2, 16)
    layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, layers), (torch.randn(1, seq, d),), ["src"], ["out"]


def _decoder(size):
    d, heads, ffn, layers, seq = (512, 8, 2048, 2, 128) if size == "full" else (64, 4, 128, 2, 16)
    return TransformerDecoderLM(d, heads, ffn, layers), (torch.randn(1, seq, d), torch.randn(1, seq, d)), \
        ["tgt", "memory"], ["out"]


def _mha(size):
    d, heads, seq = (1024, 16, 128) if size == "full" else (64, 4, 16)
    x = torch.randn(1, seq, d)
    return MultiheadSelfAttention(d, heads), (x, torch.randn(1, seq, d), torch.randn(1, seq, d)), \
        ["query", "key", "value"], ["out"]


ZOO = {
    "resnet50": _torchvision("resnet50", lambda tv: tv.resnet.ResNet(tv.resnet.Bottleneck, [1, 1, 1, 1], num_classes=10), 32),
    "mobilenet_v2": _torchvision("mobilenet_v2", lambda tv: tv.mobilenet_v2(num_classes=10, width_mult=0.25), 32),
    "mobilenet_v3_large": _torchvision("mobilenet_v3_large",
                                       lambda tv: tv.mobilenet_v3_large(num_classes=10, width_mult=0.25), 32),
    "efficientnet_b0": _torchvision("efficientnet_b0", lambda tv: tv.efficientnet_b0(num_classes=10), 32),
    "regnet_y_400mf": _torchvision("regnet_y_400mf", lambda tv: tv.regnet_y_400mf(num_classes=10), 32),
    # ResNet with GroupNorm (32 groups) in place of BatchNorm, as in Wu and He's Group Normalization.
    "resnet18_groupnorm": _torchvision("resnet18", lambda tv: tv.resnet.ResNet(
        tv.resnet.BasicBlock, [1, 1, 1, 1], num_classes=10, norm_layer=_group_norm), 32,
        full=lambda tv: tv.resnet18(norm_layer=_group_norm)),
    "convnext_tiny": _torchvision("convnext_tiny", lambda tv: tv.convnext.ConvNeXt(
        [tv.convnext.CNBlockConfig(32, 64, 1), tv.convnext.CNBlockConfig(64, None, 1)], num_classes=10), 32),
    "densenet121": _torchvision("densenet121", lambda tv: tv.densenet.DenseNet(
        growth_rate=8, block_config=(2, 2), num_init_features=16, num_classes=10), 32),
    # Without the auxiliary classifier, which eval mode does not run (the export would leave out its parameters).
    "inception_v3": _torchvision("inception_v3",
                                 lambda tv: tv.inception_v3(num_classes=10, aux_logits=False, init_weights=True), 75,
                                 lambda tv: tv.inception_v3(aux_logits=False, init_weights=True)),
    "vit_b_16": _torchvision("vit_b_16", lambda tv: tv.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10), 32,
        lambda tv: tv.VisionTransformer(image_size=224, patch_size=16, num_layers=2, num_heads=12, hidden_dim=768,
                                        mlp_dim=3072)),  # ViT-B/16 with 2 of its 12 layers
    "swin_t": _torchvision("swin_t", lambda tv: tv.SwinTransformer(
        patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4], num_classes=10), 32),
    "transformer_encoder": _encoder,
    "transformer_decoder": _decoder,
    "multihead_attention": _mha,
    "gpt2": _gpt2,
    "llama_prefill": _llama_prefill,
    "llama_decode": _llama_decode,
    "bert": _bert,
}
