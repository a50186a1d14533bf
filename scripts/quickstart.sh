#!/usr/bin/env bash
# Sets up tsp-sim, then runs the main job: configs/quickstart.yaml on 2 MPI ranks, printing its summary.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
mpi_args=(-np 2)
# Open MPI refuses to start as root unless asked to (fresh cloud machines run as root).
[[ $(id -u) -eq 0 ]] && mpi_args+=(--allow-run-as-root)
exec mpirun "${mpi_args[@]}" "$root/build/tsp-sim" --config configs/quickstart.yaml "$@"
