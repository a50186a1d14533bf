#!/usr/bin/env python3
"""One zoo model through tsp-sim, checked against ONNX and PyTorch (docs/validation.md, "Model zoo").

Stages, in order, each on the export cached in CACHE (export_model.py):
  describe    the full model imports; its parameters equal the ONNX file's float initializers and torch's
              parameters plus float buffers; its matmul FLOPs equal those from ONNX shape inference
  timing      the full model compiles and simulates on one chip: predicted == simulated, no hazards
  cost        the cost model's one-chip prediction (`--search-only`) is within COST_TOLERANCE of the
              simulated cycles of the timing stage
  functional  the small seeded model computes on the chip at FP16 and matches PyTorch's float32 outputs
              within the functional tolerance (docs/validation.md)
A stage listed in expected_failures.txt must fail with its listed error (and the later stages are not
run, but for the cost stage, whose failure stops nothing); a listed stage that passes, or any other
failure, fails the test, so that a fix shows up.

Usage: zoo_test.py TSP_SIM CACHE MODEL"""
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile

import onnx
import onnx.shape_inference

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import export_model  # noqa: E402  (imports torch)
except ImportError as e:
    sys.exit(f"the model zoo needs python3-torch and python3-torchvision (scripts/test-packages.txt, installed by "
             f"scripts/test.sh): {e}")

CONFIG = os.path.join(HERE, "one_chip_fp16.yaml")
STAGES = ("describe", "timing", "cost", "functional")
COST_TOLERANCE = 0.15  # docs/validation.md: the cost model within 15 % of the simulated makespan


