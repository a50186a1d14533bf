#!/usr/bin/env python3
"""Runs tsp-sim at every trace level (and --search-only) and every tsp-trace subcommand on the traces it writes.

usage: real_traces.py TSP_SIM SOURCE_DIR   (a plain check list, not a unittest module: it needs the built tsp-sim)
"""
import json
import os
import signal
import subprocess
import sys
import tempfile

import h5py
import numpy as np

checks = []


def check(cond, what):
    checks.append(bool(cond))
    print(("ok: " if cond else "FAIL: ") + what)


def check_partial_trace(exe, source, tool, tmp):
    """A run stopped by SIGTERM leaves -1 in the event rows it did not reach: every subcommand skips them."""
    out = os.path.join(tmp, "stopped.h5")
    # tests/runtime/long_ring.yaml at twice its size: a 4,096-chip ring pipelining a 4,096-layer INT8 MLP,
    # about 4.7 s of simulation on one rank (2-core machine, load 2), so that the first progress line
    # (2 s in) comes well before the end.
    config = os.path.join(tmp, "long_ring.yaml")
    with open(os.path.join(source, "tests", "runtime", "long_ring.yaml")) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text.replace("chips: 2048", "chips: 4096").replace("layers: 2048", "layers: 4096")
                .replace("pp: 2048", "pp: 4096"))
    proc = subprocess.Popen([exe, "--config", config, "--out", out, "--trace-level", "instructions"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.startswith("tsp-sim: simulate:"):
            proc.send_signal(signal.SIGTERM)
            break
    proc.stderr.read()
    code = proc.wait(timeout=300)
    partial = out[:-3] + ".partial.h5"
    check(code == 7 and os.path.exists(partial), f"SIGTERM leaves a partial trace (exit {code})")
    if not os.path.exists(partial):
        return
    with h5py.File(partial, "r") as f:
        rows = f["events/instructions"][:]
        check(np.any(rows["chip"] < 0) and np.any(rows["chip"] >= 0), "the partial trace has rows reached and rows not")
    target = os.path.join(tmp, "stopped.json")
    result = subprocess.run(tool + ["perfetto", partial, "-o", target], capture_output=True, text=True)
    events = []
    if result.returncode == 0 and os.path.exists(target):
        with open(target) as f:
            events = json.load(f)["traceEvents"]
    check(events and all(e.get("pid", 0) >= 0 and e.get("tid", 0) >= 0 for e in events),
          "perfetto on a partial trace: events only for the rows reached")
    slices = [e for e in events if e.get("ph") == "X" and e.get("cat") != "c2c"]
    reached = int(f_attr(partial, "reached_cycle"))
    check(slices and all(e["args"]["start_cycle"] < reached for e in slices),
          "perfetto on a partial trace: every instruction started before reached_cycle")
    for sub, extra in (("summary", []), ("timeline", ["--chips", "0,1"]), ("links", [])):
        target = os.path.join(tmp, f"stopped.{sub}.png")
        args = [sub, partial] + (["-o", target] if sub != "summary" else []) + extra
        result = subprocess.run(tool + args, capture_output=True, text=True)
        check(result.returncode == 0, f"{sub} on a partial trace ({result.stderr.strip()[:200]})")


def f_attr(path, name):
    with h5py.File(path, "r") as f:
        return f["meta"].attrs[name]


def main():
    exe, source = sys.argv[1], sys.argv[2]
    tool = [sys.executable, os.path.join(source, "scripts", "tsp-trace")]
    config = os.path.join(source, "configs", "quickstart.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        traces = []
        for level in ("summary", "links", "instructions"):
            out = os.path.join(tmp, f"{level}.h5")
            run = subprocess.run([exe, "--config", config, "--out", out, "--trace-level", level, "--quiet"],
                                 capture_output=True, text=True, timeout=300)
            check(run.returncode == 0 and os.path.exists(out), f"tsp-sim writes a {level}-level trace")
            traces.append(out)
        for trace in traces:
            name = os.path.basename(trace)
            summary = subprocess.run(tool + ["summary", trace, "--format", "json"], capture_output=True, text=True)
            ok = summary.returncode == 0
            try:
                data = json.loads(summary.stdout)
            except json.JSONDecodeError:
                ok, data = False, None
            check(ok and data is not None, f"summary --format json parses on {name}")
            if ok and data is not None:
                # The layer and op tables come from /summary (every level): shares add up, names are real.
                layers, ops = data.get("layers", []), data.get("ops", [])
                check(len(layers) == 4 and abs(sum(r["share"] for r in layers) - 1) < 1e-9,
                      f"summary gives the 4 layers of the quickstart MLP, their shares adding up to 1, on {name}")
                check(0 < len(ops) <= 10 and ops[0]["op"] in ("fc0", "fc1", "fc2", "fc3") and ops[0]["kind"] == "MatMul",
                      f"summary's busiest op is a MatMul of the model, on {name}")
                check(all(0 <= r["util_mxm"] <= 1 for r in layers), f"layer utilisations are fractions, on {name}")
            for sub, extra in (("timeline", ["--chips", "0,1"]), ("links", []), ("perfetto", [])):
                target = os.path.join(tmp, f"{name}.{sub}.{'json' if sub == 'perfetto' else 'png'}")
                result = subprocess.run(tool + [sub, trace, "-o", target] + extra, capture_output=True, text=True)
                made = result.returncode == 0 and os.path.exists(target) and os.path.getsize(target) > 0
                if made and sub == "perfetto":
                    with open(target) as f:
                        made = len(json.load(f)["traceEvents"]) > 0
                elif made:
                    with open(target, "rb") as f:
                        made = f.read(8) == b"\x89PNG\r\n\x1a\n"
                check(made, f"{sub} on {name} ({result.stderr.strip()[:200]})")
        compare = os.path.join(tmp, "compare.png")
        result = subprocess.run(tool + ["compare"] + traces + ["-o", compare], capture_output=True, text=True)
        check(result.returncode == 0 and os.path.getsize(compare) > 0, "compare across the three traces")
        # --search-only writes /search/plans, which `plans` plots.
        searched = os.path.join(tmp, "search.h5")
        run = subprocess.run([exe, "--config", config, "--out", searched, "--search-only", "--quiet"],
                             capture_output=True, text=True, timeout=300)
        check(run.returncode == 0, "tsp-sim --search-only writes a trace with /search/plans")
        plans = os.path.join(tmp, "plans.png")
        result = subprocess.run(tool + ["plans", searched, "-o", plans], capture_output=True, text=True)
        check(result.returncode == 0 and os.path.exists(plans) and os.path.getsize(plans) > 0,
              f"plans on the searched trace ({result.stderr.strip()[:200]})")
        check_partial_trace(exe, source, tool, tmp)
    failed = checks.count(False)
    print(f"{len(checks) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
