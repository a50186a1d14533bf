# partial_trace: the checks of the NAME.partial.h5 a stopped run leaves, shared by the runtime's signal
# and fault tests (tests/runtime/signal_test.py, tests/runtime/fault_test.py).
"""A check list (ok/FAIL lines, a summary and the exit code) and the checks of a partial trace:
docs/trace-format.md's partial flag, reached_cycle and consistent figures."""
import os
import sys

import h5py
import numpy as np


class Checks:
    """Prints each check as it is made; `exit()` prints the counts and exits 1 if any failed."""

    def __init__(self):
        self.results = []

    def __call__(self, cond, what):
        self.results.append((bool(cond), what))
        print(("ok: " if cond else "FAIL: ") + what, flush=True)

    def exit(self):
        failed = [what for ok, what in self.results if not ok]
        print(f"{len(self.results) - len(failed)} passed, {len(failed)} failed")
        sys.exit(1 if failed else 0)


def leftovers(directory, keep=()):
    return sorted(n for n in os.listdir(directory) if n not in keep)


def check_partial(check, name, out, stderr, stage, compiled=False, mid_run=False):
    """The run writing `out` (alone in its directory) was stopped in `stage` (search, compile or
    simulate): it says where its partial trace is, leaves only that file, and the trace is a valid
    partial one holding what was known then. `compiled`: the run compiled its programs, so the compile
    reports are recorded. `mid_run`: the signal reached the run inside the simulation (job_signal.py),
    so some but not all of the C2C rows are written."""
    partial = out[:-3] + ".partial.h5"
    directory = os.path.dirname(out)
    check("partial trace written to " + partial in stderr, f"{name}: says where the partial trace is")
    left = leftovers(directory)
    check(left == [os.path.basename(partial)], f"{name}: only {os.path.basename(partial)} is left (found {left})")
    if not os.path.exists(partial):
        return
    with h5py.File(partial, "r") as f:
        meta = f["meta"].attrs
        check(meta["format_version"] == 1 and meta["partial"] == 1, f"{name}: a version-1 trace marked partial")
        reached = int(meta["reached_cycle"])
        chips = f["summary/chips"][:]
        run = f["summary/run"][0]
        check(len(chips) == meta["chip_count"], f"{name}: one /summary/chips row per chip")
        # Consistent figures: a makespan that covers every chip's cycles, none beside counters.
        busy = chips["instructions"].sum() + chips["bytes_sent"].sum()
        check(run["makespan_cycles"] == chips["cycles"].max(), f"{name}: the makespan is the longest chip's cycles")
        check((busy > 0) == (run["makespan_cycles"] > 0),
              f"{name}: a zero makespan goes with zero counters (makespan {run['makespan_cycles']}, counters {busy})")
        check(run["samples"] == 0 and run["throughput_per_second"] == 0, f"{name}: a partial run claims no samples")
        if stage == "search":
            check(reached == 0 and busy == 0, f"{name}: stopped before simulating: reached_cycle 0, no counters")
        if stage in ("compile", "simulate"):
            check(len(meta["plan_yaml"]) > 0, f"{name}: the plan is recorded")
        if stage != "simulate":
            return
        check(reached > 0 and busy > 0, f"{name}: the cycle reached ({reached}) and what ran are recorded")
        if compiled:
            check("compile/reports" in f and len(f["compile/reports"]) == meta["chip_count"],
                  f"{name}: the compile reports are recorded")
        if "events/c2c" not in f:
            return
        c2c = f["events/c2c"][:]
        written = c2c[c2c["src_chip"] >= 0]
        check(np.all(written["send_cycle"] < reached), f"{name}: every C2C row written was sent before reached_cycle")
        check(written["bytes"].sum() == chips["bytes_sent"].sum(), f"{name}: the C2C rows add up to the bytes sent")
        if mid_run:
            check(0 < len(written) < len(c2c), f"{name}: some but not all C2C rows are written")
