"""Ring collectives on 128 to 1,024 chips against the alpha-beta formula, end to end through tsp-sim.

usage: collective_scale.py TSP_SIM

For rings of 128, 256, 512 and 1,024 chips, all-reduce, all-gather and reduce-scatter of 64 MiB per
chip, all-reduce of 1 MiB, and the 1,024-chip all-reduce with ASTRA-sim's link figures (50 GiB/s of
payload per direction, no framing, 500 ns per hop) run through tsp-sim. Each run must have no
hazard, the compiler's prediction equal to the simulation on every chip, and a makespan within 2 %
of the alpha-beta formula (docs/validation.md), 4 % for the 1 MiB all-reduce with ASTRA-sim's links
(4 vectors per ring step: the step's fixed time dominates, and a reducing step's vectors cross the
chip to the VXM and back, about 18 cycles a step more than the turnaround below):

  all-reduce    T = 2(p-1) alpha + 2 (p-1)/p n beta
  all-gather, reduce-scatter    T = (p-1) alpha + (p-1)/p n beta

alpha = link latency + the on-chip turnaround of a ring step (19 cycles, 23 when it reduces),
beta = cycles per payload byte; the link figures come from `tsp-sim --describe topology` (latency
in cycles, injection bandwidth = 2 links of a ring chip). n is the bytes the ring moves: whole
320-byte vectors per chunk of n/p (at 1 MiB on 1,024 chips 4 vectors, not 3.2). Prints the table of
docs/validation.md.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

CLOCK_HZ = 900e6
VECTOR_BYTES = 320
TURNAROUND = {True: 23, False: 19}  # MEM read 2 + C2C send 8 + receive 8 + MEM write 1 (+ VXM add 4)
TOLERANCE = 0.02
TOLERANCE_ASTRA_1MIB = 0.04

ASTRA = ("  chip: {c2c: {framing_overhead: 0}}\n"
         "  link: {lanes: 1, gbps_per_lane: 429.4967296, latency_ns: 500}\n")


def write_config(directory, chips, extra=""):
    path = os.path.join(directory, f"ring{chips}{'-astra' if extra else ''}.yaml")
    with open(path, "w") as f:
        f.write(f"cluster:\n  topology: {{kind: ring, chips: {chips}}}\n{extra}model:\n  builtin: collective\n")
    return path


def link_figures(tsp_sim, config, chips):
    """(latency cycles, payload bytes per cycle of one link direction) as tsp-sim describes the ring."""
    out = subprocess.run([tsp_sim, "--config", config, "--describe", "topology"], capture_output=True, text=True,
                         check=True).stdout
    latency = re.search(r"link latency:\s+(\d+) to (\d+) cycles", out)
    injection = re.search(r"injection bandwidth:\s+([0-9.]+) GB/s", out)
    assert latency and latency.group(1) == latency.group(2), out
    per_link = float(injection.group(1)) * 1e9 / chips / 2  # a ring chip has two links
    return int(latency.group(1)), per_link / CLOCK_HZ


def formula(op, p, n, latency, bytes_per_cycle):
    reduce = op != "allgather"
    alpha = latency + TURNAROUND[reduce]
    beta = 1.0 / bytes_per_cycle
    steps = 2 * (p - 1) if op == "allreduce" else p - 1
    return steps * alpha + steps / p * n * beta


def main():
    tsp_sim = sys.argv[1]
    failures = []
    cases = []
    for chips in (128, 256, 512, 1024):
        for op in ("allreduce", "allgather", "reducescatter"):
            cases.append((chips, op, 64 << 20, False))
        cases.append((chips, "allreduce", 1 << 20, False))
    cases += [(1024, "allreduce", 64 << 20, True), (1024, "allreduce", 1 << 20, True)]
    print("| chips | link | op | bytes | simulated cycles | formula | difference |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        figures = {}
        for chips, op, size, astra in cases:
            config = write_config(directory, chips, ASTRA if astra else "")
            if config not in figures:
                figures[config] = link_figures(tsp_sim, config, chips)
            latency, bytes_per_cycle = figures[config]
            run = subprocess.run([tsp_sim, "--config", config, "--quiet", "--json", "--out",
                                  os.path.join(directory, "trace.h5"), "--model",
                                  f"builtin:collective,op={op},bytes={size},algorithm=ring"],
                                 capture_output=True, text=True)
            name = f"{chips} chips {'ASTRA-sim links' if astra else 'default links'} {op} {size} B"
            if run.returncode != 0:
                failures.append(f"{name}: exit {run.returncode}: {run.stderr.strip()}")
                continue
            summary = json.loads(run.stdout)
            if summary["hazards_counted"]:
                failures.append(f"{name}: {summary['hazards_counted']} hazards")
            for chip in summary["chips"]:
                if chip["predicted_cycles"] != chip["simulated_cycles"]:
                    failures.append(f"{name}: chip {chip['chip']} predicted {chip['predicted_cycles']}, "
                                    f"simulated {chip['simulated_cycles']}")
                    break
            vectors = -(-size // VECTOR_BYTES)
            moved = -(-vectors // chips) * chips * VECTOR_BYTES
            want = formula(op, chips, moved, latency, bytes_per_cycle)
            got = summary["makespan_cycles"]
            difference = (got - want) / want
            print(f"| {chips} | {'ASTRA-sim' if astra else 'default'} | {op} | {size} | {got} | {want:.0f} | "
                  f"{100 * difference:+.2f}% |")
            tolerance = TOLERANCE_ASTRA_1MIB if astra and size < (64 << 20) else TOLERANCE
            if abs(difference) > tolerance:
                failures.append(f"{name}: {got} cycles, formula {want:.0f} ({100 * difference:+.2f}%)")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
