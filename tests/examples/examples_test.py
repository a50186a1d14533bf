#!/usr/bin/env python3
"""Every example under examples/ is complete and its config loads: a README that names its command,
an executable run.sh that parses, a config that tsp-sim accepts (--describe model), and a plot.py that
makes a PNG from a small real run of the example's config when the example has a quick mode.

usage: examples_test.py TSP_SIM SOURCE_DIR
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
    root = os.path.join(source, "examples")
    with open(os.path.join(root, "README.md")) as f:
        index = f.read()
    names = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    check(names, "examples/ holds at least one example")
    for name in names:
        folder = os.path.join(root, name)
        check(f"({name}/)" in index, f"{name}: listed in examples/README.md")
        readme = os.path.join(folder, "README.md")
        check(os.path.exists(readme) and f"examples/{name}/run.sh" in open(readme).read(),
              f"{name}: README.md names the command")
        run = os.path.join(folder, "run.sh")
        check(os.access(run, os.X_OK) and subprocess.run(["bash", "-n", run]).returncode == 0,
              f"{name}: run.sh is executable and parses")
        config = os.path.join(folder, "config.yaml")
        described = subprocess.run([exe, "--config", config, "--describe", "model", "--json"],
                                   capture_output=True, text=True, timeout=300)
        ok = described.returncode == 0
        try:
            ok = ok and json.loads(described.stdout)["nodes"] > 0
        except (json.JSONDecodeError, KeyError):
            ok = False
        check(ok, f"{name}: tsp-sim accepts config.yaml ({described.stderr.strip()[:200]})")
    # The all-reduce study's plot from a real, small run of its config (8 chips, 64 KiB).
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(root, "allreduce-10440", "config.yaml")
        for chips in (8, 16):
            out = os.path.join(tmp, f"chips{chips}_bytes65536.json")
            result = subprocess.run([exe, "--config", config, "--quiet", "--json", "--out",
                                     os.path.join(tmp, f"{chips}.h5"), "--model",
                                     f"builtin:collective,op=allreduce,bytes=65536,chips={chips}"],
                                    capture_output=True, text=True, timeout=300)
            with open(out, "w") as f:
                f.write(result.stdout)
            check(result.returncode == 0, f"allreduce-10440: a {chips}-chip run of the config")
        plot = subprocess.run([sys.executable, os.path.join(root, "allreduce-10440", "plot.py"), tmp],
                              capture_output=True, text=True, timeout=300)
        png = os.path.join(tmp, "busbw.png")
        check(plot.returncode == 0 and os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
              f"allreduce-10440: plot.py writes busbw.png ({plot.stderr.strip()[:200]})")
        check(os.path.exists(os.path.join(tmp, "results.csv")), "allreduce-10440: plot.py writes results.csv")
    failed = checks.count(False)
    print(f"{len(checks) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
