#!/usr/bin/env python3
"""Prints docs/validation.md's zoo table from the results the zoo tests leave in CACHE/results/.

Usage: zoo_table.py CACHE   (CACHE: build/tests/zoo/exports after `ctest -L zoo`)"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def main():
    folder = os.path.join(sys.argv[1], "results")
    print("| model | op kinds | parameters | FLOPs | one-chip cycles (lower bound, busiest unit) | import + compile | "
          "functional (small) against PyTorch |")
    print("|---|---|---|---|---|---|---|")
    for name in models.ZOO:
        path = os.path.join(folder, f"{name}.json")
        if not os.path.exists(path):
            print(f"| {name} | not run | | | | | |")
            continue
        with open(path) as f:
            r = json.load(f)
        ops = ", ".join(r["ops"]) if "ops" in r else "-"
        params = f"{r['parameters']:,}" if "parameters" in r else "-"
        flops = f"{r['flops'] / 1e9:.2f} G" if "flops" in r else "-"
        if r.get("flops_unchecked"):
            flops += " (ONNX shape inference cannot check it)"
        cycles = (f"{r['cycles']:,} ({r['lower_bound']:,}, {r['busiest_unit']})" if "cycles" in r else "-")
        compile_s = f"{r['compile_seconds']:.1f} s" if "compile_seconds" in r else "-"
        functional = "matches PyTorch within the rule" if "functional" in r else "-"
        if "stops_at" in r:
            stage, _, error = r["stops_at"].partition(": ")
            error = error.replace("tsp-sim: error: ", "").replace("|", "\\|")
            stop = f"stops at {stage}: {error}"
            if "cycles" not in r:
                cycles = stop if stage == "timing" else cycles
            functional = stop if stage != "timing" or "cycles" in r else "-"
            if stage == "describe":
                ops = stop
                functional = "-"
        print(f"| {name} | {ops} | {params} | {flops} | {cycles} | {compile_s} | {functional} |")


if __name__ == "__main__":
    main()
