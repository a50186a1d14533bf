#!/usr/bin/env python3
"""Every shipped config, simulated with no fault: each chip's simulated cycles equal the compiler's prediction
(and a training step that ends with its pipeline has the scheduled bubble).

Extra arguments CONFIG_STEM|MODEL run a shipped config with --model MODEL too (e.g. multi-hop collectives);
with --extra-only before them, only those runs (CONFIGS is then the directory of the stems). --effort LEVEL
first compiles every run at that effort level."""
import glob
import json
import os
import subprocess
import sys
import tempfile


def main():
    exe, configs = sys.argv[1], sys.argv[2]
    extras = sys.argv[3:]
    common = []
    if extras[:1] == ["--effort"]:
        common, extras = ["--effort", extras[1]], extras[2:]
    failed = []
    runs = [(os.path.basename(p), p, []) for p in sorted(glob.glob(os.path.join(configs, "*.yaml")))]
    if extras[:1] == ["--extra-only"]:
        runs, extras = [], extras[1:]
    for extra in extras:
        stem, model = extra.split("|", 1)
        runs.append((f"{stem}.yaml with {model}", os.path.join(configs, stem + ".yaml"), ["--model", model]))
    files = runs
    with tempfile.TemporaryDirectory() as tmp:
        for index, (name, path, extra_args) in enumerate(runs):
            result = subprocess.run([exe, "--config", path, "--out", os.path.join(tmp, f"run{index}.h5"), "--json",
                                     "--quiet"] + common + extra_args, capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                failed.append(f"{name}: exit {result.returncode}: {result.stderr.strip()}")
                continue
            summary = json.loads(result.stdout)
            chips = summary["chips"]
            used = [c for c in chips if c["instructions"] > 0]
            bad = [c["chip"] for c in chips if c["predicted_cycles"] != c["simulated_cycles"]]
            # A training step that ends with its pipeline: the simulated makespan's bubble is the scheduled one.
            training = summary.get("training", {})
            bubble = training.get("simulated_bubble_fraction")
            if bad or not used or summary["hazards_counted"] != 0:
                failed.append(f"{name}: chips {bad} disagree (or no chip ran, or hazards were counted)")
            elif bubble is not None and abs(bubble - training["bubble_fraction"]) > 1e-12:
                failed.append(f"{name}: simulated bubble {bubble}, scheduled {training['bubble_fraction']}")
            else:
                extra = f", bubble {bubble:.4f} (formula {training['bubble_formula']:.4f})" if bubble is not None else ""
                print(f"ok: {name}: {len(used)} chips, makespan {summary['makespan_cycles']} cycles, predicted == simulated"
                      + extra)
    for f in failed:
        print("FAIL: " + f)
    print(f"{len(files) - len(failed)} configs agree, {len(failed)} failed")
    sys.exit(1 if failed or not files else 0)


if __name__ == "__main__":
    main()
