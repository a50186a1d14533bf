#!/usr/bin/env python3
"""What an ONNX model's weights cost tsp-sim: peak RSS and wall time of importing a GPT-2-small export
(124 M parameters, opset 17, the zoo's Hugging Face-layout GPT-2 at 12 layers, sequence 128) with its
weights embedded in the .onnx file and as external data, for --describe model (import and the pass
pipeline) and for a timing run that searches a plan, compiles and simulates it on a ring of 16 chips.
The export runs in its own process, so that the measured processes are not forks of one holding torch.

Usage: onnx_weights_bench.py TSP_SIM WORKDIR   (the exports are kept in WORKDIR)"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "zoo"))


def export(workdir):
    embedded = os.path.join(workdir, "gpt2_small", "model.onnx")
    external = os.path.join(workdir, "gpt2_small_external", "model.onnx")
    if not os.path.exists(embedded):
        import torch
        import models
        os.makedirs(os.path.dirname(embedded), exist_ok=True)
        torch.manual_seed(0)
        model = models.GPT2(layers=12).eval()
        ids = torch.randint(0, 50257, (1, 128))
        torch.onnx.export(model, (ids,), embedded, opset_version=17, input_names=["input_ids"],
                          output_names=["logits"], do_constant_folding=False)
    if not os.path.exists(external):
        import onnx
        os.makedirs(os.path.dirname(external), exist_ok=True)
        onnx.save_model(onnx.load(embedded), external, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.weights", size_threshold=0)
    return embedded, external


def export_gpt3_7b(workdir):
    """GPT-3 6.7B's graph (GPT-2 layout, 32 layers, width 4096, 32 heads of 128, context 2048, vocabulary
    50,257: 6.65 B parameters) with its weights absent. Exported with a residual stream of width 64 (the
    attention and MLP widths, and so every Reshape, are 6.7B's), its initializers moved to external data,
    then every initializer dimension of 64, and every 64 in the integer Constants the tracer recorded as
    shapes, set to 4096; no weights file is written: a timing run reads shapes only."""
    path = os.path.join(workdir, "gpt3_6.7b", "model.onnx")
    if os.path.exists(path):
        return path
    import numpy as np
    import onnx
    import onnx.external_data_helper
    import onnx.numpy_helper
    import torch
    import models
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.manual_seed(0)
    model = models.GPT2(vocab=50257, positions=2048, d=4096, layers=32, heads=32, width=64).eval()
    narrow = os.path.join(workdir, "gpt3_6.7b", "narrow.onnx")
    torch.onnx.export(model, (torch.randint(0, 50257, (1, 128)),), narrow, opset_version=17,
                      input_names=["input_ids"], output_names=["logits"], do_constant_folding=False)
    m = onnx.load(narrow)
    os.remove(narrow)
    onnx.external_data_helper.convert_model_to_external_data(m, all_tensors_to_one_file=True,
                                                             location="absent.weights", size_threshold=0)
    for t in m.graph.initializer:
        t.ClearField("raw_data")
        dims = [4096 if d == 64 else d for d in t.dims]
        del t.dims[:]
        t.dims.extend(dims)
    for n in m.graph.node:
        for a in n.attribute:
            if n.op_type == "Constant" and a.name == "value" and a.t.data_type == onnx.TensorProto.INT64:
                values = onnx.numpy_helper.to_array(a.t)
                if (values == 64).any():
                    a.t.CopyFrom(onnx.numpy_helper.from_array(np.where(values == 64, 4096, values), a.t.name))
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def measure(args):
    """(peak RSS in MiB, wall seconds) of one tsp-sim process."""
    started = time.time()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.time() - started
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(args)}: {proc.stderr.read().decode()}")
    return usage.ru_maxrss / 1024, seconds


def main():
    exe, workdir = sys.argv[1], sys.argv[2]
    if exe == "--export":
        export(workdir)
        export_gpt3_7b(workdir)
        return
    subprocess.run([sys.executable, os.path.abspath(__file__), "--export", workdir], check=True)
    embedded, external = export(workdir)
    describe = os.path.join(ROOT, "tests", "zoo", "one_chip_fp16.yaml")
    timing = os.path.join(ROOT, "configs", "ring-16.yaml")
    print("| model file | file size | run | peak RSS | wall |")
    print("|---|---|---|---|---|")
    for label, path in (("weights embedded", embedded), ("external data", external)):
        size = sum(os.path.getsize(os.path.join(os.path.dirname(path), f)) for f in os.listdir(os.path.dirname(path)))
        for run, args in (("--describe model", ["--config", describe, "--describe", "model"]),
                          ("timing run, ring of 16", ["--config", timing, "--quiet", "--out",
                                                   os.path.join(workdir, "bench.h5")])):
            rss, seconds = measure([exe] + args + ["--model", path])
            print(f"| {label} | {size / 2**20:.0f} MiB | {run} | {rss:.0f} MiB | {seconds:.2f} s |")
    big = export_gpt3_7b(workdir)
    rss, seconds = measure([exe, "--config", describe, "--describe", "model", "--model", big])
    print(f"| GPT-3 6.7B graph, weights absent | {os.path.getsize(big) / 2**20:.1f} MiB | --describe model | "
          f"{rss:.0f} MiB | {seconds:.2f} s |")


if __name__ == "__main__":
    main()
