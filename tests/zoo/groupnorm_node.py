#!/usr/bin/env python3
"""ONNX's GroupNormalization node on the chip, checked against PyTorch (torch.nn.functional.group_norm).

torch.onnx.export (torch 1.13) writes opset 17 at most and exports nn.GroupNorm as Reshape ->
InstanceNormalization -> Reshape -> Mul -> Add (zoo.resnet18_groupnorm runs that form); the node itself
(opsets 18 to 21) comes from other exporters. This builds models with the node by hand, at opset 18 (scale
and bias per group) and 21 (per channel), on a graph input (row-major) and after a Conv (a channels-last
map), takes PyTorch's float32 outputs for seeded inputs as the expected values, and runs each
functionally on one chip at FP16 (tests/zoo/one_chip_fp16.yaml) with --inputs/--expect: every case must
match within the functional tolerance, and must fail (exit 6) against PyTorch's output for another group
count, so that a wrong grouping cannot pass.

Usage: groupnorm_node.py TSP_SIM WORKDIR   (the models are written to WORKDIR, in the build tree)"""
import os
import re
import subprocess
import sys

import onnx
import onnx.helper as helper
import onnx.numpy_helper
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "one_chip_fp16.yaml")
MISMATCH_EXIT = 6  # README's exit codes: functional outputs differ from the expected values


def tensor(name, t):
    return onnx.numpy_helper.from_array(t.detach().numpy(), name)


def write_case(folder, opset, groups, conv, expected_groups):
    """A model x -> [Conv ->] GroupNormalization(groups) -> y and PyTorch's y for `expected_groups`."""
    torch.manual_seed(opset * 100 + groups + (7 if conv else 0))
    channels, eps = 64, 1e-5
    x = torch.randn(2, 16 if conv else channels, 8, 8)
    per = channels // groups
    scale = 1.0 + 0.5 * torch.randn(groups if opset < 21 else channels)
    bias = 0.5 * torch.randn(groups if opset < 21 else channels)
    nodes, inits = [], [tensor("scale", scale), tensor("bias", bias)]
    h = x
    if conv:
        w, b = 0.2 * torch.randn(channels, 16, 3, 3), 0.1 * torch.randn(channels)
        inits += [tensor("conv_w", w), tensor("conv_b", b)]
        nodes.append(helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["h"], name="conv", pads=[1, 1, 1, 1]))
        h = F.conv2d(x, w, b, padding=1)
    nodes.append(helper.make_node("GroupNormalization", ["h" if conv else "x", "scale", "bias"], ["y"], name="norm",
                                  epsilon=eps, num_groups=groups))
    # ONNX's opset-18 scale and bias are per group: channel c takes group c // (C / G)'s.
    weight = scale.repeat_interleave(per) if opset < 21 else scale
    shift = bias.repeat_interleave(per) if opset < 21 else bias
    y = F.group_norm(h, expected_groups, weight, shift, eps)
    graph = helper.make_graph(nodes, "groupnorm",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(y.shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    # onnx 1.12 (Debian) has no schema for GroupNormalization: the model is saved unchecked.
    onnx.save(model, os.path.join(folder, "model.onnx"))
    onnx.save_tensor(tensor("x", x), os.path.join(data, "input_0.pb"))
    onnx.save_tensor(tensor("y", y), os.path.join(data, "output_0.pb"))


def run(exe, folder):
    data = os.path.join(folder, "test_data_set_0")
    return subprocess.run([exe, "--config", CONFIG, "--model", os.path.join(folder, "model.onnx"), "--functional",
                           "--quiet", "--inputs", data, "--expect", data, "--out", os.path.join(folder, "run.h5")],
                          capture_output=True, text=True, timeout=600)


def main():
    exe, work = sys.argv[1], sys.argv[2]
    failures = 0
    for opset in (18, 21):
        for conv in (False, True):
            for groups, expected_groups, verdict in ((8, 8, 0), (8, 4, MISMATCH_EXIT)):
                name = f"opset{opset}-{'conv' if conv else 'input'}-g{groups}-vs{expected_groups}"
                folder = os.path.join(work, name)
                write_case(folder, opset, groups, conv, expected_groups)
                r = run(exe, folder)
                matched = re.search(r"functional:\s+\d+ output\(s\) match", r.stdout)
                ok = r.returncode == verdict and (verdict != 0 or matched)
                print(f"{'ok' if ok else 'FAIL'}: {name}: exit {r.returncode} (expected {verdict})")
                if not ok:
                    print(r.stdout[-800:], r.stderr[-800:], sep="\n")
                    failures += 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
