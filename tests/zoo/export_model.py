#!/usr/bin/env python3
"""Exports one zoo model with torch.onnx.export (opset 17) into OUT/NAME-SIZE/: model.onnx, the inputs and
PyTorch's float32 outputs as test_data_set_0/input_N.pb and output_N.pb, and info.json (parameter counts).
An export whose info.json names the same sources and torch version is kept (the cache).

Usage: export_model.py OUT NAME SIZE   (SIZE: full or small)"""
import hashlib
import json
import os
import sys
import time

import onnx
import onnx.numpy_helper
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def source_stamp():
    h = hashlib.sha256(torch.__version__.encode())
    for f in ("models.py", "export_model.py"):
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f), "rb") as src:
            h.update(src.read())
    return h.hexdigest()


def export(out, name, size):
    folder = os.path.join(out, f"{name}-{size}")
    info_path = os.path.join(folder, "info.json")
    stamp = source_stamp()
    if os.path.exists(info_path):
        with open(info_path) as f:
            if json.load(f).get("stamp") == stamp:
                return folder
    os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
    torch.manual_seed(0)
    model, inputs, input_names, output_names = models.ZOO[name](size)
    model.eval()
    # Values off their initial constants, as a trained model's are (and torch.onnx.export merges
    # initializers of equal values: LayerNorm's ones and zeros would share one).
    with torch.no_grad():
        for key, t in model.state_dict().items():
            if t.is_floating_point():
                if key.endswith("running_var"):
                    t.mul_(1.0 + 0.1 * torch.rand_like(t))
                else:
                    t.add_(0.01 * torch.randn_like(t))
    started = time.time()
    # PRESERVE keeps BatchNormalization as the model has it (EVAL would fold it into the convolutions),
    # and no constant folding keeps the tied GPT-2 head one initializer: the ONNX file's initializers are
    # then the module's state_dict.
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(model, inputs, path, opset_version=17, input_names=input_names, output_names=output_names,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    seconds = time.time() - started
    with torch.no_grad():
        outputs = model(*inputs)
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    for i, x in enumerate(inputs):
        onnx.save_tensor(onnx.numpy_helper.from_array(x.numpy(), input_names[i]),
                         os.path.join(folder, "test_data_set_0", f"input_{i}.pb"))
    for i, y in enumerate(outputs):
        onnx.save_tensor(onnx.numpy_helper.from_array(y.float().numpy(), output_names[i]),
                         os.path.join(folder, "test_data_set_0", f"output_{i}.pb"))
    state = model.state_dict()
    info = {
        "stamp": stamp,
        "torch_parameters": sum(p.numel() for p in model.parameters()),
        "torch_float_buffers": sum(b.numel() for k, b in state.items()
                                   if b.is_floating_point() and not any(k == n for n, _ in model.named_parameters())),
        "export_seconds": round(seconds, 2),
    }
    with open(info_path, "w") as f:
        json.dump(info, f, indent=1)
    return folder


if __name__ == "__main__":
    print(export(sys.argv[1], sys.argv[2], sys.argv[3]))
