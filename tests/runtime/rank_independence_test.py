#!/usr/bin/env python3
"""Runs each config on 1, 2 and 4 MPI ranks, with block and METIS rank mappings, at every trace level,
and checks that h5diff finds no difference but the four allowed /meta attributes (docs/trace-format.md, "The same trace")."""
import os
import re
import subprocess
import sys
import tempfile

import yaml

ALLOWED = {"ranks", "rank_mapping", "created", "wall_seconds"}
LEVELS = ("summary", "links", "instructions")
# (ranks, mapping, event rows a rank buffers before a flush): the first is the reference. A tiny
# buffer makes the ranks flush events in many collective pieces, which must not change the file.
RUNS = ((1, "block", 65536), (2, "block", 65536), (4, "block", 7), (2, "metis", 65536), (4, "metis", 65536))
# The summary datasets are also in every links and instructions trace: fewer runs cover that level.
RUNS_OF_LEVEL = {"summary": RUNS[:2] + RUNS[4:], "links": RUNS, "instructions": RUNS}


def variant(config, tmp, mapping, buffer_rows):
    with open(config) as f:
        doc = yaml.safe_load(f)
    doc.setdefault("simulation", {})["rank_mapping"] = mapping
    doc.setdefault("output", {})["event_buffer_rows"] = buffer_rows
    path = os.path.join(tmp, f"{os.path.basename(config)}-{mapping}-{buffer_rows}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def run(exe, config, ranks, level, out):
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", exe, "--config", config, "--out", out,
           "--trace-level", level, "--quiet", "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {result.returncode}\n{result.stderr}")


def differences(a, b):
    diff = subprocess.run(["h5diff", a, b], capture_output=True, text=True)
    if diff.returncode not in (0, 1):
        return [diff.stderr or f"h5diff exited {diff.returncode}"]
    bad = []
    for line in (l.strip() for l in diff.stdout.splitlines()):
        if not line or re.fullmatch(r"\d+ differences? found", line):
            continue
        m = re.fullmatch(r"attribute: <(\w+) of </meta>> and <\w+ of </meta>>", line)
        if m and m.group(1) in ALLOWED:
            continue
        bad.append(line)
    return bad


def main():
    exe, configs = sys.argv[1], sys.argv[2:]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for config in configs:
            name = os.path.splitext(os.path.basename(config))[0]
            for level in LEVELS:
                traces = []
                for ranks, mapping, buffer_rows in RUNS_OF_LEVEL[level]:
                    out = os.path.join(tmp, f"{name}-{level}-{ranks}-{mapping}-{buffer_rows}.h5")
                    run(exe, variant(config, tmp, mapping, buffer_rows), ranks, level, out)
                    traces.append((f"{ranks} ranks {mapping} (buffer {buffer_rows})", out))
                reference_name, reference = traces[0]
                for what, trace in traces[1:]:
                    bad = differences(reference, trace)
                    if bad:
                        failed += 1
                        print(f"FAIL: {name} level {level}: {reference_name} and {what} differ:\n" + "\n".join(bad))
                    else:
                        passed += 1
                        print(f"ok: {name} level {level}: {reference_name} and {what} give the same trace")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