def expected_failures():
    """(model, stage) -> regex of the error that stage stops at today."""
    out = {}
    with open(os.path.join(HERE, "expected_failures.txt")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                model, stage, regex = line.split("|", 2)
                out[(model.strip(), stage.strip())] = regex.strip()
    return out


def onnx_counts(path):
    """Float initializer elements, and the FLOPs of MatMul, Gemm and Conv from ONNX shape inference as
    docs/ir.md counts them: 2 x MACs, plus one per output element for a Gemm's or a Conv's bias."""
    model = onnx.shape_inference.infer_shapes(onnx.load(path), data_prop=True)
    g = model.graph
    shapes = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    params = 0
    for t in g.initializer:
        shapes[t.name] = list(t.dims)
        if t.data_type in floats:
            params += math.prod(t.dims)
    flops, unknown = 0, []
    for n in g.node:
        if n.op_type not in ("MatMul", "Gemm", "Conv"):
            continue
        a, b, y = (shapes.get(n.input[0]), shapes.get(n.input[1]), shapes.get(n.output[0]))
        if not a or not b or not y or None in a + b + y:
            unknown.append(n.name)
            continue
        if n.op_type == "MatMul":
            k = a[-1]
        elif n.op_type == "Gemm":
            trans_a = next((x.i for x in n.attribute if x.name == "transA"), 0)
            k = a[0] if trans_a else a[1]
        else:
            k = math.prod(b[1:])
        flops += 2 * math.prod(y) * k + (math.prod(y) if n.op_type != "MatMul" and len(n.input) > 2 and n.input[2] else 0)
    return params, flops, unknown


def run(args, timeout=3600):
    """The finished process and its CPU seconds (user + system: steadier than wall time on a shared machine)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def error_line(r):
    lines = [l for l in r.stderr.splitlines() if "error" in l] or r.stderr.splitlines() or [r.stdout[-300:]]
    return f"exit {r.returncode}: {lines[0].strip()}"


def stage_describe(exe, full, result):
    with open(os.path.join(full, "info.json")) as f:
        info = json.load(f)
    r, _ = run([exe, "--config", CONFIG, "--model", os.path.join(full, "model.onnx"), "--describe", "model", "--json"])
    if r.returncode != 0:
        return error_line(r)
    described = json.loads(r.stdout)
    params, flops, unknown = onnx_counts(os.path.join(full, "model.onnx"))
    torch_params = info["torch_parameters"] + info["torch_float_buffers"]
    result.update(parameters=described["parameters"], flops=described["flops"], matmul_flops=described["matmul_flops"],
                  ops=sorted(described["nodes_by_op"]), torch_parameters=info["torch_parameters"])
    if not (described["parameters"] == params == torch_params):
        return (f"parameters: tsp-sim {described['parameters']}, ONNX float initializers {params}, torch parameters + "
                f"float buffers {torch_params}")
    if unknown:  # nothing to compare with: said, and the FLOPs are left unchecked
        print(f"note: {len(unknown)} matmuls' shapes are unknown to ONNX shape inference ({unknown[0]}, ...): "
              f"FLOPs not compared")
        result["flops_unchecked"] = True
    elif described["matmul_flops"] != flops:
        return f"matmul FLOPs: tsp-sim {described['matmul_flops']}, ONNX shape inference {flops}"
    return None


def stage_timing(exe, full, result, tmp):
    model = ["--config", CONFIG, "--model", os.path.join(full, "model.onnx")]
    programs = os.path.join(tmp, "programs")
    # Compiled by one process (its CPU time is the import + compile figure), simulated by another.
    r, compile_seconds = run([exe] + model + ["--compile-only", "--emit-programs", programs, "--quiet"])
    if r.returncode != 0:
        return error_line(r)
    r, _ = run([exe] + model + ["--programs", programs, "--json", "--quiet", "--out", os.path.join(tmp, "timing.h5")])
    if r.returncode != 0:
        return error_line(r)
    summary = json.loads(r.stdout)
    chip = summary["chips"][0]
    util = summary["utilisation"]
    result.update(cycles=chip["simulated_cycles"], lower_bound=chip["lower_bound_cycles"],
                  busiest_unit=max(util, key=util.get), compile_seconds=round(compile_seconds, 2))
    if chip["predicted_cycles"] != chip["simulated_cycles"] or summary["hazards_counted"] != 0:
        return (f"chip 0: predicted {chip['predicted_cycles']}, simulated {chip['simulated_cycles']}, "
                f"{summary['hazards_counted']} hazards")
    return None


def stage_cost(exe, full, result, tmp):
    r, _ = run([exe, "--config", CONFIG, "--model", os.path.join(full, "model.onnx"), "--search-only", "--json",
                "--quiet", "--out", os.path.join(tmp, "search.h5")])
    if r.returncode != 0:
        return error_line(r)
    search = json.loads(r.stdout)
    predicted = next(p["iteration_cycles"] for p in search["plans"] if p["plan"] == search["best"])
    simulated = result["cycles"]
    error = (predicted - simulated) / simulated
    result.update(predicted=round(predicted), cost_error=round(error, 4))
    if abs(error) > COST_TOLERANCE:
        return (f"cost model {round(predicted)} cycles against {simulated} simulated: {100 * error:+.1f} %, "
                f"beyond {100 * COST_TOLERANCE:.0f} %")
    return None


def stage_functional(exe, small, result, tmp):
    data = os.path.join(small, "test_data_set_0")
    r, _ = run([exe, "--config", CONFIG, "--model", os.path.join(small, "model.onnx"), "--functional", "--quiet",
                "--inputs", data, "--expect", data, "--out", os.path.join(tmp, "functional.h5")])
    if r.returncode != 0:
        return error_line(r)
    match = re.search(r"functional:\s+(\d+) output\(s\) match.*", r.stdout)
    if not match:
        return f"no functional verdict in the output: {r.stdout[-300:]}"
    result["functional"] = match.group(0).strip()
    return None


def main():
    exe, cache, name = sys.argv[1], sys.argv[2], sys.argv[3]
    xfail = expected_failures()
    full = export_model.export(cache, name, "full")
    small = export_model.export(cache, name, "small")
    result = {"model": name}
    verdict = 0
    with tempfile.TemporaryDirectory() as tmp:
        for stage in STAGES:
            if stage == "describe":
                error = stage_describe(exe, full, result)
            elif stage == "timing":
                error = stage_timing(exe, full, result, tmp)
            elif stage == "cost":
                error = stage_cost(exe, full, result, tmp)
            else:
                error = stage_functional(exe, small, result, tmp)
            expected = xfail.get((name, stage))
            if error is None and expected is None:
                print(f"ok: {name}: {stage}")
                continue
            if error is None:
                print(f"FAIL: {name}: {stage} passes but expected_failures.txt lists it (remove the entry)")
                verdict = 1
                if stage == "cost":
                    continue
            elif expected is not None and re.search(expected, error):
                print(f"expected failure: {name}: {stage}: {error}")
                if stage == "cost":
                    result["cost_outside"] = error
                    continue
                result["stops_at"] = f"{stage}: {error}"
            else:
                print(f"FAIL: {name}: {stage}: {error}")
                verdict = 1
                if stage == "cost":
                    continue
            break
    os.makedirs(os.path.join(cache, "results"), exist_ok=True)
    with open(os.path.join(cache, "results", f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("zoo-result: " + json.dumps(result))
    sys.exit(verdict)


if __name__ == "__main__":
    main()
