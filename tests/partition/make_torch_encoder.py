#!/usr/bin/env python3
"""Exports torch's nn.TransformerEncoder (fused in_proj [3d, d]) to ONNX for the sharding tests.

Usage: make_torch_encoder.py OUT_DIR. Writes OUT_DIR/encoder.onnx: 2 layers, d 32, 4 heads, FFN 64,
batch 2, sequence 8, batch-first, exported with gradients enabled (eval mode under no_grad takes
the fused fast path, which has no ONNX export).
"""
import os
import sys

import torch


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    with torch.no_grad():  # the layers are copies of one: give each its own values (as trained ones are)
        for param in model.parameters():
            param.add_(0.1 * torch.randn_like(param))
    x = torch.randn(2, 8, 32)
    torch.onnx.export(model, (x,), os.path.join(out, "encoder.onnx"), opset_version=17, input_names=["x"],
                      output_names=["y"])


if __name__ == "__main__":
    main()
