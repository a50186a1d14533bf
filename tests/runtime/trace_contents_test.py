#!/usr/bin/env python3
"""Runs a config on 2 ranks and checks the trace against docs/trace-format.md and the --json summary."""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np


def merged(intervals):
    out = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def time_split(events, kinds, opcodes, names, chip_row, makespan):
    """docs/trace-format.md's compute / comm / bubble / other split of one chip, from its instruction rows."""
    rows = events[events["chip"] == chip_row["chip"]]
    rows = rows[rows["opcode"] != opcodes.index("Nop")]
    c2c = kinds[rows["unit"]] == b"C2C"
    moving = set(int(o) for o in rows["op"][c2c])
    is_moving = np.array([int(o) in moving for o in rows["op"]], dtype=bool)
    spans = list(zip(rows["start_cycle"].tolist(), rows["end_cycle"].tolist()))
    compute = merged([s for s, m in zip(spans, is_moving) if not m])
    busy = merged(spans)
    compute_cycles = sum(b - a for a, b in compute)
    comm = sum(b - a for a, b in busy) - compute_cycles
    starts = {}
    for (a, _), m, op in zip(spans, is_moving, rows["op"]):
        if m:
            starts[a] = starts.get(a, False) or names["kind"][op] in (b"Send", b"Receive")
    bubble = other = 0
    idle_from = 0
    for a, b in busy:
        if a > idle_from:
            if idle_from == 0 or starts.get(a):
                bubble += a - idle_from
            elif a in starts:
                comm += a - idle_from
            else:
                other += a - idle_from
        idle_from = b
    end = max(int(chip_row["cycles"]), idle_from)
    other += end - idle_from
    bubble += makespan - end
    return compute_cycles, comm, bubble, other


