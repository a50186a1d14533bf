#!/usr/bin/env python3
"""Exports a GPT in the Hugging Face GPT-2 layout (tests/zoo/models.py: Conv1D through addmm, fused
c_attn QKV, learned positions) to ONNX for the sharding tests, with the LM head tied to the token
embedding (GPT-2) or untied (a separate lm_head [hidden, vocab], as GPT-2-style models of 1.3B with
their own head have).

Usage: make_torch_gpt.py OUT.onnx LAYERS HIDDEN HEADS VOCAB POSITIONS tied|untied

The batch and sequence dims are symbolic ('batch', 'seq': `tsp-sim --override batch=B,seq=S` binds
them), so the export traces one short sequence whatever the run's size. An export whose file exists
is kept (the build tree is the cache)."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zoo"))
import models  # noqa: E402


class GPT(models.GPT2):
    def __init__(self, vocab, positions, d, layers, heads, tied):
        super().__init__(vocab=vocab, positions=positions, d=d, layers=layers, heads=heads)
        self.lm_head = None if tied else nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids):
        positions = torch.arange(0, input_ids.size(-1), dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return F.linear(x, self.wte.weight) if self.lm_head is None else self.lm_head(x)


def main():
    out = sys.argv[1]
    layers, hidden, heads, vocab, positions = (int(a) for a in sys.argv[2:7])
    tied = sys.argv[7] == "tied"
    if os.path.exists(out):
        return
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    torch.manual_seed(0)
    model = GPT(vocab, positions, hidden, layers, heads, tied).eval()
    with torch.no_grad():  # every layer its own values (torch's export merges equal initializers)
        for param in model.parameters():
            param.add_(0.01 * torch.randn_like(param))
    ids = torch.randint(0, vocab, (1, 8), dtype=torch.long)
    tmp = out + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, (ids,), tmp, opset_version=17, input_names=["input_ids"], output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                          do_constant_folding=False)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
