# tsp_trace.cli: the tsp-trace command line (tables, plots, Perfetto timelines, exports).
"""The tsp-trace subcommands, built on the tsp_trace reader API."""

import argparse
import json
import math
import re
import sys

import numpy as np

from tsp_trace import (C2C_RECV_TID, C2C_SEND_TID, EVENT_CHUNK, FORMAT_VERSION, KIND_COLORS, KINDS, Table, Trace,
                       TraceError, all_tables, chips_table, layers_table, link_utilization, links_table, native,
                       op_names, ops_table, render_csv,
                       render_text, run_table, text, units_table, write_csv_dir, write_sqlite)

MAX_LABELLED_CHIPS = 72  # a GroqRack: every chip drawn and labelled; larger clusters are drawn per group


def cmd_summary(args):
    with Trace(args.file) as trace:
        wanted = ["chips", "units", "links", "layers", "ops", "run"] if args.what == "all" else [args.what]
        builders = {"chips": chips_table, "links": links_table, "run": run_table, "layers": layers_table,
                    "ops": lambda t: ops_table(t, None if args.what == "ops" else 10),
                    "units": lambda t: units_table(t, args.per_unit)}
        needs = {"links": "/summary/links", "layers": "/summary/layers", "ops": "/summary/ops"}
        tables = []
        for name in wanted:
            if name in needs and not trace.has(needs[name]):
                if args.what == name:
                    raise TraceError(f"{trace.path} has no {needs[name]}")
                continue
            tables.append(builders[name](trace))
    if args.format == "json":
        doc = tables[0].records() if len(tables) == 1 else {t.name: t.records() for t in tables}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    elif args.format == "csv":
        # One table is plain CSV for pandas; several are separated by '# name' lines.
        if len(tables) == 1:
            sys.stdout.write(render_csv(tables[0]))
        else:
            sys.stdout.write("\n".join(f"# {t.name}\n{render_csv(t)}" for t in tables))
    else:
        sys.stdout.write("\n".join(render_text(t) for t in tables))
    return 0


# ----------------------------------------------------------------------------- plots

def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, out):
    try:
        fig.savefig(out, dpi=110, bbox_inches="tight")
    except OSError as exc:
        raise TraceError(f"cannot write {out}: {exc.strerror or exc}") from exc


def parse_chips(spec, count, default_max=4):
    if spec is None:
        return list(range(min(count, default_max)))
    try:
        chips = [int(c) for c in spec.split(",") if c.strip()]
    except ValueError as exc:
        raise TraceError(f"--chips expects comma-separated chip ids, got '{spec}'") from exc
    bad = [c for c in chips if not 0 <= c < count]
    if bad or not chips:
        raise TraceError(f"--chips {spec}: chip ids must be in 0..{count - 1}")
    return chips


def note(message):
    print(f"tsp-trace: {message}", file=sys.stderr)


def gantt_rows(kinds):
    """Y position of each unit: grouped by kind in the canonical order, then by unit row."""
    order = sorted(range(len(kinds)), key=lambda u: (KINDS.index(kinds[u]) if kinds[u] in KINDS
                                                     else len(KINDS), u))
    ypos = np.empty(len(kinds), dtype=np.int64)
    ypos[order] = np.arange(len(kinds))
    return ypos


def instruction_rows(trace, chips, start, end):
    """Instruction rows of the chosen chips overlapping [start, end), read in chunks."""
    ds = trace.dataset("/events/instructions")
    wanted = np.array(chips)
    parts = []
    for lo in range(0, ds.shape[0], EVENT_CHUNK):
        rows = ds[lo:lo + EVENT_CHUNK]
        keep = np.isin(rows["chip"], wanted)
        if start is not None:
            keep &= rows["end_cycle"] > start
        if end is not None:
            keep &= rows["start_cycle"] < end
        parts.append(rows[keep])
    return np.concatenate(parts) if parts else ds[0:0]


def microsecond_axis(ax, clock_mhz):
    """A second x axis on top of `ax` in microseconds (the bottom one counts cycles)."""
    top = ax.secondary_xaxis("top", functions=(lambda c: np.asarray(c) / clock_mhz,
                                               lambda t: np.asarray(t) * clock_mhz))
    top.set_xlabel(f"µs at {clock_mhz:g} MHz")
    return top


