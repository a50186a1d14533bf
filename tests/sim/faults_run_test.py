#!/usr/bin/env python3
"""End to end: faults are off by default; injected, they are counted (exit 0), the same on 1 and 2 ranks."""
import json
import os
import subprocess
import sys
import tempfile


def run(exe, config, out, ranks):
    cmd = [exe, "--config", config, "--out", out, "--json", "--quiet"]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe"] + cmd
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        print(result.stderr)
    return result.returncode, json.loads(result.stdout) if result.returncode == 0 else None


def main():
    exe, quickstart = sys.argv[1], sys.argv[2]
    checks = []

    def check(cond, what):
        checks.append((bool(cond), what))

    with open(quickstart) as f:
        base = f.read()
    faults = "  faults: {link_jitter_cycles: 7, stall_chip: 2, stall_unit: 104, stall_cycle: 0, stall_cycles: 60}\n"
    with tempfile.TemporaryDirectory() as tmp:
        faulty = os.path.join(tmp, "faults.yaml")
        with open(faulty, "w") as f:
            f.write(base.replace("  mode: timing\n", "  mode: timing\n" + faults))
        code, clean = run(exe, quickstart, os.path.join(tmp, "clean.h5"), 1)
        check(code == 0, "the quickstart runs")
        if clean:
            check(clean["faults_injected"] is False and clean["hazards_counted"] == 0, "faults are off by default")
            check(all(c["predicted_cycles"] == c["simulated_cycles"] for c in clean["chips"]),
                  "no fault: simulated cycles equal the prediction")
            check(clean["energy_joules"] > 0 and clean["c2c_bytes"] > 0, "energy and C2C bytes are reported")
        results = []
        for ranks in (1, 2):
            code, summary = run(exe, faulty, os.path.join(tmp, f"faults{ranks}.h5"), ranks)
            check(code == 0, f"with faults on, hazards do not end the run ({ranks} rank(s))")
            results.append(summary)
        if all(results):
            one = results[0]
            check(one["faults_injected"] is True, "faults are reported as injected")
            check(one["hazards_by_kind"]["receive_early"] > 0, "link jitter makes receives early")
            check(one["hazards_by_kind"]["weights_missing"] > 0, "a stalled install queue leaves computes without weights")
            check(one["hazards_counted"] == sum(one["hazards_by_kind"].values()), "hazard kinds add up")
            check(one["stall_cycles"] == 60, "the stalled queue's stall cycles are reported")
            check(clean is None or clean["stall_cycles"] == 0, "no stall without a fault")
            check(results[0]["hazards_by_kind"] == results[1]["hazards_by_kind"] and
                  results[0]["chips"] == results[1]["chips"], "the same hazards on 1 and 2 ranks")
    failed = [w for ok, w in checks if not ok]
    for ok, what in checks:
        print(("ok: " if ok else "FAIL: ") + what)
    print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
