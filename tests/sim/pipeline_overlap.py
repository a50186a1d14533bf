#!/usr/bin/env python3
"""Consecutive microbatches of a uniform inference pipeline overlap on each chip.

Usage: pipeline_overlap.py TSP_SIM DIR. DIR holds mlp-pp4-m4.yaml and mlp-pp4-m16.yaml, the same
pipeline with 4 and 16 microbatches. Each runs through tsp-sim (which stops on any hazard); every
chip's simulated cycles must equal the predicted ones. The steady-state period of a stage is the
growth of its chip's cycles per added microbatch, (cycles(16) - cycles(4)) / 12, and the busiest
unit's share likewise from the lower bounds. Checked:
  - every stage's period is within 2 % of its busiest unit per microbatch (a stage that waits for
    its previous microbatch's streams to drain is 4.6 % above it; a middle stage whose received
    tiles share MEM slices with its previous microbatch's tail, 5 %; the last stage 3.9 % when a
    segment reused, of its shape's programs, the one that ends first);
  - the bubble, 1 - m x (busiest unit per microbatch) / makespan, is within 0.02 of
    (p-1)/(m+p-1) for m = 4 and m = 16 (0.028 from it for m = 16 in that case).
"""
import json
import os
import subprocess
import sys
import tempfile

PERIOD_TOLERANCE = 0.02
BUBBLE_TOLERANCE = 0.02


def run(exe, config, tmp):
    trace = os.path.join(tmp, os.path.basename(config) + ".h5")
    out = subprocess.run([exe, "--config", config, "--out", trace, "--json", "--quiet"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAIL: {config}: exit {out.returncode}: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def main():
    exe, directory = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        runs = {m: run(exe, os.path.join(directory, f"mlp-pp4-m{m}.yaml"), tmp) for m in (4, 16)}
    failed = []
    for m, d in runs.items():
        chips = [c for c in d["chips"] if c["simulated_cycles"] > 0]
        if d["hazards_counted"] or any(c["predicted_cycles"] != c["simulated_cycles"] for c in chips):
            failed.append(f"m={m}: predicted != simulated or hazards")
        p = len(chips)
        busiest = max(c["lower_bound_cycles"] for c in chips) / m
        bubble = 1 - m * busiest / d["makespan_cycles"]
        formula = (p - 1) / (m + p - 1)
        print(f"p={p} m={m}: makespan {d['makespan_cycles']}, bubble {bubble:.4f}, formula {formula:.4f}")
        if abs(bubble - formula) > BUBBLE_TOLERANCE:
            failed.append(f"m={m}: bubble {bubble:.4f} is more than {BUBBLE_TOLERANCE} from {formula:.4f}")
    for c4, c16 in zip(runs[4]["chips"], runs[16]["chips"]):
        period = (c16["simulated_cycles"] - c4["simulated_cycles"]) / 12
        busiest = (c16["lower_bound_cycles"] - c4["lower_bound_cycles"]) / 12
        print(f"stage {c4['chip']}: period {period:.0f} cycles per microbatch, busiest unit {busiest:.0f} "
              f"({period / busiest - 1:+.2%})")
        if period > (1 + PERIOD_TOLERANCE) * busiest:
            failed.append(f"stage {c4['chip']}'s period {period:.0f} is more than {PERIOD_TOLERANCE:.0%} above {busiest:.0f}")
    for f in failed:
        print("FAIL:", f)
    print(f"pipeline overlap: {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