def utilization_norm(values, scale):
    """Colour normalisation for busy fractions: log (default) keeps low-utilisation runs visible."""
    from matplotlib.colors import LogNorm, Normalize
    if scale == "linear":
        return Normalize(vmin=0.0, vmax=1.0)
    positive = values[values > 0]
    floor = float(positive.min()) if positive.size else 1e-3
    return LogNorm(vmin=max(min(floor, 0.1), 1e-4), vmax=1.0)


def draw_layer_markers(ax, rows, layers, units):
    """Above a chip's units: one bar per model layer from its first instruction to its last on this chip,
    labelled with the layer. Returns the spans drawn, {layer: (first, last)}."""
    if layers is None or len(rows) == 0 or "op" not in rows.dtype.names:
        return {}
    ops = rows["op"].astype(np.int64)
    known = (ops >= 0) & (ops < len(layers))
    of_layer = np.full(len(rows), -1, dtype=np.int64)
    of_layer[known] = layers[ops[known]]
    spans = {}
    for layer in np.unique(of_layer[of_layer >= 0]):
        mine = rows[of_layer == layer]
        spans[int(layer)] = (int(mine["start_cycle"].min()), int(mine["end_cycle"].max()))
    for i, (layer, (first, last)) in enumerate(sorted(spans.items())):
        y = -1.5 - (i % 2)  # alternate rows so that neighbouring layers stay apart
        ax.plot([first, last], [y, y], color="black", linewidth=2, solid_capstyle="butt")
        ax.annotate(f"L{layer}", (first, y), xytext=(0, 2), textcoords="offset points", fontsize=7, va="bottom")
    return spans


def draw_gantt(plt, trace, chips, args):
    kinds, _ = trace.unit_kinds()
    ypos = gantt_rows(kinds)
    rows = instruction_rows(trace, chips, args.start, args.end)
    layers = np.array([n["layer"] for n in op_names(trace)], dtype=np.int64) if trace.has("/names/ops") else None
    fig, axes = plt.subplots(len(chips), 1, figsize=(12, 2.8 * len(chips) + 0.6),
                             sharex=True, squeeze=False, layout="constrained")
    for ax, chip in zip(axes[:, 0], chips):
        mine = rows[rows["chip"] == chip]
        for unit in np.unique(mine["unit"]):
            if not 0 <= unit < len(kinds):
                continue
            sel = mine[mine["unit"] == unit]
            spans = np.column_stack([sel["start_cycle"], np.maximum(sel["end_cycle"] - sel["start_cycle"], 1)])
            ax.broken_barh(spans, (ypos[unit] - 0.4, 0.8), facecolors=KIND_COLORS.get(kinds[unit], "grey"),
                           linewidth=0)
        ticks = [(np.mean(ypos[[u for u in range(len(kinds)) if kinds[u] == k]]), k)
                 for k in KINDS if k in kinds]
        ax.set_yticks([t for t, _ in ticks], [k for _, k in ticks])
        layer_spans = draw_layer_markers(ax, mine, layers, len(kinds))
        ax.set_ylim(len(kinds) - 0.5, -0.5 - (3 if layer_spans else 0))
        ax.set_ylabel(f"chip {chip}")
        if len(mine) == 0:
            ax.text(0.5, 0.5, "no instructions in range", transform=ax.transAxes, ha="center")
    last = axes[-1, 0]
    if args.start is not None or args.end is not None:
        last.set_xlim(args.start if args.start is not None else 0,
                      args.end if args.end is not None else int(trace.run()["makespan_cycles"]))
    last.set_xlabel("cycle")
    microsecond_axis(axes[0, 0], trace.clock_mhz)
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS[k]) for k in KINDS if k in kinds]
    last.legend(handles, [k for k in KINDS if k in kinds], loc="upper center", bbox_to_anchor=(0.5, -0.35),
                ncol=len(handles), frameon=False, fontsize=8)
    fig.suptitle(f"{trace.stem}: instructions per unit")
    return fig


