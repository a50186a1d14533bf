# synthetic_trace: small tsp-sim traces (format version 1) built with h5py for the script tests.
"""Write traces that follow docs/trace-format.md, with numbers the tests can predict."""

import os
import subprocess
from pathlib import Path

import h5py
import numpy as np

KINDS = ("MEM", "VXM", "MXM", "SXM", "C2C")
# A reduced chip keeps the files tiny; the tool must not assume the 144 queues of groq-tsp-v1.
UNITS_PER_KIND = {"MEM": 6, "VXM": 2, "MXM": 2, "SXM": 2, "C2C": 2}
OPCODES = ("Read", "Write", "Add", "MatMul", "Shift", "Send", "Recv")
CLOCK_MHZ = 900.0
BIN_CYCLES = 50

SOURCE_DIR = Path(os.environ.get("TSP_SOURCE_DIR", Path(__file__).resolve().parents[2]))
TOOL = SOURCE_DIR / "scripts" / "tsp-trace"
PYTHON = "/usr/bin/python3"


def run_tool(*args):
    """Run scripts/tsp-trace with Debian's python3 (the one with h5py)."""
    return subprocess.run([PYTHON, str(TOOL), *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "MPLBACKEND": "Agg"})


def unit_table():
    rows, unit = [], 0
    for kind in KINDS:
        for s in range(UNITS_PER_KIND[kind]):
            rows.append((unit, kind.encode(), s))
            unit += 1
    return np.array(rows, dtype=[("unit", "<i4"), ("kind", "S8"), ("slice", "<i4")])


def ring_links(chips):
    if chips < 2:
        return []
    pairs = [(c, (c + 1) % chips) for c in range(chips)]
    return pairs[:1] if chips == 2 else pairs


def chip_cycles(chip):
    return 1000 + 100 * chip


