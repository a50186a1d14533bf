# tsp_trace: the reader API for tsp-sim HDF5 traces (format version 1): open, validate, tabulate, export.
"""Read tsp-sim traces from Python: ``with tsp_trace.Trace(path) as t: tsp_trace.chips_table(t).records()``.

The tsp-trace command is built on this module; docs/trace-format.md describes the layout read here.
"""

import csv
import io
import os
import sqlite3
from pathlib import Path

import h5py
import numpy as np

FORMAT_VERSION = 1
KINDS = ("MEM", "VXM", "MXM", "SXM", "C2C")
KIND_COLORS = {"MEM": "tab:blue", "VXM": "tab:orange", "MXM": "tab:green",
               "SXM": "tab:red", "C2C": "tab:purple"}
# Perfetto thread ids for C2C tracks sit above any instruction-queue id.
C2C_SEND_TID = 1_000_000
C2C_RECV_TID = 2_000_000
EVENT_CHUNK = 1 << 16


class TraceError(Exception):
    """A user-facing problem with an input file or argument."""


def text(value):
    """Decode an HDF5 string (fixed-length bytes, vlen bytes or str) to str."""
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).rstrip(b"\0").decode("utf-8", "replace").strip()
    return str(value).rstrip("\0").strip()


def native(value):
    """Turn a numpy scalar into a Python value for json/csv."""
    if isinstance(value, (bytes, np.bytes_)):
        return text(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


class Trace:
    """An open, validated trace file."""

    def __init__(self, path):
        self.path = str(path)
        if not os.path.exists(self.path):
            raise TraceError(f"{self.path}: no such file")
        if not h5py.is_hdf5(self.path):
            raise TraceError(f"{self.path} is not an HDF5 file")
        try:
            self.h5 = h5py.File(self.path, "r")
        except OSError as exc:
            raise TraceError(f"{self.path}: cannot open: {exc}") from exc
        meta = self.h5.get("/meta")
        if not isinstance(meta, h5py.Group) or "format_version" not in meta.attrs:
            self.h5.close()
            raise TraceError(f"{self.path} is not a tsp-sim trace (no /meta/format_version)")
        version = int(meta.attrs["format_version"])
        if version != FORMAT_VERSION:
            self.h5.close()
            raise TraceError(f"{self.path} has trace format_version {version}; "
                             f"this tsp-trace reads version {FORMAT_VERSION}")
        self.meta = {k: native(v) for k, v in meta.attrs.items()}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.h5.close()

    @property
    def stem(self):
        name = Path(self.path).name
        return name[:-3] if name.endswith(".h5") else Path(self.path).stem

    @property
    def clock_mhz(self):
        clock = float(self.meta.get("clock_mhz", 0.0))
        if clock <= 0:
            raise TraceError(f"{self.path}: /meta clock_mhz is {clock}, expected > 0")
        return clock

    def has(self, name):
        return name in self.h5

    def dataset(self, name):
        """Return a required dataset or say clearly that it is missing."""
        ds = self.h5.get(name)
        if not isinstance(ds, h5py.Dataset):
            raise TraceError(f"{self.path} has no {name}")
        return ds

    def read(self, name):
        return self.dataset(name)[()]

    def run(self):
        rows = self.read("/summary/run")
        if len(rows) == 0:
            raise TraceError(f"{self.path}: /summary/run is empty")
        return {k: native(rows[0][k]) for k in rows.dtype.names}

    def unit_kinds(self):
        """Kind name of every instruction queue, indexed by its row in /summary/units."""
        units = self.read("/summary/units")
        return [text(k) for k in units["kind"]], units

    def opcode_names(self):
        ds = self.dataset("/events/instructions")
        raw = ds.attrs.get("opcode_names", "")
        return [n.strip() for n in text(raw).split(",")] if text(raw) else []


# ----------------------------------------------------------------------------- tables

class Table:
    """A named table: column names and rows of Python values."""

    def __init__(self, name, columns, rows):
        self.name, self.columns, self.rows = name, list(columns), [list(r) for r in rows]

    def records(self):
        return [dict(zip(self.columns, r)) for r in self.rows]


def ratio(num, den):
    return float(num) / float(den) if den else 0.0


def chips_table(trace):
    chips = trace.read("/summary/chips")
    kinds, _ = trace.unit_kinds()
    units_of = {k: kinds.count(k) for k in KINDS}
    base = list(chips.dtype.names)
    columns = base + [f"util_{k.lower()}" for k in KINDS] + ["util_link"]
    # A chip's busiest outgoing link direction (the C2C queues' mean hides a saturated link).
    link_busy = {}
    if trace.has("/summary/links"):
        for link in trace.read("/summary/links"):
            for chip, busy in ((int(link["a"]), int(link["busy_cycles_ab"])), (int(link["b"]), int(link["busy_cycles_ba"]))):
                link_busy[chip] = max(link_busy.get(chip, 0), busy)
    rows = []
    for row in chips:
        values = [native(row[c]) for c in base]
        cycles = int(row["cycles"])
        # Utilisation of a kind is its busy cycles over the cycles all its units had.
        values += [ratio(row[f"busy_{k.lower()}"], cycles * units_of[k]) for k in KINDS]
        values.append(ratio(link_busy.get(int(row["chip"]), 0), cycles))
        rows.append(values)
    return Table("chips", columns, rows)


def units_table(trace, per_unit=False):
    chips = trace.read("/summary/chips")
    kinds, units = trace.unit_kinds()
    busy = trace.read("/summary/unit_busy_cycles")
    if busy.shape != (len(chips), len(units)):
        raise TraceError(f"{trace.path}: /summary/unit_busy_cycles has shape {busy.shape}, "
                         f"expected ({len(chips)}, {len(units)})")
    kind_arr = np.array(kinds)
    rows = []
    if per_unit:
        columns = ["chip", "unit", "kind", "slice", "busy_cycles", "utilization"]
        for ci, chip in enumerate(chips):
            cycles = int(chip["cycles"])
            for ui, unit in enumerate(units):
                rows.append([int(chip["chip"]), int(unit["unit"]), kinds[ui], int(unit["slice"]),
                             int(busy[ci, ui]), ratio(busy[ci, ui], cycles)])
        return Table("units", columns, rows)
    columns = ["chip", "kind", "units", "busy_cycles", "utilization",
               "max_unit_busy_cycles", "max_unit_utilization"]
    for ci, chip in enumerate(chips):
        cycles = int(chip["cycles"])
        for kind in KINDS:
            sel = busy[ci, kind_arr == kind]
            if sel.size == 0:
                continue
            total, peak = int(sel.sum()), int(sel.max())
            rows.append([int(chip["chip"]), kind, int(sel.size), total,
                         ratio(total, cycles * sel.size), peak, ratio(peak, cycles)])
    return Table("units", columns, rows)


def link_utilization(links, makespan):
    """Busy fraction of each link per direction, over the run's makespan."""
    ab = links["busy_cycles_ab"].astype(np.float64)
    ba = links["busy_cycles_ba"].astype(np.float64)
    if makespan <= 0:
        return np.zeros_like(ab), np.zeros_like(ba)
    return ab / makespan, ba / makespan


def links_table(trace):
    links = trace.read("/summary/links")
    makespan = int(trace.run()["makespan_cycles"])
    util_ab, util_ba = link_utilization(links, makespan)
    base = list(links.dtype.names)
    columns = base + ["util_ab", "util_ba", "utilization"]
    rows = []
    for i, row in enumerate(links):
        rows.append([native(row[c]) for c in base]
                    + [float(util_ab[i]), float(util_ba[i]), float(max(util_ab[i], util_ba[i]))])
    return Table("links", columns, rows)


def run_table(trace):
    run = trace.run()
    extra = {"clock_mhz": float(trace.meta.get("clock_mhz", 0.0)),
             "trace_level": text(trace.meta.get("trace_level", "")),
             "ranks": native(trace.meta.get("ranks", 0)),
             "tool_version": text(trace.meta.get("tool_version", ""))}
    columns = list(run) + list(extra)
    return Table("run", columns, [list(run.values()) + list(extra.values())])


def format_cell(value):
    if isinstance(value, float):
        return f"{value:.5g}"
    return str(value)


def render_text(table):
    cells = [[format_cell(v) for v in r] for r in table.rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(table.columns)]
    out = [table.name + ":",
           "  ".join(c.rjust(w) for c, w in zip(table.columns, widths))]
    out += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in cells]
    if not cells:
        out.append("(no rows)")
    return "\n".join(out) + "\n"


