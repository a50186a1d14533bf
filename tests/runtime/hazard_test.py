#!/usr/bin/env python3
"""A hazard found during the simulation, on a chip of the last rank, ends the job under mpirun
without hanging: exit 4 on every rank count, the same single error line, and no trace left behind.
The hazard is made by rewiring one C2C receive of an emitted program to an unconnected port."""
import json
import os
import re
import subprocess
import sys
import tempfile

checks = []


def check(cond, what):
    checks.append((bool(cond), what))
    print(("ok: " if cond else "FAIL: ") + what)


def corrupt(directory, chip):
    """Points the first C2C receive of `chip` at port 15 (unconnected on a ring), in a file of its own."""
    manifest_path = os.path.join(directory, "manifest.json")
    with open(manifest_path) as f:
        manifest = json.load(f)
    entry = next(c for c in manifest["chips"] if c["chip"] == chip)
    with open(os.path.join(directory, entry["program"])) as f:
        program = json.load(f)
    fields = program["fields"].split(",")
    receive = next(i for i in program["instructions"] if i[fields.index("opcode")] == 9)  # C2cReceive
    receive[fields.index("port")] = 15
    entry["program"] = f"program_broken_chip{chip}.json"
    with open(os.path.join(directory, entry["program"]), "w") as f:
        json.dump(program, f)
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)


def main():
    exe, config = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        programs = os.path.join(tmp, "programs")
        emitted = subprocess.run([exe, "--config", config, "--emit-programs", programs, "--compile-only", "--quiet"],
                                 capture_output=True, text=True, timeout=120)
        check(emitted.returncode == 0, f"programs are emitted ({emitted.stderr.strip()})")
        corrupt(programs, chip=3)
        lines = {}
        for ranks in (1, 2, 4):
            out = os.path.join(tmp, f"hazard-{ranks}.h5")
            cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", exe, "--config", config, "--programs", programs,
                   "--out", out, "--quiet"]
            try:
                result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            except subprocess.TimeoutExpired:
                check(False, f"{ranks} ranks: the job ends (it hung)")
                continue
            errors = [l for l in result.stderr.splitlines() if l.startswith("tsp-sim: error:")]
            check(result.returncode == 4, f"{ranks} ranks: exit code 4 (got {result.returncode})")
            check(len(errors) == 1, f"{ranks} ranks: one error line (got {errors})")
            check(any(re.search(r"hazard at cycle \d+, chip 3, .*C2C port 15 is not connected", l) for l in errors),
                  f"{ranks} ranks: the error names the cycle, chip 3 and the port")
            check(not os.path.exists(out) and not os.path.exists(out + ".tmp"),
                  f"{ranks} ranks: no trace and no temporary file is left")
            lines[ranks] = errors
        check(len({tuple(v) for v in lines.values()}) == 1, "the error is the same on 1, 2 and 4 ranks")
    failed = [w for ok, w in checks if not ok]
    print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