def draw_utilization_strips(plt, trace, chips, args):
    ds = trace.dataset("/timeline/utilization")
    bin_cycles = int(ds.attrs.get("bin_cycles", 1))
    bins = ds.shape[2]
    fig, axes = plt.subplots(len(chips), 1, figsize=(12, 1.3 * len(chips) + 1.0),
                             sharex=True, squeeze=False, layout="constrained")
    image = None
    strips = [np.asarray(ds[chip], dtype=float) for chip in chips]
    norm = utilization_norm(np.concatenate([s.ravel() for s in strips]), args.scale)
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_bad("#e8e8e8")  # idle bins (0 on a log scale) in light grey, apart from the low end
    for ax, chip, strip in zip(axes[:, 0], chips, strips):
        shown = np.ma.masked_less_equal(strip, 0.0) if args.scale == "log" else strip
        image = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap=cmap, norm=norm,
                          extent=(0, bins * bin_cycles, len(KINDS) - 0.5, -0.5))
        ax.set_yticks(range(len(KINDS)), KINDS)
        ax.set_ylabel(f"chip {chip}")
    last = axes[-1, 0]
    if args.start is not None or args.end is not None:
        last.set_xlim(args.start or 0, args.end if args.end is not None else bins * bin_cycles)
    last.set_xlabel(f"cycle (bins of {bin_cycles})")
    microsecond_axis(axes[0, 0], trace.clock_mhz)
    fig.colorbar(image, ax=axes[:, 0].tolist(),
                 label="busy fraction of the kind's units" + (" (log; grey: idle)" if args.scale == "log" else ""))
    fig.suptitle(f"{trace.stem}: utilisation per unit kind")
    return fig


def cmd_timeline(args):
    plt = pyplot()
    with Trace(args.file) as trace:
        count = len(trace.dataset("/summary/chips"))
        chips = parse_chips(args.chips, count)
        if args.chips is None and count > len(chips):
            note(f"drawing chips {','.join(map(str, chips))} of {count}; choose others with --chips")
        if trace.has("/events/instructions"):
            fig = draw_gantt(plt, trace, chips, args)
        else:
            note(f"no /events/instructions in {trace.path} (trace level "
                 f"{text(trace.meta.get('trace_level', '?'))}): drawing /timeline/utilization")
            fig = draw_utilization_strips(plt, trace, chips, args)
        save(fig, args.output)
    return 0


