#!/usr/bin/env python3
"""Runs each config on 1, 2 and 4 MPI ranks and checks that h5diff finds no difference but the allowed /meta ones."""
import os
import re
import subprocess
import sys
import tempfile

ALLOWED = {"ranks", "rank_mapping", "created", "wall_seconds"}


def run(exe, config, ranks, out):
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", exe, "--config", config, "--out", out, "--quiet", "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {result.returncode}\n{result.stderr}")
    return result.stdout


def main():
    exe, configs = sys.argv[1], sys.argv[2:]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for config in configs:
            name = os.path.splitext(os.path.basename(config))[0]
            traces = {}
            for ranks in (1, 2, 4):
                traces[ranks] = os.path.join(tmp, f"{name}-{ranks}.h5")
                run(exe, config, ranks, traces[ranks])
            for ranks in (2, 4):
                diff = subprocess.run(["h5diff", traces[1], traces[ranks]], capture_output=True, text=True)
                lines = [l for l in diff.stdout.splitlines() if l.strip()]
                bad = []
                for line in lines:
                    if re.fullmatch(r"\d+ differences? found", line.strip()):
                        continue
                    m = re.fullmatch(r"attribute: <(\w+) of </meta>> and <\w+ of </meta>>", line.strip())
                    if m and m.group(1) in ALLOWED:
                        continue
                    bad.append(line)
                if diff.returncode not in (0, 1) or bad:
                    failures += 1
                    print(f"FAIL: {name}: 1 rank vs {ranks} ranks differ:\n" + "\n".join(bad or [diff.stderr]))
                else:
                    print(f"ok: {name}: 1 rank and {ranks} ranks give the same trace")
    print(f"{2 * len(configs) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