def main():
    exe, config = sys.argv[1], sys.argv[2]
    checks = []

    def check(cond, what):
        checks.append((bool(cond), what))

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace.h5")
        result = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", exe, "--config", config, "--out", out,
                                 "--trace-level", "instructions", "--json", "--quiet"], capture_output=True, text=True, timeout=300)
        check(result.returncode == 0, f"tsp-sim exits 0 (got {result.returncode}: {result.stderr.strip()})")
        if result.returncode != 0:
            print(result.stderr)
            sys.exit(1)
        summary = json.loads(result.stdout)
        check(not os.path.exists(out + ".tmp"), "no temporary file is left behind")
        with h5py.File(out, "r") as f:
            meta = f["meta"].attrs
            check(meta["format_version"] == 1, "format_version is 1")
            check(meta["ranks"] == 2, "ranks attribute records 2 ranks")
            check("output" not in str(meta["config_yaml"]), "stored config leaves out output.*")
            check("pp:" in str(meta["plan_yaml"]), "plan YAML is stored")
            chips = f["summary/chips"][:]
            n = int(meta["chip_count"])
            check(len(chips) == n, "one /summary/chips row per chip")
            check(list(chips["chip"]) == list(range(n)), "rows are in chip order")
            check(np.array_equal(chips["cycles"], chips["predicted_cycles"]),
                  "simulated cycles equal the compiler's prediction on every chip")
            check(np.all(chips["cycles"] >= chips["lower_bound_cycles"]), "cycles are at least the lower bound")
            run = f["summary/run"][0]
            check(run["makespan_cycles"] == chips["cycles"].max(), "makespan is the slowest chip")
            check(run["makespan_cycles"] == summary["makespan_cycles"], "trace and --json agree on the makespan")
            check(abs(run["makespan_seconds"] - run["makespan_cycles"] / (meta["clock_mhz"] * 1e6)) < 1e-12,
                  "makespan seconds follow from the clock")
            links = f["summary/links"][:]
            check(len(links) == meta["link_count"], "one /summary/links row per link")
            check(links["bytes_ab"].sum() + links["bytes_ba"].sum() == chips["bytes_sent"].sum(),
                  "bytes on links equal bytes sent")
            check(chips["bytes_sent"].sum() == chips["bytes_received"].sum(), "every byte sent is received")
            busy = f["summary/unit_busy_cycles"][:]
            check(busy.shape == (n, len(f["summary/units"])), "unit_busy_cycles is chips x units")
            kinds = np.array(f["summary/units"]["kind"])
            mxm = busy[:, kinds == b"MXM"].sum(axis=1)
            check(np.array_equal(mxm, chips["busy_mxm"]), "per-unit busy cycles add up to the per-kind column")
            util = f["timeline/utilization"]
            check(util.shape[0] == n and util.shape[1] == 5, "timeline is chips x 5 kinds x bins")
            check(float(np.max(util[:])) <= 1.0 and float(np.max(util[:])) > 0, "utilisation fractions in (0, 1]")
            # Attribution: every event row names an op of /names/ops; the static per-layer work adds up to
            # what the simulator counted on the chips.
            names = f["names/ops"][:]
            events = f["events/instructions"][:]
            c2c = f["events/c2c"][:]
            check(len(names) > 0, "/names/ops names the ops")
            check(np.all((events["op"] >= 0) & (events["op"] < len(names))), "every instruction row names an op")
            check(np.all((c2c["op"] >= 0) & (c2c["op"] < len(names))), "every C2C row names an op")
            opcodes = [n.strip() for n in str(f["events/instructions"].attrs["opcode_names"]).split(",")]
            sends = events["opcode"] == opcodes.index("C2cSend")
            check(sends.any() and all(names["kind"][o] == b"Send" for o in events["op"][sends]),
                  "C2C send instructions name the sent tensor's op as a Send")
            check(set(c2c["op"]) == set(events["op"][sends]), "C2C rows name the ops of their send instructions")
            check(np.all(names["kind"][c2c["op"]] == b"Send"), "C2C rows name Send origins")
            layers, ops = f["summary/layers"][:], f["summary/ops"][:]
            check(len(ops) == len(names), "one /summary/ops row per name")
            for kind in ("mem", "vxm", "mxm", "sxm", "c2c"):
                check(layers[f"busy_{kind}"].sum() == chips[f"busy_{kind}"].sum() == ops[f"busy_{kind}"].sum(),
                      f"busy_{kind} of the layers and ops adds up to the chips'")
            check(layers["instructions"].sum() == chips["instructions"].sum() == len(events),
                  "the layers' instructions add up to the chips' and to the instruction rows")
            check(layers["c2c_bytes"].sum() == chips["bytes_sent"].sum(), "the layers' C2C bytes are the bytes sent")
            check(np.all(layers["cycles"] <= run["makespan_cycles"]) and np.all(layers["cycles"] > 0),
                  "a layer's active cycles lie within the makespan")
            check(list(layers["id"]) == sorted(set(int(x) for x in names["layer"])), "a layers row per layer with work")
            # The time split, re-derived from the instruction rows: compute, communication (ops that move data),
            # pipeline bubble and other idle add up to the makespan on every chip.
            split = ("compute_cycles", "comm_cycles", "bubble_cycles", "other_cycles")
            check(all(int(sum(row[k] for k in split)) == run["makespan_cycles"] for row in chips),
                  "compute, comm, bubble and other cycles add up to the makespan on every chip")
            check(all(time_split(events, kinds, opcodes, names, row, run["makespan_cycles"]) ==
                      tuple(int(row[k]) for k in split) for row in chips),
                  "the time split follows from the instruction rows")
            check(chips["bubble_cycles"][0] > chips["bubble_cycles"][-1] > 0,
                  "the pipeline's first stage waits longest for the makespan, the last for its first data")
            check(f["summary/chips"].chunks is not None and f["summary/chips"].compression == "gzip",
                  "datasets are chunked and compressed")
        for c in summary["chips"]:
            check(c["predicted_cycles"] == c["simulated_cycles"], f"--json chip {c['chip']}: predicted == simulated")
    failed = [w for ok, w in checks if not ok]
    for ok, what in checks:
        print(("ok: " if ok else "FAIL: ") + what)
    print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
