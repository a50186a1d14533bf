#!/usr/bin/env python3
"""The search's cost model predicts each config's plan within a tolerance of the simulated makespan.

Usage: prediction_test.py TSP_SIM TOLERANCE CONFIG... (TOLERANCE a fraction, e.g. 0.15)."""
import json
import os
import subprocess
import sys
import tempfile


def main():
    exe, tolerance, configs = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, config in enumerate(configs):
            name = os.path.basename(config)
            result = subprocess.run([exe, "--config", config, "--out", os.path.join(tmp, f"run{index}.h5"), "--json",
                                     "--quiet"], capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                failed.append(f"{name}: exit {result.returncode}: {result.stderr.strip()}")
                continue
            summary = json.loads(result.stdout)
            simulated, predicted = summary["makespan_cycles"], summary["predicted_iteration_cycles"]
            error = (predicted - simulated) / simulated
            line = f"{name}: {summary['plan']} predicted {predicted:.0f}, simulated {simulated} ({100 * error:+.1f} %)"
            if abs(error) > tolerance:
                failed.append(line)
            else:
                print("ok: " + line)
    for f in failed:
        print("FAIL: " + f)
    sys.exit(1 if failed or not configs else 0)


if __name__ == "__main__":
    main()
