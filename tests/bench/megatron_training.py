#!/usr/bin/env python3
"""Megatron-LM Table 1's models that fit within 10,440 TSPs, simulated cycle by cycle on the dragonfly.

Each model runs as a training step (Adam, recompute full, 1F1B) at the pipeline depth and TP width of
the smallest plan the search finds for it (docs/validation.md), reduced so that a run fits this
machine: one transformer layer per pipeline stage, sequence 128 instead of 2048, m = 2 pp
microbatches of one sample (batch = m), and as many heads as TP ranks (the parameters per layer
stay the model's). A chip's program refers to the compiled passes it runs (held once for all chips
and microbatches), so memory grows with the compiled passes and the collectives' chains, not with
passes x chips.
Prints, per model, the simulated samples/s next to the cost model's prediction for the same reduced
plan, the bubble, the compile/simulation figures, the wall time and the peak memory. Takes minutes:
not part of the ctest suite.

usage: megatron_training.py TSP_SIM SOURCE_DIR [MODEL[,seq=S][,m=M][,tp=T][,pp=P][,layers=L]...]
       (MODEL: 1.7B, 18.4B; default 1.7B; layers defaults to pp, heads are always tp)
The runs of docs/validation.md: 1.7B; 1.7B,seq=512; 1.7B,m=24; 18.4B; 1.7B,tp=64,pp=3,layers=24,m=6;
18.4B,tp=512,pp=3,layers=6,m=6.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

# name: (hidden, smallest-fit tp, smallest-fit pp, reduced sequence)
MODELS = {"1.7B": (2304, 32, 6, 128), "18.4B": (6144, 256, 6, 128)}


def config_text(source, hidden, tp, pp, seq, out, m=None, layers=None):
    with open(os.path.join(source, "configs", "dragonfly-10440.yaml")) as f:
        cluster = f.read().split("\nmodel:")[0]
    m = m or 2 * pp
    layers = layers or pp
    return f"""{cluster}
model:
  builtin: gpt
  params: {{layers: {layers}, hidden: {hidden}, heads: {tp}, seq: {seq}, batch: {m}, vocab: 51200, dtype: fp16}}
parallelism:
  plan: {{dp: 1, tp: {tp}, pp: {pp}, microbatches: {m}}}
training: {{schedule: 1f1b, optimizer: adam, recompute: full}}
output: {{trace: {out}}}
"""


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().split("usage: ")[1])
    exe, source = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or ["1.7B"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print("| model | plan (reduced) | chips | simulated cycles | samples/s simulated | samples/s cost model | "
          "bubble | formula | passes compiled / shared | wall s | peak RSS GB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in names:
            name, *options = spec.split(",")
            hidden, tp, pp, seq = MODELS[name]
            given = dict(o.split("=") for o in options)
            seq, m = int(given.get("seq", seq)), int(given["m"]) if "m" in given else None
            tp, pp = int(given.get("tp", tp)), int(given.get("pp", pp))
            layers = int(given.get("layers", pp))
            path = os.path.join(tmp, f"{name}.yaml")
            with open(path, "w") as f:
                f.write(config_text(source, hidden, tp, pp, seq, os.path.join(tmp, f"{name}.h5"), m, layers))
            start = time.time()
            run = subprocess.run([exe, "--config", path, "--json", "--quiet"], capture_output=True, text=True, env=env)
            wall = time.time() - start
            if run.returncode != 0:
                print(f"| {name} | failed: exit {run.returncode}: {run.stderr.strip()} |")
                continue
            j = json.loads(run.stdout)
            bad = [c["chip"] for c in j["chips"] if c["predicted_cycles"] != c["simulated_cycles"]]
            predicted = j["predicted_iteration_cycles"]
            clock = j["makespan_cycles"] / j["makespan_seconds"]
            t = j["training"]
            print(f"| {name} | {j['plan']}, {layers} layers, s = {seq} | {j['chips_used']} | {j['makespan_cycles']} | "
                  f"{j['throughput_per_second']:.2f} | {j['samples'] * clock / predicted:.2f} | "
                  f"{t['bubble_fraction']:.3f} | {t['bubble_formula']:.3f} | "
                  f"{t['passes_compiled']} / {t['passes_shared']} | {wall:.0f} | "
                  f"{j['peak_rss_bytes_max_rank'] / 1e9:.2f} |")
            if bad:
                print(f"FAIL: {name}: chips {bad[:8]} disagree with the prediction")
                sys.exit(1)


if __name__ == "__main__":
    main()
