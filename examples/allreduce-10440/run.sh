#!/usr/bin/env bash
# All-reduce on the 10,440-TSP dragonfly: message sizes 1, 8 and 64 MiB over a node (8 chips), a rack
# (72) and the whole system (10,440), each one tsp-sim run with --json; then results.csv and busbw.png.
# Usage: examples/allreduce-10440/run.sh [RANKS]   (default 1; the 10,440-chip 64 MiB run needs about 4.9 GB on one rank)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ranks="${1:-1}"
out="$root/out/examples/allreduce-10440"
mkdir -p "$out"
mpi=(mpirun -np "$ranks")
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
((ranks > 2)) && mpi+=(--oversubscribe)
for chips in 8 72 0; do
  for bytes in 1048576 8388608 67108864; do
    name="chips${chips}_bytes${bytes}"
    [[ -s "$out/$name.json" ]] && continue
    echo "allreduce over ${chips/#0/10440} chips, $bytes bytes per chip"
    "${mpi[@]}" "$root/build/tsp-sim" --config "$here/config.yaml" --quiet --json \
      --model "builtin:collective,op=allreduce,bytes=$bytes,chips=$chips" --out "$out/$name.h5" >"$out/$name.json.tmp"
    mv "$out/$name.json.tmp" "$out/$name.json"
  done
done
/usr/bin/python3 "$here/plot.py" "$out"