def render_csv(table):
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(table.rows)
    return buf.getvalue()




def op_names(trace):
    """The /names/ops rows (op, kind, layer, tensor) that the events' and summaries' `op` ids index."""
    names = trace.read("/names/ops")
    return [{"op": text(r["op"]), "kind": text(r["kind"]), "layer": int(r["layer"]), "tensor": text(r["tensor"])}
            for r in names]


def work_columns(rows, slots):
    """Share of all busy unit-cycles and per-kind utilisation (busy over chip_cycles x issue slots) of work rows."""
    total = sum(sum(int(r[f"busy_{k.lower()}"]) for k in KINDS) for r in rows)
    out = []
    for r in rows:
        busy = sum(int(r[f"busy_{k.lower()}"]) for k in KINDS)
        util = [ratio(r[f"busy_{k.lower()}"], int(r["chip_cycles"]) * slots[k]) for k in KINDS]
        if "link_busy" in r.dtype.names:  # C2C: its busiest queue (a port's direction), not the queues' mean
            util[KINDS.index("C2C")] = float(r["link_busy"])
        out.append([ratio(busy, total)] + util)
    return out


def issue_slots(trace):
    """Busy cycles a kind of unit can give per chip-cycle: its queues, two ports per MEM slice."""
    kinds, _ = trace.unit_kinds()
    return {k: kinds.count(k) * (2 if k == "MEM" else 1) for k in KINDS}


