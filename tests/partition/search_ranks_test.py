#!/usr/bin/env python3
"""The search gives the same ranking, best plan and /search/plans on 1, 2 and 3 MPI ranks.

usage: search_ranks_test.py TSP_SIM CONFIG OUT_DIR
"""
import json
import os
import subprocess
import sys

import h5py

tsp_sim, config, out_dir = sys.argv[1:4]
os.makedirs(out_dir, exist_ok=True)
results = {}
for ranks in (1, 2, 3):
    trace = os.path.join(out_dir, f"search_np{ranks}.h5")
    command = ["mpirun", "-np", str(ranks), "--oversubscribe", tsp_sim, "--config", config, "--search-only",
               "--json", "--out", trace]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        sys.exit(f"FAIL: {ranks} ranks exited {run.returncode}")
    summary = json.loads(run.stdout)
    summary.pop("plan_file")
    with h5py.File(trace, "r") as f:
        plans = f["/search/plans"][()]
    with open(trace.replace(".h5", ".plan.yaml")) as f:
        best = f.read()
    results[ranks] = (summary, plans.tobytes(), best)
    print(f"{ranks} ranks: best {summary['best']}, {summary['evaluated']} evaluated, {len(plans)} ranked")
    assert len(plans) > 1 and plans[0]["rank"] == 0
for ranks in (2, 3):
    for i, what in enumerate(("JSON summary", "/search/plans", "best plan YAML")):
        if results[ranks][i] != results[1][i]:
            sys.exit(f"FAIL: the {what} on {ranks} ranks differs from 1 rank")
print("ok")
