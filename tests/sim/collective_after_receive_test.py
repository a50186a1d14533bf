#!/usr/bin/env python3
"""A collective whose input another chip sent starts once that input has arrived.

Usage: collective_after_receive_test.py TSP_SIM CONFIG COLLECTIVE TENSOR. CONFIG is a sharded plan in which the
collective op COLLECTIVE (on the next pipeline stage's chips) reads the stage boundary tensor TENSOR, which a
compute op there reads too, so that the previous stage sends it during its segment
(tests/sim/sharded/gpt-tp4-pp2-2d-torus4x4.yaml: the all-gather of layer 1's LayerNorm input, whose residual
add reads it as well). Over the microbatches, the collective's first cycle on any chip must follow the first
send of TENSOR and its first receive into SRAM: the collective reads its input from SRAM."""
import json
import os
import subprocess
import sys
import tempfile


def main():
    exe, config, collective, tensor = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run([exe, "--config", config, "--out", os.path.join(tmp, "run.h5"), "--json", "--quiet"],
                                capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"FAIL: exit {result.returncode}: {result.stderr.strip()}")
    ops = json.loads(result.stdout)["ops"]
    gathers = [o for o in ops if o["op"] == collective]
    sends = [o for o in ops if o["kind"] == "Send" and o["tensor"] == tensor]
    receives = [o for o in ops if o["kind"] == "Receive" and o["tensor"] == tensor]
    if len(gathers) != 1 or len(sends) != 1 or len(receives) != 1:
        sys.exit(f"FAIL: expected one {collective}, one Send and one Receive of {tensor}; found "
                 f"{len(gathers)}, {len(sends)}, {len(receives)}")
    start, sent, received = gathers[0]["first_cycle"], sends[0]["first_cycle"], receives[0]["first_cycle"]
    print(f"{tensor}: first sent at cycle {sent}, first received at {received}; {collective} first starts at {start}")
    if start <= sent or start <= received:
        sys.exit(f"FAIL: {collective} starts at cycle {start}, before its input {tensor} is sent ({sent}) "
                 f"and received ({received})")
    print("PASS")


if __name__ == "__main__":
    main()