def layers_table(trace):
    """The work of each layer (/summary/layers): cycles, share, unit utilisation, bytes moved, SRAM."""
    rows = trace.read("/summary/layers")
    extra = work_columns(rows, issue_slots(trace))
    base = [c for c in rows.dtype.names if c != "id"]
    columns = ["layer"] + base + ["share"] + [f"util_{k.lower()}" for k in KINDS]
    return Table("layers", columns,
                 [[int(r["id"])] + [native(r[c]) for c in base] + e for r, e in zip(rows, extra)])


def ops_table(trace, top=None):
    """The work of each op (/summary/ops) with its names, busiest first; `top` keeps that many."""
    rows = trace.read("/summary/ops")
    names = op_names(trace)
    extra = work_columns(rows, issue_slots(trace))
    base = [c for c in rows.dtype.names if c != "id"]
    columns = ["op_id", "op", "kind", "layer", "tensor"] + base + ["share"] + [f"util_{k.lower()}" for k in KINDS]
    out = []
    for r, e in zip(rows, extra):
        n = names[int(r["id"])]
        if int(r["instructions"]) == 0:
            continue
        out.append([int(r["id"]), n["op"], n["kind"], n["layer"], n["tensor"]] + [native(r[c]) for c in base] + e)
    share = columns.index("share")
    out.sort(key=lambda row: -row[share])
    return Table("ops", columns, out[:top] if top else out)


def plans_table(trace):
    """The search's ranked plans (/search/plans), one row per plan."""
    plans = trace.read("/search/plans")
    columns = list(plans.dtype.names)
    return Table("plans", columns, [[native(row[c]) for c in columns] for row in plans])


def event_table(trace, name):
    """One event dataset (/events/instructions or /events/c2c) as a table; rows not reached (chip -1) dropped."""
    ds = trace.dataset(f"/events/{name}")
    columns = list(ds.dtype.names)
    rows = []
    first = "chip" if "chip" in columns else columns[0]
    for lo in range(0, ds.shape[0], EVENT_CHUNK):
        chunk = ds[lo:lo + EVENT_CHUNK]
        chunk = chunk[chunk[first] >= 0] if first in ("chip", "src_chip") else chunk
        rows.extend(zip(*(chunk[c].tolist() for c in columns)))
    return Table(name, columns, rows)


def all_tables(trace, events=False):
    """Every table a trace holds: run, chips, units (per kind and per unit), links, plans; events on request."""
    tables = [run_table(trace), chips_table(trace), units_table(trace), units_table(trace, per_unit=True)]
    tables[-1].name = "unit_busy"
    if trace.has("/summary/links"):
        tables.append(links_table(trace))
    if trace.has("/summary/layers"):
        tables += [layers_table(trace), ops_table(trace)]
    if trace.has("/search/plans"):
        tables.append(plans_table(trace))
    if events:
        tables += [event_table(trace, n) for n in ("instructions", "c2c") if trace.has(f"/events/{n}")]
    return tables


def sql_type(values):
    """The SQLite column type of a column's Python values."""
    kinds = {type(v) for v in values if v is not None}
    if kinds and kinds <= {int, bool}:
        return "INTEGER"
    if kinds and kinds <= {int, bool, float}:
        return "REAL"
    return "TEXT"


def write_sqlite(tables, path):
    """Write the tables into a new SQLite database at path (replaced if it exists)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        if os.path.exists(tmp):
            os.remove(tmp)
        with sqlite3.connect(tmp) as db:
            for table in tables:
                types = [sql_type([r[i] for r in table.rows]) for i in range(len(table.columns))]
                cols = ", ".join(f'"{c}" {t}' for c, t in zip(table.columns, types))
                db.execute(f'CREATE TABLE "{table.name}" ({cols})')
                marks = ", ".join("?" * len(table.columns))
                db.executemany(f'INSERT INTO "{table.name}" VALUES ({marks})', table.rows)
        db.close()
        os.replace(tmp, path)
    except (OSError, sqlite3.Error) as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise TraceError(f"cannot write {path}: {exc}") from exc


def write_csv_dir(tables, directory):
    """Write each table as DIRECTORY/<name>.csv; returns the paths written."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for table in tables:
            path = directory / f"{table.name}.csv"
            path.write_text(render_csv(table), encoding="utf-8")
            paths.append(path)
        return paths
    except OSError as exc:
        raise TraceError(f"cannot write {directory}: {exc.strerror or exc}") from exc
