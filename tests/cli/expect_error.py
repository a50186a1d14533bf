#!/usr/bin/env python3
"""Runs a command and checks its exit code and that stderr holds exactly one matching error line.

usage: expect_error.py CODE REGEX -- COMMAND...
"""
import os
import re
import subprocess
import sys

code, pattern = int(sys.argv[1]), sys.argv[2]
command = sys.argv[sys.argv.index("--") + 1:]
# scripts/test.sh --sanitize scales the time a run may take (the sanitizers slow it several times).
timeout = 300 * float(os.environ.get("TSP_TEST_TIMEOUT_SCALE", "1"))
result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
errors = [l for l in result.stderr.splitlines() if l.startswith("tsp-sim: error:")]
ok = result.returncode == code and len(errors) == 1 and re.search(pattern, errors[0])
print(f"exit {result.returncode} (want {code}); stderr:\n{result.stderr}")
if not ok:
    print(f"FAIL: want exactly one 'tsp-sim: error:' line matching {pattern!r}")
    sys.exit(1)
print("ok")
