#!/usr/bin/env python3
"""Runs tsp-sim at every trace level (and --search-only) and every tsp-trace subcommand on the traces it writes.

usage: real_traces.py TSP_SIM SOURCE_DIR   (a plain check list, not a unittest module: it needs the built tsp-sim)
"""
import json
import os
import subprocess
import sys
import tempfile

checks = []


def check(cond, what):
    checks.append(bool(cond))
    print(("ok: " if cond else "FAIL: ") + what)


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
    failed = checks.count(False)
    print(f"{len(checks) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
