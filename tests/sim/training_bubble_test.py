#!/usr/bin/env python3
"""Training steps that end with their pipeline (no optimizer, no data parallelism): every chip's
simulated cycles equal the prediction, and the bubble of the simulated makespan equals the scheduled
one; both are printed next to Megatron's (1/v)(p-1)/m.

usage: training_bubble_test.py TSP_SIM CONFIG_DIR"""
import glob
import json
import os
import subprocess
import sys
import tempfile


def main():
    exe, configs = sys.argv[1], sys.argv[2]
    failed = []
    paths = sorted(glob.glob(os.path.join(configs, "*.yaml")))
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(paths):
            name = os.path.basename(path)
            run = subprocess.run([exe, "--config", path, "--out", os.path.join(tmp, f"run{i}.h5"), "--json", "--quiet"],
                                 capture_output=True, text=True, timeout=600)
            if run.returncode != 0:
                failed.append(f"{name}: exit {run.returncode}: {run.stderr.strip()}")
                continue
            j = json.loads(run.stdout)
            t = j["training"]
            bad = [c["chip"] for c in j["chips"] if c["predicted_cycles"] != c["simulated_cycles"]]
            simulated = t.get("simulated_bubble_fraction")
            if bad or simulated is None or abs(simulated - t["bubble_fraction"]) > 1e-12:
                failed.append(f"{name}: chips {bad} disagree, or the simulated bubble {simulated} is not the "
                              f"scheduled {t['bubble_fraction']}")
                continue
            print(f"ok: {name}: simulated bubble {simulated:.4f}, formula {t['bubble_formula']:.4f}, "
                  f"makespan {j['makespan_cycles']} cycles, {t['passes_compiled']} passes compiled")
    for f in failed:
        print("FAIL: " + f)
    print(f"{len(paths) - len(failed)} bubbles simulated, {len(failed)} failed")
    sys.exit(1 if failed or not paths else 0)


if __name__ == "__main__":
    main()
