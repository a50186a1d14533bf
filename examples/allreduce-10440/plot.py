#!/usr/bin/env python3
"""Tabulates the all-reduce runs of run.sh (one --json output each) and plots bus bandwidth against size.

usage: plot.py OUT_DIR   -> OUT_DIR/results.csv, OUT_DIR/busbw.png, and the table on stdout
"""
import csv
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    out = sys.argv[1]
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "chips*_bytes*.json"))):
        with open(path) as f:
            run = json.load(f)
        c = run["collective"]
        rows.append({"chips": c["chips"], "bytes": c["bytes"], "algorithm": c["algorithm"],
                     "time_us": c["time_us"], "algbw_gbps": c["algbw_gbps"], "busbw_gbps": c["busbw_gbps"],
                     "peak_rss_mib": run.get("peak_rss_bytes", 0) / 2**20, "wall_s": run.get("wall_seconds", 0)})
    if not rows:
        sys.exit(f"plot.py: no results in {out}")
    rows.sort(key=lambda r: (r["chips"], r["bytes"]))
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{'chips':>6} {'MiB':>6} {'algorithm':>13} {'time us':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for r in rows:
        print(f"{r['chips']:>6} {r['bytes'] / 2**20:>6.0f} {r['algorithm']:>13} {r['time_us']:>11.1f}"
              f" {r['algbw_gbps']:>11.3f} {r['busbw_gbps']:>11.3f}")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for chips in sorted({r["chips"] for r in rows}):
        pts = [r for r in rows if r["chips"] == chips]
        ax.plot([r["bytes"] / 2**20 for r in pts], [r["busbw_gbps"] for r in pts], marker="o",
                label=f"{chips} chips ({pts[0]['algorithm']})")
    ax.axhline(14.6, color="grey", linestyle="--", linewidth=1, label="one link, 14.6 GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per chip (MiB)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("All-reduce on the 10,440-TSP dragonfly (simulated)")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "busbw.png"), dpi=110)
    print(f"wrote {os.path.join(out, 'results.csv')} and {os.path.join(out, 'busbw.png')}")


if __name__ == "__main__":
    main()
