#!/usr/bin/env python3
"""Every shipped config, simulated with no fault: each chip's simulated cycles equal the compiler's prediction."""
import glob
import json
import os
import subprocess
import sys
import tempfile


def main():
    exe, configs = sys.argv[1], sys.argv[2]
    failed = []
    files = sorted(glob.glob(os.path.join(configs, "*.yaml")))
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            name = os.path.basename(path)
            result = subprocess.run([exe, "--config", path, "--out", os.path.join(tmp, name + ".h5"), "--json",
                                     "--quiet"], capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                failed.append(f"{name}: exit {result.returncode}: {result.stderr.strip()}")
                continue
            summary = json.loads(result.stdout)
            chips = summary["chips"]
            used = [c for c in chips if c["instructions"] > 0]
            bad = [c["chip"] for c in chips if c["predicted_cycles"] != c["simulated_cycles"]]
            if bad or not used or summary["hazards_counted"] != 0:
                failed.append(f"{name}: chips {bad} disagree (or no chip ran, or hazards were counted)")
            else:
                print(f"ok: {name}: {len(used)} chips, makespan {summary['makespan_cycles']} cycles, predicted == simulated")
    for f in failed:
        print("FAIL: " + f)
    print(f"{len(files) - len(failed)} configs agree, {len(failed)} failed")
    sys.exit(1 if failed or not files else 0)


if __name__ == "__main__":
    main()