def write_trace(path, level="summary", chips=4, plans=False, ranks=1, ops=False):
    """Write a trace at trace level `level`; returns the per-chip rows it stored. With `ops`, instruction rows
    name ops of /names/ops: a chip's n instructions run three layers one after another, instruction k in op and
    layer 3k // n."""
    units = unit_table()
    kinds = [k.decode() for k in units["kind"]]
    links = ring_links(chips)
    makespan = max(chip_cycles(c) for c in range(chips))
    rng = np.random.default_rng(7)
    str_t = h5py.string_dtype()
    with h5py.File(path, "w") as f:
        meta = f.create_group("meta")
        meta.attrs["format_version"] = np.int32(1)
        meta.attrs["tool_version"] = "tsp-sim 0.1.0-test"
        meta.attrs["config_yaml"] = f"cluster:\n  topology: {{kind: ring, chips: {chips}}}\n"
        meta.attrs["plan_yaml"] = f"dp: {chips}\ntp: 1\npp: 1\nmicrobatches: 1\n"
        meta.attrs["clock_mhz"] = np.float64(CLOCK_MHZ)
        meta.attrs["chip_count"] = np.int64(chips)
        meta.attrs["link_count"] = np.int64(len(links))
        meta.attrs["trace_level"] = level
        meta.attrs["ranks"] = np.int32(ranks)
        meta.attrs["rank_mapping"] = "block"
        meta.attrs["created"] = "2024-01-01T00:00:00Z"
        meta.attrs["wall_seconds"] = np.float64(0.5)
        meta.attrs["seed"] = np.int64(0)

        busy = np.zeros((chips, len(units)), dtype=np.int64)
        for c in range(chips):
            busy[c] = (np.arange(len(units)) * 7 + 13 * c) % chip_cycles(c)
        chip_dtype = [("chip", "<i4")] + [(n, "<i8") for n in (
            "cycles", "predicted_cycles", "lower_bound_cycles", "instructions",
            "busy_mem", "busy_vxm", "busy_mxm", "busy_sxm", "busy_c2c",
            "bytes_sent", "bytes_received", "sram_peak_bytes")]
        chip_rows = []
        for c in range(chips):
            per_kind = [int(busy[c, [i for i, k in enumerate(kinds) if k == kind]].sum()) for kind in KINDS]
            chip_rows.append((c, chip_cycles(c), chip_cycles(c) - 10, 900, 40 + c, *per_kind,
                              320 * c, 320 * (chips - c), (1 << 20) + 4096 * c))
        chip_arr = np.array(chip_rows, dtype=chip_dtype)
        summary = f.create_group("summary")
        summary["chips"] = chip_arr
        summary["units"] = units
        summary["unit_busy_cycles"] = busy
        link_dtype = [("link", "<i4"), ("a", "<i4"), ("b", "<i4"), ("bytes_ab", "<i8"),
                      ("bytes_ba", "<i8"), ("busy_cycles_ab", "<i8"), ("busy_cycles_ba", "<i8"),
                      ("latency_cycles", "<i8"), ("bytes_per_cycle", "<f8")]
        summary["links"] = np.array([(i, a, b, 320, 160, 100 + 50 * i, 40, 225, 16.0)
                                     for i, (a, b) in enumerate(links)], dtype=link_dtype)
        summary["run"] = np.array([(makespan, makespan / (CLOCK_MHZ * 1e6), 8 / (makespan / (CLOCK_MHZ * 1e6)),
                                    8, chips, 1)],
                                  dtype=[("makespan_cycles", "<i8"), ("makespan_seconds", "<f8"),
                                         ("throughput_per_second", "<f8"), ("samples", "<i8"),
                                         ("chips", "<i4"), ("iterations", "<i4")])

        bins = makespan // BIN_CYCLES + 1
        util = rng.random((chips, len(KINDS), bins)).astype(np.float32)
        ds = f.create_dataset("timeline/utilization", data=util)
        ds.attrs["bin_cycles"] = np.int64(BIN_CYCLES)

        if level in ("links", "instructions"):
            events = []
            for i, (a, b) in enumerate(links):
                events.append((a, b, i, 100 + i, 325 + i, 320))
                events.append((b, a, i, 500 + i, 725 + i, 160))
            f.create_dataset("events/c2c", data=np.array(events, dtype=[
                ("src_chip", "<i4"), ("dst_chip", "<i4"), ("link", "<i4"), ("send_cycle", "<i8"),
                ("arrive_cycle", "<i8"), ("bytes", "<i8")]), chunks=True, compression="gzip")
        if level == "instructions":
            rows = []
            for c in range(chips):
                count = 40 + c
                for k in range(count):
                    unit = k % len(units)
                    start = 20 * k
                    row = (c, unit, units["slice"][unit], k % len(OPCODES), k, start, start + 15 + (k % 3), 1)
                    rows.append(row + ((3 * k // count,) if ops else ()))
            fields = [("chip", "<i4"), ("unit", "<i4"), ("slice", "<i4"), ("opcode", "<i2"),
                      ("program_index", "<i8"), ("start_cycle", "<i8"), ("end_cycle", "<i8"), ("repeat", "<i4")]
            ds = f.create_dataset("events/instructions", data=np.array(
                rows, dtype=fields + ([("op", "<i4")] if ops else [])), chunks=True, compression="gzip")
            if ops:
                f.create_dataset("names/ops", data=np.array(
                    [(f"fc{i}", "MatMul", i, f"fc{i}.out") for i in range(3)],
                    dtype=[("op", "S160"), ("kind", "S160"), ("layer", "<i4"), ("tensor", "S160")]))
            ds.attrs["opcode_names"] = ",".join(OPCODES)
        if plans:
            plan_rows = []
            for r, (dp, tp, pp) in enumerate([(4, 1, 1), (2, 2, 1), (1, 4, 1), (2, 1, 2), (1, 2, 2),
                                              (1, 1, 4), (1, 1, 1), (8, 1, 1)]):
                n = dp * tp * pp
                plan_rows.append((r, f"dp{dp}-tp{tp}-pp{pp}", dp, tp, pp, 4, n,
                                  1000.0 * n / (1 + 0.3 * tp + 0.2 * pp), 0.01 * (1 + pp) / tp, n <= 4))
            f.create_dataset("search/plans", data=np.array(plan_rows, dtype=[
                ("rank", "<i4"), ("plan", str_t), ("dp", "<i4"), ("tp", "<i4"), ("pp", "<i4"),
                ("microbatches", "<i4"), ("chips", "<i4"), ("throughput_per_second", "<f8"),
                ("latency_seconds", "<f8"), ("feasible", "u1")]))
    return chip_arr
