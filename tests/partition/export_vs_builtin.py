#!/usr/bin/env python3
"""A torch export of a GPT (Hugging Face GPT-2 layout: Conv1D, fused c_attn QKV, untied head
[2048, 50257]) against builtin:gpt of the same architecture (separate Q, K, V, tied head) on a
GroqRack in INT8 (docs/validation.md, "Sharding of fused, uneven and exported graphs"):

- the smallest fit (objective: chips) is the same number of chips, within one pipeline stage;
- at tp 2, 4 and 8 with pp 2, every chip sends the same bytes (within 5 %: --describe shards) and the
  simulated makespan agrees (within 5 %).

Usage: export_vs_builtin.py TSP_SIM OUT_DIR [--full]. The export is made in OUT_DIR (kept there: the
build tree is the cache) by make_torch_gpt.py with 4 of GPT-1.3B's 24 layers (hidden 2048, 16 heads);
--full also prints the figures of every plan."""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, HIDDEN, HEADS, VOCAB, SEQ = 4, 2048, 16, 50257, 256
RACK = """cluster:
  chip: {preset: groq-tsp-v1}
  topology: {kind: dragonfly, chips_per_node: 8, nodes_per_rack: 9, racks: 1, global_links_per_chip: 4}
  link: {latency_ns: 250}
model:
  builtin: mlp
  precision: {weights: int8, activations: int8, accumulate: int32}
parallelism:
"""


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {r.returncode}\n{r.stderr[-2000:]}")
    return r.stdout


def config(out, name, parallelism):
    path = os.path.join(out, name + ".yaml")
    with open(path, "w") as f:
        f.write(RACK + parallelism)
    return path


def main():
    exe, out = sys.argv[1], sys.argv[2]
    full = "--full" in sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    onnx = os.path.join(out, f"gpt_{LAYERS}x{HIDDEN}_untied.onnx")
    subprocess.run([sys.executable, os.path.join(HERE, "make_torch_gpt.py"), onnx, str(LAYERS), str(HIDDEN),
                    str(HEADS), str(VOCAB), "1024", "untied"], check=True)
    models = {
        "export": ["--model", onnx, "--override", f"batch=1,seq={SEQ}"],
        "builtin": ["--model", f"builtin:gpt,layers={LAYERS},hidden={HIDDEN},heads={HEADS},vocab={VOCAB},seq={SEQ},batch=1"],
    }
    failures = []

    # Smallest fit: the search's best plan by chips.
    chips_cfg = config(out, "chips", "  plan: auto\n  objective: chips\n")
    smallest = {}
    for name, model in models.items():
        r = json.loads(run([exe, "--config", chips_cfg, *model, "--search-only", "--json", "--quiet",
                            "--out", os.path.join(out, f"{name}-chips.h5")]))
        best = next(p for p in r["plans"] if p["plan"] == r["best"])
        smallest[name] = (best["chips"], best["plan"])
        if full:
            print(f"smallest fit {name}: {best['plan']} on {best['chips']} chips")
    stage = int(smallest["builtin"][1].split("-tp")[1].split("-")[0])
    if abs(smallest["export"][0] - smallest["builtin"][0]) > stage:
        failures.append(f"smallest fit: export {smallest['export']}, builtin {smallest['builtin']}")

    # Bytes sent per chip and simulated time at tp 2, 4, 8 with pp 2.
    for tp in (2, 4, 8):
        cfg = config(out, f"tp{tp}-pp2", f"  plan: {{dp: 1, tp: {tp}, pp: 2, microbatches: 1}}\n")
        # Both on the builtin's plan (the same layers in each stage: the stage cut balances each
        # model's estimated cycles, which differ by the untied head).
        described = run([exe, "--config", cfg, *models["builtin"], "--describe", "plan"]).splitlines()
        plan = os.path.join(out, f"tp{tp}-pp2.plan.yaml")
        with open(plan, "w") as f:
            f.write("\n".join(line for line in described if line.startswith(("  ", "dp:", "tp:", "pp:", "micro",
                                                                              "interleave:", "split:", "stages:",
                                                                              "placement: ["))) + "\n")
        sent, cycles = {}, {}
        for name, model in models.items():
            model = [*model, "--plan", plan]
            shards = json.loads(run([exe, "--config", cfg, *model, "--describe", "shards", "--json"]))
            sent[name] = sorted(c["sent_bytes"] for c in shards["chips"])
            r = json.loads(run([exe, "--config", cfg, *model, "--json", "--quiet",
                                "--out", os.path.join(out, f"{name}-tp{tp}.h5")]))
            cycles[name] = (r["makespan_cycles"], r["predicted_iteration_cycles"])
        for a, b in zip(sent["export"], sent["builtin"]):
            if not math.isclose(a, b, rel_tol=0.05):
                failures.append(f"tp {tp} pp 2: bytes sent per chip, export {sent['export']}, builtin {sent['builtin']}")
                break
        if not math.isclose(cycles["export"][0], cycles["builtin"][0], rel_tol=0.05):
            failures.append(f"tp {tp} pp 2: simulated cycles, export {cycles['export'][0]}, builtin {cycles['builtin'][0]}")
        if full:
            for name in models:
                print(f"tp{tp}-pp2 {name}: sent per chip {sent[name][-1]} B, simulated {cycles[name][0]}, "
                      f"predicted {cycles[name][1]:.0f}")
    if failures:
        sys.exit("\n".join(failures))
    print("export and builtin agree:", smallest)


if __name__ == "__main__":
    main()
