# tsp_trace.report: one self-contained HTML page per run: summary, tables, zoomable timeline and link views.
"""Builds the report page from a trace: the data as JSON, the page's script and the front-end packages
(uPlot, from npm, copied out of its package at build time) inlined, so that the file opens anywhere."""

import html
import json
import os
from pathlib import Path

import numpy as np

from tsp_trace import (KINDS, TraceError, chips_table, layers_table, link_utilization, native, ops_table, text)

HERE = Path(__file__).resolve().parent
ASSET_FILES = ("uPlot.iife.min.js", "uPlot.min.css")
MAX_TIMELINE_CHIPS = 64   # the busiest chips get a timeline each; the rest are in the tables
MAX_TIMELINE_POINTS = 4000
MAX_LINKS = 2000          # the busiest link rows drawn and listed


def asset_dirs():
    """Where the built front-end packages may be: $TSP_REPORT_ASSETS, the install, a source tree's build/."""
    dirs = [os.environ.get("TSP_REPORT_ASSETS", ""), HERE / "assets", HERE.parents[1] / "build" / "report-assets"]
    return [Path(d) for d in dirs if d]


def load_assets():
    for d in asset_dirs():
        if all((d / f).is_file() for f in ASSET_FILES):
            return {f: (d / f).read_text(encoding="utf-8") for f in ASSET_FILES}
    raise TraceError("report: the page's front-end packages are not built (looked in "
                     + ", ".join(str(d) for d in asset_dirs())
                     + "); build the report_assets target (it needs npm) or set TSP_REPORT_ASSETS")


def downsample(series, limit):
    """Averages of consecutive bins so that at most `limit` points remain; returns (values, bins per point)."""
    bins = series.shape[-1]
    step = max(1, -(-bins // limit))
    if step == 1:
        return series, 1
    pad = (-bins) % step
    padded = np.concatenate([series, np.zeros(series.shape[:-1] + (pad,), series.dtype)], axis=-1)
    return padded.reshape(series.shape[:-1] + (-1, step)).mean(axis=-1), step


def report_data(trace):
    """Everything the page shows, as plain JSON-able values."""
    run = trace.run()
    clock = trace.clock_mhz
    chips = chips_table(trace)
    rows = chips.records()
    busy = {r["chip"]: sum(int(r[f"busy_{k.lower()}"]) for k in KINDS) for r in rows}
    data = {
        "trace": trace.stem,
        "partial": bool(native(trace.meta.get("partial", 0))),
        "clock_mhz": clock,
        "tool_version": text(trace.meta.get("tool_version", "")),
        "plan_yaml": text(trace.meta.get("plan_yaml", "")),
        "config_yaml": text(trace.meta.get("config_yaml", "")),
        "run": run,
        "chips": {"columns": chips.columns, "rows": chips.rows},
        "timeline": None,
        "links": None,
        "layers": None,
        "ops": None,
    }
    if trace.has("/summary/layers"):
        # The work of each layer and of the 20 busiest ops, from the programs (no event trace needed).
        for name, table in (("layers", layers_table(trace)), ("ops", ops_table(trace, 20))):
            data[name] = {"columns": table.columns, "rows": table.rows}
    if trace.has("/timeline/utilization"):
        ds = trace.dataset("/timeline/utilization")
        bin_cycles = int(ds.attrs.get("bin_cycles", 1))
        active = sorted((c for c in busy if busy[c] > 0), key=lambda c: (-busy[c], c))[:MAX_TIMELINE_CHIPS]
        series = {}
        step = 1
        for chip in sorted(active):
            values, step = downsample(np.asarray(ds[chip], dtype=np.float64), MAX_TIMELINE_POINTS)
            series[str(chip)] = [[round(float(v), 5) for v in kind] for kind in values]
        points = len(next(iter(series.values()))[0]) if series else 0
        data["timeline"] = {"kinds": list(KINDS[:ds.shape[1]]), "bin_cycles": bin_cycles * step,
                            "x_us": [i * bin_cycles * step / clock for i in range(points)],
                            "chips": series, "shown": len(series), "active": sum(1 for c in busy if busy[c] > 0)}
    if trace.has("/summary/links"):
        links = trace.read("/summary/links")
        util_ab, util_ba = link_utilization(links, int(run["makespan_cycles"]))
        order = np.argsort(-np.maximum(util_ab, util_ba), kind="stable")[:MAX_LINKS]
        data["links"] = {"total": int(len(links)),
                         "rows": [[int(links["link"][i]), int(links["a"][i]), int(links["b"][i]),
                                   int(links["bytes_ab"][i]), int(links["bytes_ba"][i]),
                                   round(float(util_ab[i]), 6), round(float(util_ba[i]), 6)] for i in order]}
    return data


def render(trace):
    assets = load_assets()
    data = report_data(trace)
    script = (HERE / "report.js").read_text(encoding="utf-8")
    # JSON inside <script>: '</' must not close the element.
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    title = html.escape(f"tsp-sim report: {data['trace']}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{assets["uPlot.min.css"]}</style>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #222; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 28px; }}
table {{ border-collapse: collapse; font-variant-numeric: tabular-nums; }}
th, td {{ padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: right; }}
th {{ background: #f3f3f3; position: sticky; top: 0; }}
.scroll {{ max-height: 360px; overflow: auto; display: inline-block; }}
.facts td:first-child {{ text-align: left; color: #555; }}
.note {{ color: #666; font-size: 12px; }}
.partial {{ background: #fff3cd; padding: 6px 10px; border: 1px solid #e0c36b; }}
</style></head>
<body>
<h1>{title}</h1>
<div id="report"></div>
<script>{assets["uPlot.iife.min.js"]}</script>
<script id="report-data" type="application/json">{payload}</script>
<script>{script}</script>
</body></html>
"""


def write_report(trace, output):
    page = render(trace)
    tmp = f"{output}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(page)
        os.replace(tmp, output)
    except OSError as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise TraceError(f"cannot write {output}: {exc.strerror or exc}") from exc
