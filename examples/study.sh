#!/usr/bin/env bash
# The parallelism study the examples share: rank the plans (--search-only, Pareto plot), then run the
# searched plan (plan: auto) with its C2C transfers and the instructions of a few chips traced, and draw
# the link load and a timeline. Usage: examples/study.sh CONFIG OUT_DIR [--search-only] [TIMELINE_CHIPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
config="$1" out="$(realpath -m "$2")"
search_only=0 chips="0,1,2,3"
shift 2
for arg in "$@"; do
  if [[ "$arg" == "--search-only" ]]; then search_only=1; else chips="$arg"; fi
done
mkdir -p "$out"
cd "$root"
trace=(/usr/bin/python3 scripts/tsp-trace)
build/tsp-sim --config "$config" --quiet --search-only --out "$out/search.h5" | tee "$out/search.txt"
"${trace[@]}" plans "$out/search.h5" -o "$out/plans.png"
((search_only)) && exit 0
build/tsp-sim --config "$config" --quiet --trace-level instructions --out "$out/run.h5" | tee "$out/summary.txt"
"${trace[@]}" links "$out/run.h5" -o "$out/links.png"
"${trace[@]}" timeline "$out/run.h5" --chips "$chips" -o "$out/timeline.png"
echo "plots: $out/plans.png $out/links.png $out/timeline.png"
