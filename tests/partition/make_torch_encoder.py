#!/usr/bin/env python3
"""Exports torch models to ONNX for the sharding tests.

Usage: make_torch_encoder.py OUT_DIR. Writes OUT_DIR/encoder.onnx: nn.TransformerEncoder (fused
in_proj [3d, d]), 2 layers, d 32, 4 heads, FFN 64, batch 2, sequence 8, batch-first, exported with
gradients enabled (eval mode under no_grad takes the fused fast path, which has no ONNX export); and
OUT_DIR/einsum.onnx: projections written as torch.einsum on weights (Einsum nodes), d 32, 4 heads of 8;
OUT_DIR/cross_attention.onnx: nn.MultiheadAttention (d 32, 4 heads) with query, key and value three
different inputs, so that torch slices its fused in_proj_weight [3d, d] into q, k and v before the
projections (exported without constant folding, which would store the three parts as weights of their own).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from publish_dir import published  # noqa: E402

import torch


class CrossAttention(torch.nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(d, heads)

    def forward(self, q, k, v):
        return self.attention(q, k, v, need_weights=False)[0]


class EinsumBlock(torch.nn.Module):
    """Heads projected by 3-D weights ([d, heads, hd] in, [heads, hd, d] out), then an FFN whose
    weights are read transposed ([ffn, d] and [d, ffn], as nn.Linear stores them)."""

    def __init__(self, d=32, heads=4, ffn=64):
        super().__init__()
        self.w_in = torch.nn.Parameter(0.2 * torch.randn(d, heads, d // heads))
        self.w_out = torch.nn.Parameter(0.2 * torch.randn(heads, d // heads, d))
        self.w_up = torch.nn.Parameter(0.2 * torch.randn(ffn, d))
        self.w_down = torch.nn.Parameter(0.2 * torch.randn(d, ffn))

    def forward(self, x):
        h = torch.relu(torch.einsum("bsd,dnk->bsnk", x, self.w_in))
        x = x + torch.einsum("bsnk,nkd->bsd", h, self.w_out)
        f = torch.relu(torch.einsum("bsd,fd->bsf", x, self.w_up))
        return x + torch.einsum("bsf,df->bsd", f, self.w_down)


def main():
    with published(sys.argv[1]) as out:
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
        with torch.no_grad():  # the layers are copies of one: give each its own values (as trained ones are)
            for param in model.parameters():
                param.add_(0.1 * torch.randn_like(param))
        x = torch.randn(2, 8, 32)
        torch.onnx.export(model, (x,), os.path.join(out, "encoder.onnx"), opset_version=17, input_names=["x"],
                          output_names=["y"])
        torch.onnx.export(EinsumBlock().eval(), (x,), os.path.join(out, "einsum.onnx"), opset_version=17,
                          input_names=["x"], output_names=["y"])
        # Sequence-first [s, b, d], as nn.MultiheadAttention takes by default.
        torch.onnx.export(CrossAttention().eval(), (torch.randn(8, 2, 32), torch.randn(6, 2, 32), torch.randn(6, 2, 32)),
                          os.path.join(out, "cross_attention.onnx"), opset_version=17, input_names=["q", "k", "v"],
                          output_names=["y"], do_constant_folding=False)


if __name__ == "__main__":
    main()
