#!/usr/bin/env python3
# Runs tsp-sim and compares its stdout (text summary or --json) with a golden file in tests/golden/run/.
#
#   golden_summary_test.py TSP_SIM GOLDEN_FILE -- ARGS...
#
# The run's working directory is a fresh temporary directory, so the configs' relative trace paths
# (out/NAME.h5) print the same everywhere. Figures that vary from run to run (wall times, peak RSS)
# are masked in both the output and the golden file before comparing. With TSP_UPDATE_GOLDEN=1 the
# masked output is written to GOLDEN_FILE instead (see docs/runtime.md, "Golden run summaries").
import difflib
import os
import re
import subprocess
import sys
import tempfile

MASK = "<masked>"

# Text summary: wall time at the end of the simulation line, the memory line's figures, the phase times.
TEXT_PATTERNS = [
    (re.compile(r"^(simulation: .*, )[0-9.]+ s$"), r"\g<1>" + MASK + " s"),
    (re.compile(r"^(memory:      peak RSS )[0-9.]+( MiB on the largest rank, )[0-9.]+( KiB per simulated chip.*)$"),
     r"\g<1>" + MASK + r"\g<2>" + MASK + r"\g<3>"),
    (re.compile(r"^phases: .*$"), lambda m: re.sub(r"[0-9]+\.[0-9]+ s\b", MASK + " s", m.group(0))),
]
# --json: the values of keys that measure the run rather than the simulated cluster.
JSON_VOLATILE = ["wall_seconds", "peak_rss_bytes_max_rank", "peak_rss_bytes_all_ranks"]
JSON_PATTERN = re.compile(r'^(\s*"(?:' + "|".join(JSON_VOLATILE) + r')": )[^,]*(,?)$')
# --json: inside the phase_seconds object every value is a wall time.
JSON_PHASES = re.compile(r'^\s*"phase_seconds": \{$')
JSON_ANY_VALUE = re.compile(r'^(\s*"[^"]+": )[^,]*(,?)$')


def mask(text):
    lines = []
    in_phases = False
    for line in text.splitlines():
        if in_phases:
            if line.strip().startswith("}"):
                in_phases = False
            else:
                line = JSON_ANY_VALUE.sub(r"\g<1>" + '"' + MASK + '"' + r"\g<2>", line)
            lines.append(line)
            continue
        in_phases = bool(JSON_PHASES.match(line))
        line = JSON_PATTERN.sub(r"\g<1>" + '"' + MASK + '"' + r"\g<2>", line)
        for pattern, replacement in TEXT_PATTERNS:
            line = pattern.sub(replacement, line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) < 4 or sys.argv[3] != "--":
        sys.exit("usage: golden_summary_test.py TSP_SIM GOLDEN_FILE -- ARGS...")
    tsp_sim, golden_path, args = sys.argv[1], sys.argv[2], sys.argv[4:]
    with tempfile.TemporaryDirectory(prefix="tsp-golden-") as work:
        run = subprocess.run([tsp_sim] + args, cwd=work, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        sys.exit(f"tsp-sim exited with {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}")
    actual = mask(run.stdout)
    if os.environ.get("TSP_UPDATE_GOLDEN") == "1":
        with open(golden_path, "w") as f:
            f.write(actual)
        print(f"wrote {golden_path}")
        return
    with open(golden_path) as f:
        expected = mask(f.read())
    if actual != expected:
        diff = difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                    fromfile=golden_path, tofile="tsp-sim " + " ".join(args))
        sys.exit("the run's summary differs from the golden file:\n" + "".join(diff))
    print(f"matches {golden_path}")


if __name__ == "__main__":
    main()
