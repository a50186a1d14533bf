#!/usr/bin/env python3
"""Shares of the chip simulator's instructions by part, from a callgrind profile.

Profile a build whose simulator has line tables (configure with -DCMAKE_CXX_FLAGS=-g), counting only the
simulator (chip construction and Chip::advanceTo), e.g.:

  valgrind --tool=callgrind --callgrind-out-file=cg.out \\
      --toggle-collect='tsp::sim::makeTspChip*' --toggle-collect='*::advanceTo(*' \\
      build/tsp-sim --config C.yaml --programs DIR --trace-level summary --quiet
  tests/bench/sim_profile.py cg.out

Every source line of src/sim/tsp_chip.cpp is charged to the function it is written in (inlined code to the
line it comes from), and functions are grouped into the parts docs/performance.md names.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Functions of tsp_chip.cpp by part; lines of execute() that update statistics are matched by text.
PARTS = {
    "dispatch": {"advanceTo", "runInOrder", "execute", "nextEventCycle", "stallDelay", "eventAt"},
    "hazard checks": {"checkRead", "collision", "checkCollisions", "firstCommon", "extendedGcd", "memAccess",
                      "bankConflicts", "bankOf", "firstReaching", "hazard", "describe", "malformed", "send", "receive"},
    "stream occupancy": {"writeStream", "runsOf", "streamIndex", "StreamQueue", "StreamRun", "place", "tau0", "tauLast",
                         "lowSlice", "highSlice", "hops", "empty", "size", "operator[]", "front", "push_back",
                         "pop_front", "last"},
    "statistics": {"finish"},
    "chip construction": {"TspChip"},
}
STATS_LINE = re.compile(r"stats_\.|lastCompletion_|Vectors_ \+=|installs_ \+=")
DEFINITION = re.compile(r"^\s*(?:template <[^>]*>\s*)?(?:[\w:<>,*&\[\] ]+\s)?[*&]?(~?\w+|operator\[\])\s*\([^;]*$")
# A member function defined on one line: the line is its own, the lines after it the enclosing function's.
ONE_LINE = re.compile(r"^\s*(?:[\w:<>,*&\[\] ]+\s)?[*&]?(~?\w+|operator\[\])\s*\([^)]*\)\s*(?:const\s*)?\{.*\}\s*$")


def function_of_lines(path):
    """The innermost function whose definition starts at or before each line (by indentation)."""
    names, current = {}, []
    with open(path) as f:
        for number, text in enumerate(f, 1):
            indent = len(text) - len(text.lstrip())
            m = DEFINITION.match(text)
            if m and not text.lstrip().startswith(("if", "for", "while", "switch", "return", "//")):
                current = [(i, n) for i, n in current if i < indent] + [(indent, m.group(1))]
            names[number] = current[-1][1] if current else "?"
            one = ONE_LINE.match(text)
            if one and not text.lstrip().startswith(("if", "for", "while", "switch", "return", "//")):
                names[number] = one.group(1)
    return names


def chips_built(path):
    """How many chips the profiled run built: the calls to tsp::sim::makeTspChip in the callgrind file.
    A benchmark builds one chip per iteration, including the iterations Google Benchmark runs to size its
    measurement and does not report, so instructions per chip built are per iteration run."""
    names, callee, calls = {}, None, 0
    with open(path) as f:
        for line in f:
            m = re.match(r"^c?fn=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                if line.startswith("cfn="):
                    callee = names.get(m.group(1), "")
                continue
            if line.startswith("calls=") and callee and callee.startswith("tsp::sim::makeTspChip("):
                calls += int(line.split("=", 1)[1].split()[0])
    return calls


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    text = subprocess.run(["callgrind_annotate", "--auto=yes", "--show-percs=no", "--context=0", "--threshold=100",
                           sys.argv[1]], capture_output=True, text=True, check=True).stdout
    chip = os.path.join(ROOT, "src/sim/tsp_chip.cpp")
    names = function_of_lines(chip)
    totals, whole, current, number = {}, 0, None, 0
    for line in text.splitlines():
        if line.startswith("-- Auto-annotated source:"):
            current = line.split(":", 1)[1].strip()
            continue
        m = re.match(r"^\s*([\d,]+)\s+PROGRAM TOTALS", line)
        if m:
            whole = int(m.group(1).replace(",", ""))
            continue
        m = re.match(r"^-- line (\d+) -+$", line)
        if m:
            number = int(m.group(1))
            continue
        m = re.match(r"^\s*([\d,]+)\s(?!\s*=>)(.*)$", line)
        if not m or current is None or "=>" in line[:30] or "events annotated" in line:
            continue
        ir = int(m.group(1).replace(",", ""))
        part = "library code inlined"
        if current.endswith("src/sim/tsp_chip.cpp"):
            fn = names.get(number, "?")
            if fn == "execute" and STATS_LINE.search(m.group(2)):
                part = "statistics"
            else:
                part = next((p for p, fns in PARTS.items() if fn in fns), "other simulator code")
        elif current.endswith(("utilization.h", "utilization.cpp")):
            part = "utilisation timeline"
        elif current.endswith(("event_program.h", "event_program.cpp")):
            part = "dispatch" if current.endswith(".h") else "decoding (once per program)"
        totals[part] = totals.get(part, 0) + ir
    counted = sum(totals.values())
    print(f"{'part':32} {'Ir':>14} {'share':>7}")
    for part, ir in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"{part:32} {ir:14,} {100.0 * ir / max(1, whole):6.1f}%")
    rest = whole - counted
    print(f"{'code without line tables':32} {rest:14,} {100.0 * rest / max(1, whole):6.1f}%  (libc, other libraries)")
    print(f"{'collected':32} {whole:14,}")
    chips = chips_built(sys.argv[1])
    if chips:
        print(f"{'chips built':32} {chips:14,}  ({whole / chips:,.0f} collected per chip built)")


if __name__ == "__main__":
    main()
