#!/usr/bin/env python3
"""Prints docs/validation.md's table of the cost model against the simulation: every zoo export on one chip
and under fixed plans on a node of 8, and every example config with its own plan.

Each run is `tsp-sim --json` on one plan: `predicted_iteration_cycles` (the cost model) against
`makespan_cycles` (the simulation). A plan a model does not take (a batch of 1 has no share for dp or
microbatches) shows the simulator's error instead of figures. Results are kept in OUT/NAME.json, so a
second call prints the table again without running anything that already ran.

Usage: cost_table.py TSP_SIM CACHE OUT [--jobs N] [--only NAME,...]
  CACHE: the zoo's exports (build/tests/zoo/exports after `ctest -L zoo`); OUT: a folder for the results."""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import models  # noqa: E402

ONE_CHIP = os.path.join(HERE, "one_chip_fp16.yaml")
# A GroqNode-like node: 8 chips, every pair joined by a link, FP16 storage as the zoo's chip.
NODE = """cluster:
  chip: {{preset: groq-tsp-v1}}
  topology: {{kind: fully-connected, chips: 8}}
  link: {{lanes: 4, gbps_per_lane: 30, latency_ns: 250}}
model:
  onnx: model.onnx
  precision: {{weights: fp16, activations: fp16, accumulate: fp32}}
parallelism:
  plan: {{dp: {dp}, tp: {tp}, pp: {pp}, microbatches: 1}}
"""
# Fixed plans on the node: name -> (dp, tp, pp).
NODE_PLANS = {"pp2": (1, 1, 2), "tp2": (1, 2, 1), "dp2": (2, 1, 1), "tp2 x pp2": (1, 2, 2)}
EXAMPLES = ("resnet50-1chip", "bert-base-node8", "gpt-rack72", "llama2-70b-576", "library", "allreduce-10440")
TIMEOUT = 900  # a run beyond this (wall seconds) is listed as skipped


def runs(cache):
    """(key, label, plan label, command arguments after tsp-sim, config text or None)."""
    one, node, examples = [], [], []
    for name in models.ZOO:
        onnx = os.path.join(cache, f"{name}-full", "model.onnx")
        one.append((f"{name}.one", name, "one chip", ["--config", ONE_CHIP, "--model", onnx], None))
        for plan, (dp, tp, pp) in NODE_PLANS.items():
            key = f"{name}.{plan.replace(' x ', 'x')}"
            node.append((key, name, plan, ["--model", onnx], NODE.format(dp=dp, tp=tp, pp=pp)))
    for example in EXAMPLES:
        config = os.path.join(ROOT, "examples", example, "config.yaml")
        examples.append((f"example.{example}", f"examples/{example}", "its own", ["--config", config], None))
    return one + examples + node


def run_one(exe, out, key, args, config, cached=False):
    path = os.path.join(out, f"{key}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    if cached:
        return {"error": "not run"}
    if config is not None:
        config_path = os.path.join(out, f"{key}.yaml")
        with open(config_path, "w") as f:
            f.write(config)
        args = ["--config", config_path] + args
    trace = os.path.join("/dev/shm", f"cost_table_{os.getpid()}_{key}.h5")
    cmd = [exe] + args + ["--json", "--quiet", "--out", trace]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        result = {"error": f"not measured: over {TIMEOUT} s of wall time"}
    else:
        if r.returncode != 0:
            lines = [l for l in r.stderr.splitlines() if "error" in l] or r.stderr.splitlines() or ["(no message)"]
            result = {"error": f"exit {r.returncode}: {lines[0].strip()}"}
        else:
            s = json.loads(r.stdout)
            result = {"plan": s.get("plan"), "chips": s.get("chips_used"),
                      "predicted": s.get("predicted_iteration_cycles"), "simulated": s.get("makespan_cycles")}
    finally:
        if os.path.exists(trace):
            os.remove(trace)
    result["command"] = " ".join(os.path.relpath(a, ROOT) if os.path.isabs(a) and a.startswith(ROOT) else a
                                 for a in cmd[1:-2])
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    return result


def row(label, plan, r):
    if "error" in r:
        return f"| {label} | {plan} | | | | {r['error'].replace('tsp-sim: error: ', '').replace('|', '/')} |"
    pred, sim = r["predicted"], r["simulated"]
    if not pred or not sim:
        return f"| {label} | {plan} ({r['plan']}) | {r['chips']} | - | {sim:,} | no prediction |"
    return (f"| {label} | {plan} ({r['plan']}) | {r['chips']} | {round(pred):,} | {sim:,} | "
            f"{100.0 * (pred - sim) / sim:+.1f} % |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tsp_sim")
    p.add_argument("cache")
    p.add_argument("out")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--only", default="", help="models (or examples) to run, comma-separated")
    p.add_argument("--cached", action="store_true", help="print the results OUT holds, run nothing")
    p.add_argument("--plans", default="", help="plans to run, comma-separated (one chip, pp2, ..., its own)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    todo = [r for r in runs(a.cache) if (not a.only or r[1].split("/")[-1] in a.only.split(",")) and
            (not a.plans or r[2] in a.plans.split(","))]
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = [pool.submit(run_one, os.path.abspath(a.tsp_sim), a.out, key, args, config, a.cached)
                   for key, _, _, args, config in todo]
        results = [f.result() for f in futures]
    print("| model | plan | chips | predicted | simulated | error |")
    print("|---|---|---:|---:|---:|---:|")
    worst = 0.0
    for (_, label, plan, _, _), r in zip(todo, results):
        print(row(label, plan, r))
        if r.get("predicted") and r.get("simulated"):
            worst = max(worst, abs(r["predicted"] - r["simulated"]) / r["simulated"])
    print(f"\nlargest error: {100 * worst:.1f} %")


if __name__ == "__main__":
    main()