def layout(count, how):
    """Chip positions: a circle, or a row-major grid."""
    if how == "auto":
        how = "circle"
    idx = np.arange(count)
    if how == "circle":
        angle = np.pi / 2 - 2 * np.pi * idx / max(count, 1)
        return np.column_stack([np.cos(angle), np.sin(angle)])
    cols = max(1, math.ceil(math.sqrt(count)))
    return np.column_stack([idx % cols, -(idx // cols)]).astype(float)


def cmd_links(args):
    if args.group is not None and args.group < 1:
        raise TraceError(f"--group {args.group}: give a positive number of chips")
    plt = pyplot()
    with Trace(args.file) as trace:
        count = len(trace.dataset("/summary/chips"))
        links = trace.read("/summary/links") if trace.has("/summary/links") else None
        makespan = int(trace.run()["makespan_cycles"])
        stem = trace.stem
    if links is None or len(links) == 0:
        fig, ax = plt.subplots(figsize=(8, 7), layout="constrained")
        note(f"no chip-to-chip links in {args.file}")
        ax.text(0.5, 0.5, "no chip-to-chip links", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        save(fig, args.output)
        return 0
    util_ab, util_ba = link_utilization(links, makespan)
    a, b = links["a"].astype(int), links["b"].astype(int)
    if a.min() < 0 or b.min() < 0 or max(a.max(), b.max()) >= count:
        raise TraceError(f"{args.file}: /summary/links names chips outside 0..{count - 1}")
    fig = draw_links(plt, count, a, b, util_ab, util_ba, args)
    fig.axes[0].set_title(f"{stem}: {len(links)} links, {count} chips, makespan {makespan} cycles")
    save(fig, args.output)
    return 0


def draw_links(plt, count, a, b, util_ab, util_ba, args):
    """Link utilisation on the topology: every chip labelled up to MAX_LABELLED_CHIPS, else per group of chips."""
    from matplotlib.collections import LineCollection
    fig, ax = plt.subplots(figsize=(9, 8), layout="constrained")
    label = "link utilisation (busy cycles / makespan)"
    vmax = max(float(max(util_ab.max(), util_ba.max())), 1e-9)
    if count > MAX_LABELLED_CHIPS:
        # One cell per pair of chip groups: the busiest link direction between them (the diagonal: within).
        group = args.group or MAX_LABELLED_CHIPS
        groups = -(-count // group)
        matrix = np.full((groups, groups), np.nan)
        for src, dst, util in ((a // group, b // group, util_ab), (b // group, a // group, util_ba)):
            flat = np.full(groups * groups, -1.0)
            np.maximum.at(flat, src * groups + dst, util)
            seen = flat >= 0
            matrix.flat[np.flatnonzero(seen)] = np.fmax(matrix.flat[np.flatnonzero(seen)], flat[seen])
        image = ax.imshow(np.ma.masked_invalid(matrix), cmap="plasma", vmin=0, vmax=vmax, interpolation="nearest")
        step = max(1, groups // 24)
        ticks = list(range(0, groups, step))
        names = [f"{g * group}-{min(count, (g + 1) * group) - 1}" for g in ticks]
        ax.set_xticks(ticks, names, rotation=90, fontsize=7)
        ax.set_yticks(ticks, names, fontsize=7)
        ax.set_xlabel(f"destination chips (groups of {group})")
        ax.set_ylabel(f"source chips (groups of {group})")
        fig.colorbar(image, ax=ax, label=label + ", busiest link between the groups")
        return fig
    pos = layout(count, args.layout)
    util = np.maximum(util_ab, util_ba)
    order = np.argsort(util)  # busiest links drawn last, on top
    segments = np.stack([pos[a[order]], pos[b[order]]], axis=1)
    lines = LineCollection(segments, cmap="plasma", linewidths=2.5 if count <= 32 else 1.5)
    lines.set_array(util[order])
    lines.set_clim(0, vmax)
    ax.add_collection(lines)
    ax.scatter(pos[:, 0], pos[:, 1], s=max(12, 300 / math.sqrt(count)), c="black", zorder=3)
    for chip, (x, y) in enumerate(pos):
        ax.annotate(str(chip), (x, y), xytext=(3, 3), textcoords="offset points", fontsize=8 if count <= 32 else 6)
    # The busiest links by name, since a colour alone does not say which chord is which.
    busiest = [i for i in np.argsort(-util, kind="stable")[:5] if util[i] > 0]
    if busiest:
        lines_text = "\n".join(f"{a[i]}-{b[i]}: {util_ab[i]:.1%} / {util_ba[i]:.1%}" for i in busiest)
        ax.text(0.0, 0.0, "busiest links (a→b / b→a)\n" + lines_text, transform=ax.transAxes, fontsize=7,
                va="bottom", ha="left", family="monospace")
    ax.set_aspect("equal")
    ax.margins(0.08)
    ax.set_axis_off()
    fig.colorbar(lines, ax=ax, label=label + ", busier direction", shrink=0.8)
    return fig


PLAN_KEY = re.compile(r"^(dp|tp|pp|microbatches)\s*:\s*(\d+)\s*$", re.MULTILINE)


def model_label(config_yaml):
    """A short name for the model a run simulated (its config's model section), to group runs by."""
    try:
        import yaml
        model = (yaml.safe_load(config_yaml) or {}).get("model") or {}
    except Exception:  # noqa: BLE001 - a config we cannot parse is grouped by itself
        return "?"
    if not isinstance(model, dict):
        return str(model)
    name = model.get("builtin") or model.get("onnx") or "?"
    params = model.get("params") or {}
    if isinstance(params, dict) and params:
        name += "(" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) + ")"
    return str(name)


def compare_row(path):
    """One row of the comparison, or None for a trace without a simulated run (a --search-only trace)."""
    with Trace(path) as trace:
        if not trace.has("/summary/run"):
            return None
        run = trace.run()
        plan = {k: int(v) for k, v in PLAN_KEY.findall(text(trace.meta.get("plan_yaml", "")))}
        return {"trace": trace.stem, "model": model_label(text(trace.meta.get("config_yaml", ""))),
                "chips": int(run["chips"]),
                "ranks": int(native(trace.meta.get("ranks", 1))),
                "dp": plan.get("dp", ""), "tp": plan.get("tp", ""), "pp": plan.get("pp", ""),
                "microbatches": plan.get("microbatches", ""),
                "makespan_cycles": int(run["makespan_cycles"]),
                "makespan_seconds": float(run["makespan_seconds"]),
                "throughput_per_second": float(run["throughput_per_second"])}


def cmd_compare(args):
    if not args.output and not args.csv:
        raise TraceError("compare: give -o OUT.png, --csv, or both")
    rows = []
    for path in args.files:
        row = compare_row(path)
        if row is None:
            note(f"skipping {path}: no simulated run in it (a --search-only trace)")
        else:
            rows.append(row)
    if not rows:
        raise TraceError("compare: none of the traces holds a simulated run")
    rows.sort(key=lambda r: (r["model"], r[args.x], r["trace"]))
    if args.csv:
        table = Table("compare", rows[0].keys(), [r.values() for r in rows])
        sys.stdout.write(render_csv(table))
    if not args.output:
        return 0
    plt = pyplot()
    from matplotlib.ticker import ScalarFormatter
    xs = np.array([r[args.x] for r in rows], dtype=float)
    models = sorted({r["model"] for r in rows})
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8), sharex=True, layout="constrained")
    for ax, key, label in ((top, "throughput_per_second", "throughput (samples/s, one plan copy)"),
                           (bottom, "makespan_seconds", "makespan (s)")):
        for i, model in enumerate(models):
            mine = [j for j, r in enumerate(rows) if r["model"] == model]
            mx = xs[mine]
            ys = np.array([rows[j][key] for j in mine], dtype=float)
            # A line joins the runs of one model only, and only as a scaling curve: one run per x value.
            style = "o-" if len(set(mx)) == len(mx) and len(mx) > 1 else "o"
            ax.plot(mx, ys, style, color=f"C{i % 10}", label=model if ax is top else None)
            for j, x, y in zip(mine, mx, ys):
                ax.annotate(rows[j]["trace"], (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    if len(models) > 1:
        top.legend(fontsize=8, title="model")
    if xs.min() > 0 and xs.max() / xs.min() >= 8:
        bottom.set_xscale("log", base=2)
        bottom.xaxis.set_major_formatter(ScalarFormatter())
    bottom.set_xlabel(args.x)
    top.set_title(f"{len(rows)} runs of {len(models)} model{'s' if len(models) > 1 else ''}")
    save(fig, args.output)
    return 0


def pareto_front(cost, gain):
    """Indices of points no other point beats: cost not higher and gain not lower, one strictly."""
    front = []
    for i in np.lexsort((-gain, cost)):
        if not front or gain[i] > gain[front[-1]]:
            front.append(i)
    return np.array(front, dtype=int)


def cmd_plans(args):
    with Trace(args.file) as trace:
        if not trace.has("/search/plans"):
            raise TraceError(f"no /search/plans in {trace.path}")
        plans = trace.read("/search/plans")
        stem = trace.stem
    if len(plans) == 0:
        raise TraceError(f"/search/plans in {args.file} has no rows")
    plt = pyplot()
    feasible = plans["feasible"].astype(bool)
    thr = plans["throughput_per_second"].astype(float)
    names = [f"dp{d} tp{t} pp{p} m{m}" for d, t, p, m in
             zip(plans["dp"], plans["tp"], plans["pp"], plans["microbatches"])]
    best = int(np.argmin(plans["rank"]))
    latency = plans["latency_seconds"].astype(float)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), layout="constrained")
    for ax, cost, xlabel in ((axes[0], plans["chips"].astype(float), "chips"),
                             (axes[1], latency, "latency (s)")):
        ax.scatter(cost[~feasible], thr[~feasible], marker="x", color="lightgrey", label="infeasible")
        ax.scatter(cost[feasible], thr[feasible], color="tab:blue", alpha=0.6, label="feasible")
        idx = np.flatnonzero(feasible)
        if idx.size:
            front = idx[pareto_front(cost[idx], thr[idx])]
            ax.plot(cost[front], thr[front], "-o", color="tab:red", label="Pareto front")
            if front.size <= 12:
                for i in front:
                    ax.annotate(names[i], (cost[i], thr[i]), xytext=(4, -10),
                                textcoords="offset points", fontsize=7)
        ax.scatter([cost[best]], [thr[best]], marker="*", s=220, color="gold", edgecolor="black",
                   zorder=4, label=f"rank {int(plans['rank'][best])}: {text(plans['plan'][best])}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("throughput (samples/s)")
        ax.grid(True, alpha=0.3)
    positive = latency[latency > 0]
    if positive.size and positive.max() / positive.min() >= 100:
        axes[1].set_xscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{stem}: {len(plans)} plans, {int(feasible.sum())} feasible")
    save(fig, args.output)
    return 0


# ----------------------------------------------------------------------------- perfetto

def active_chips(trace):
    """Chips that did any work: a busy unit or a C2C event. Idle chips are left out of the timeline."""
    chips = trace.read("/summary/chips")
    busy = sum(chips[f"busy_{k.lower()}"].astype(np.int64) for k in KINDS)
    active = {int(c) for c, b in zip(chips["chip"], busy) if b > 0}
    if trace.has("/events/c2c"):
        ds = trace.dataset("/events/c2c")
        for lo in range(0, ds.shape[0], EVENT_CHUNK):
            rows = ds[lo:lo + EVENT_CHUNK]
            rows = rows[rows["src_chip"] >= 0]
            active.update(rows["src_chip"].tolist())
            active.update(rows["dst_chip"].tolist())
    return active


def port_of(kind, name):
    """The port a MEM instruction drives (a slice reads and writes at once, on two ports); '' elsewhere."""
    if kind != "MEM":
        return ""
    return "write" if "write" in name.lower() else "read"


class TrackLanes:
    """Perfetto thread ids per (chip, unit, port), split into lanes so that slices on one track never overlap."""

    def __init__(self, labels):
        self.labels = labels  # unit -> "MEM 3"
        self.lanes = {}  # (chip, unit, port) -> [end cycle of each lane's last slice]
        self.tids = {}   # (chip, unit, port, lane) -> tid
        self.next_tid = {}

    def place(self, chip, unit, port, start, end):
        """The tid for a slice [start, end) and, for a new track, its metadata events."""
        ends = self.lanes.setdefault((chip, unit, port), [])
        lane = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        else:
            ends[lane] = end
        key = (chip, unit, port, lane)
        meta = []
        if key not in self.tids:
            # Sorted by unit, then port, then lane: tids keep the queues' order in the UI.
            tid = unit * 64 + (2 if port == "write" else 1 if port == "read" else 0) * 16 + min(lane, 15)
            if lane >= 16:
                tid = self.next_tid.setdefault(chip, 10_000_000)
                self.next_tid[chip] += 1
            self.tids[key] = tid
            label = self.labels(unit) + (f" {port}" if port else "") + (f" ({lane + 1})" if lane else "")
            meta = [{"ph": "M", "name": "thread_name", "pid": chip, "tid": tid, "args": {"name": label}},
                    {"ph": "M", "name": "thread_sort_index", "pid": chip, "tid": tid, "args": {"sort_index": tid}}]
        return self.tids[key], meta


def perfetto_events(trace):
    """Yield Chrome trace-event dicts: metadata, instruction slices, counters, C2C transfers.

    Times are in microseconds (cycles / clock_mhz), cycles in each slice's args. Only chips that did work
    appear; a MEM slice's read and write ports get tracks of their own, and a queue whose slices overlap
    (repeats of one instruction beside the next) is split into lanes, so that slices nest on every track.
    """
    clock = trace.clock_mhz
    us = lambda cycle: float(cycle) / clock  # cycles at clock_mhz per microsecond
    kinds, units = trace.unit_kinds()
    shown = active_chips(trace)
    for chip in sorted(shown):
        yield {"ph": "M", "name": "process_name", "pid": chip, "args": {"name": f"chip {chip}"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": chip, "args": {"sort_index": chip}}
    if trace.has("/events/instructions"):
        slices = [int(u["slice"]) for u in units]
        lanes = TrackLanes(lambda u: f"{kinds[u]} {slices[u]}" if 0 <= u < len(kinds) else f"unit {u}")
        names = trace.opcode_names()
        ds = trace.dataset("/events/instructions")
        fields = ("chip", "unit", "slice", "opcode", "program_index", "start_cycle", "end_cycle", "repeat")
        for lo in range(0, ds.shape[0], EVENT_CHUNK):
            rows = ds[lo:lo + EVENT_CHUNK]
            # Plain Python columns: per-row numpy scalar access dominates the run time otherwise.
            rows = rows[rows["chip"] >= 0]  # a partial trace holds -1 in the rows not reached
            for chip, unit, slc, op, index, start, end, repeat in zip(*(rows[f].tolist() for f in fields)):
                name = names[op] if 0 <= op < len(names) else f"op{op}"
                kind = kinds[unit] if 0 <= unit < len(kinds) else ""
                tid, meta = lanes.place(chip, unit, port_of(kind, name), start, end)
                yield from meta
                yield {"ph": "X", "name": name,
                       "cat": kind or "unit", "pid": chip, "tid": tid, "ts": us(start), "dur": us(end - start),
                       "args": {"unit": unit, "slice": slc, "program_index": index, "repeat": repeat,
                                "start_cycle": start, "end_cycle": end}}
    if trace.has("/timeline/utilization"):
        ds = trace.dataset("/timeline/utilization")
        bin_cycles = int(ds.attrs.get("bin_cycles", 1))
        chips = trace.read("/summary/chips")
        for ci, chip in enumerate(chips["chip"][:ds.shape[0]]):
            if int(chip) not in shown:
                continue
            util = ds[ci]  # one chip at a time: the whole timeline of a large cluster is big
            for k, kind in enumerate(KINDS[:ds.shape[1]]):
                series = util[k]
                # Emit only changes: counters hold their value until the next sample.
                changed = np.flatnonzero(np.diff(series, prepend=np.nan) != 0)
                for b in changed:
                    yield {"ph": "C", "name": f"{kind} utilisation", "pid": int(chip),
                           "ts": us(b * bin_cycles), "args": {"busy": float(series[b])}}
                yield {"ph": "C", "name": f"{kind} utilisation", "pid": int(chip),
                       "ts": us(len(series) * bin_cycles), "args": {"busy": 0.0}}
    if trace.has("/events/c2c"):
        ds = trace.dataset("/events/c2c")
        named = set()
        for lo in range(0, ds.shape[0], EVENT_CHUNK):
            for i, row in enumerate(ds[lo:lo + EVENT_CHUNK], start=lo):
                src, dst, link = int(row["src_chip"]), int(row["dst_chip"]), int(row["link"])
                if src < 0:
                    continue  # not reached before a partial trace was written
                send, arrive = int(row["send_cycle"]), int(row["arrive_cycle"])
                for pid, tid, label in ((src, C2C_SEND_TID + link, f"C2C link {link} out"),
                                        (dst, C2C_RECV_TID + link, f"C2C link {link} in")):
                    if (pid, tid) not in named:
                        named.add((pid, tid))
                        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                               "args": {"name": label}}
                args = {"src_chip": src, "dst_chip": dst, "link": link, "bytes": int(row["bytes"]),
                        "send_cycle": send, "arrive_cycle": arrive}
                yield {"ph": "X", "name": f"send {int(row['bytes'])} B", "cat": "c2c", "pid": src,
                       "tid": C2C_SEND_TID + link, "ts": us(send), "dur": us(arrive - send), "args": args}
                yield {"ph": "X", "name": f"recv {int(row['bytes'])} B", "cat": "c2c", "pid": dst,
                       "tid": C2C_RECV_TID + link, "ts": us(arrive), "dur": us(1), "args": args}
                yield {"ph": "s", "name": "c2c", "cat": "c2c", "id": i, "pid": src,
                       "tid": C2C_SEND_TID + link, "ts": us(send)}
                yield {"ph": "f", "bp": "e", "name": "c2c", "cat": "c2c", "id": i, "pid": dst,
                       "tid": C2C_RECV_TID + link, "ts": us(arrive)}


def cmd_perfetto(args):
    with Trace(args.file) as trace:
        if not trace.has("/events/instructions"):
            note(f"no /events/instructions in {trace.path}: writing utilisation counters"
                 + (" and C2C transfers" if trace.has("/events/c2c") else ""))
        other = {"trace": trace.path, "clock_mhz": trace.clock_mhz,
                 "trace_level": text(trace.meta.get("trace_level", "")),
                 "tool_version": text(trace.meta.get("tool_version", ""))}
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                # Streamed so that traces with millions of events need no event list in memory.
                out.write('{"displayTimeUnit": "ns", "otherData": ' + json.dumps(other)
                          + ',\n"traceEvents": [\n')
                first = True
                for event in perfetto_events(trace):
                    out.write(("" if first else ",\n") + json.dumps(event, separators=(",", ":")))
                    first = False
                out.write("\n]}\n")
        except OSError as exc:
            raise TraceError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    return 0


def cmd_report(args):
    from tsp_trace.report import write_report
    with Trace(args.file) as trace:
        write_report(trace, args.output)
    note(f"wrote {args.output}")
    return 0


def cmd_export(args):
    with Trace(args.file) as trace:
        tables = all_tables(trace, events=args.events)
    if args.format == "sqlite":
        write_sqlite(tables, args.output)
    else:
        write_csv_dir(tables, args.output)
    names = ", ".join(f"{t.name} ({len(t.rows)} rows)" for t in tables)
    note(f"wrote {args.output}: {names}")
    return 0


# ----------------------------------------------------------------------------- command line

def parser():
    top = argparse.ArgumentParser(
        prog="tsp-trace",
        description="Tables, plots and Perfetto timelines from tsp-sim HDF5 traces "
                    f"(trace format version {FORMAT_VERSION}, see docs/trace-format.md).")
    top.add_argument("--version", action="version", version=f"tsp-trace (trace format {FORMAT_VERSION})")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("summary", help="per-chip, per-unit-kind, per-link and run tables")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--what", choices=["chips", "units", "links", "layers", "ops", "run", "all"], default="all",
                   help="a table; all gives every one, with the 10 busiest ops")
    p.add_argument("--per-unit", action="store_true",
                   help="units table with one row per chip and instruction queue, not per kind")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("timeline", help="Gantt chart of units over time (PNG)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.add_argument("--chips", metavar="0,1,...", help="chips to draw (default: the first 4)")
    p.add_argument("--start", type=int, metavar="CYCLE", help="first cycle to draw")
    p.add_argument("--end", type=int, metavar="CYCLE", help="last cycle to draw")
    p.add_argument("--scale", choices=["log", "linear"], default="log",
                   help="colour scale of the utilisation strips (traces without instruction rows)")
    p.set_defaults(func=cmd_timeline)

    p = sub.add_parser("links", help="link utilisation drawn on the topology (PNG)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.add_argument("--layout", choices=["auto", "circle", "grid"], default="auto",
                   help=f"chip placement up to {MAX_LABELLED_CHIPS} chips (auto: circle)")
    p.add_argument("--group", type=int, metavar="N",
                   help=f"above {MAX_LABELLED_CHIPS} chips: chips per group of the matrix (default {MAX_LABELLED_CHIPS})")
    p.set_defaults(func=cmd_links)

    p = sub.add_parser("compare", help="throughput and makespan across traces (PNG, CSV)")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-o", "--output", metavar="OUT.png")
    p.add_argument("--x", choices=["chips", "ranks"], default="chips", help="x axis")
    p.add_argument("--csv", action="store_true", help="print the table as CSV on stdout")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("perfetto", help="Chrome trace-event JSON for ui.perfetto.dev")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-o", "--output", required=True, metavar="OUT.json")
    p.set_defaults(func=cmd_perfetto)

    p = sub.add_parser("report", help="one self-contained HTML page: summary, tables, timeline and link views")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-o", "--output", required=True, metavar="OUT.html")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="every table as an SQLite database or a directory of CSV files")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-o", "--output", required=True, metavar="OUT.db|OUT_DIR")
    p.add_argument("--format", choices=["sqlite", "csv"], default="sqlite",
                   help="sqlite: one database, a table each; csv: OUT_DIR/<table>.csv")
    p.add_argument("--events", action="store_true",
                   help="also export /events/instructions and /events/c2c (large at trace level instructions)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("plans", help="Pareto plot of the searched plans (PNG)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.set_defaults(func=cmd_plans)
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except TraceError as exc:
        print(f"tsp-trace: error: {exc}", file=sys.stderr)
        return 1
    except (KeyError, ValueError) as exc:
        # A dataset without a field this format version requires.
        print(f"tsp-trace: error: {getattr(args, 'file', None) or 'trace'} does not follow "
              f"trace format {FORMAT_VERSION}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0  # e.g. `tsp-trace summary ... | head`


if __name__ == "__main__":
    sys.exit(main())
