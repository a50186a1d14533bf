#!/usr/bin/env python3
"""Parallel efficiency of the PDES runtime from 1 to 2 MPI ranks: alternating series of BM_PdesRing64.

Runs `tsp_bench --benchmark_filter=PdesRing64` under `mpirun -np 1` and `-np 2` in turn, SERIES times each,
and prints per workload the minimum and median wall time per run on each rank count and the efficiency
t(1) / (2 t(2)) from the minima and from the medians (as docs/performance.md tabulates it).
Usage: tests/bench/pdes_efficiency.py BUILD_DIR [--series N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run_once(bench, ranks):
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    cmd = ["mpirun", "-np", str(ranks), bench, "--benchmark_filter=PdesRing64", "--benchmark_format=json"]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        name = b["name"].split("/iterations")[0].replace("BM_PdesRing64/", "")
        rows[name] = (b["real_time"], b.get("windows/run", 0), b.get("events/run", 0))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("--series", type=int, default=6)
    args = parser.parse_args()
    bench = os.path.join(args.build_dir, "tests", "bench", "tsp_bench")
    if not os.access(bench, os.X_OK):
        sys.exit(f"pdes_efficiency: {bench} is not built")
    times = {1: {}, 2: {}}
    meta = {}
    for _ in range(args.series):
        for ranks in (1, 2):
            for name, (t, windows, events) in run_once(bench, ranks).items():
                times[ranks].setdefault(name, []).append(t)
                meta[(name, ranks)] = (windows, events)
    load = os.getloadavg()[0]
    print(f"load average at the end: {load:.2f}; {args.series} alternating series of 10 iterations each")
    print("| steps/hidden | events per run | windows 1 / 2 ranks | t(1) min / median ms | t(2) min / median ms |"
          " efficiency from minima / medians |")
    print("|---|---|---|---|---|---|")
    for name in times[1]:
        t1, t2 = times[1][name], times[2][name]
        m1, m2 = min(t1), min(t2)
        d1, d2 = statistics.median(t1), statistics.median(t2)
        print(f"| {name} | {meta[(name, 1)][1]:,.0f} | {meta[(name, 1)][0]:.0f} / {meta[(name, 2)][0]:.0f} |"
              f" {m1:.2f} / {d1:.2f} | {m2:.2f} / {d2:.2f} | {100 * m1 / (2 * m2):.0f} % / {100 * d1 / (2 * d2):.0f} % |")


if __name__ == "__main__":
    main()
