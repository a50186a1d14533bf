#!/usr/bin/env bash
# ResNet-50, batch 1, INT8, on one TSP: compile, simulate every instruction, then a timeline of the
# chip's units and the compile report. Usage: examples/resnet50-1chip/run.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/out/examples/resnet50-1chip"
mkdir -p "$out"
cd "$root"
build/tsp-sim --config "$here/config.yaml" --quiet --emit-programs "$out/programs" | tee "$out/summary.txt"
/usr/bin/python3 scripts/tsp-trace timeline "$out/resnet50.h5" --chips 0 -o "$out/timeline.png"
/usr/bin/python3 - "$out/programs/report_chip0.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"compile report: {r['cycles']} cycles, lower bound {r['lower_bound_cycles']} "
      f"({r['makespan_over_lower_bound']:.3f} x), MXM MAC utilisation {100 * r['mxm_mac_utilisation']:.1f} %, "
      f"SRAM {r['sram_live_peak_bytes'] / 2**20:.1f} MiB live at most, footprint {r['sram_footprint_bytes'] / 2**20:.1f} MiB, bank-conflict rate {100 * r['bank_conflict_rate']:.2f} %")
PY
echo "timeline: $out/timeline.png"
