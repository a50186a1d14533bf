#!/usr/bin/env python3
"""A collective inside a sharded plan takes as long as the same collective alone, and the search's cost model
predicts the plan within 15 %.

Usage: collective_in_plan_test.py TSP_SIM CONFIG BYTES. CONFIG is a sharded plan whose collectives are
all-reduces of BYTES per chip (the tensor in whole 320-byte vectors) over all its chips, with no other traffic
(tests/sim/sharded/mlp-tp16-groqrack.yaml: two hierarchical all-reduces over two GroqRack nodes). Each
all-reduce's span (its first to last cycle on any chip) must be within 3 % of the same all-reduce simulated
alone (--model builtin:collective on the same config): no other burst waits at its ports inside the plan, so its
receives take each burst whole once it is in, as alone."""
import json
import os
import subprocess
import sys
import tempfile

SPAN_TOLERANCE = 0.03
PREDICTION_TOLERANCE = 0.15


def run(exe, config, tmp, name, extra):
    result = subprocess.run([exe, "--config", config, "--out", os.path.join(tmp, name + ".h5"), "--json", "--quiet"]
                            + extra, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"FAIL: {name}: exit {result.returncode}: {result.stderr.strip()}")
    return json.loads(result.stdout)


def main():
    exe, config, tensor_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        plan = run(exe, config, tmp, "plan", [])
        alone = run(exe, config, tmp, "alone", ["--model", "builtin:collective,op=allreduce,"
                                                f"bytes={tensor_bytes},chips={plan['chips_used']}"])
        reduces = [o for o in plan["ops"] if o["kind"] == "AllReduce"]
        if not reduces:
            sys.exit("FAIL: the plan has no AllReduce")
        for o in reduces:
            if o["c2c_bytes"] != alone["c2c_bytes"]:
                sys.exit(f"FAIL: {o['op']} sends {o['c2c_bytes']} bytes, the collective alone {alone['c2c_bytes']}:"
                         " BYTES is not the plan's tensor")
            span = o["last_cycle"] - o["first_cycle"]
            ok = span <= alone["makespan_cycles"] * (1 + SPAN_TOLERANCE)
            print(f"{'ok' if ok else 'FAIL'}: {o['op']}: {span} cycles in the plan, {alone['makespan_cycles']} alone")
            if not ok:
                failed.append(o["op"])
        simulated, predicted = plan["makespan_cycles"], plan["predicted_iteration_cycles"]
        error = (predicted - simulated) / simulated
        ok = abs(error) <= PREDICTION_TOLERANCE
        print(f"{'ok' if ok else 'FAIL'}: predicted {predicted:.0f} cycles, simulated {simulated} ({100 * error:+.1f} %)")
        if not ok:
            failed.append("prediction")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
