#!/usr/bin/env bash
# Sets up tsp-sim, then runs the main job: configs/quickstart.yaml on 2 MPI ranks, printing its summary.
# In a source tree it installs what is missing and builds first; installed (PREFIX/share/tsp-sim/scripts)
# it runs PREFIX/bin/tsp-sim from the current directory, writing out/quickstart.h5 there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mpi_args=(-np 2)
# Open MPI refuses to start as root unless asked to (fresh cloud machines run as root).
[[ $(id -u) -eq 0 ]] && mpi_args+=(--allow-run-as-root)
if [[ -f "$root/CMakeLists.txt" ]]; then
  "$root/scripts/setup.sh"
  cd "$root"
  exec mpirun "${mpi_args[@]}" "$root/build/tsp-sim" --config configs/quickstart.yaml "$@"
fi
prefix="$(cd "$root/../.." && pwd)"
if [[ ! -x "$prefix/bin/tsp-sim" ]]; then
  echo "quickstart.sh: no $prefix/bin/tsp-sim: run this script from a source tree or an installed prefix" >&2
  exit 1
fi
exec mpirun "${mpi_args[@]}" "$prefix/bin/tsp-sim" --config "$root/configs/quickstart.yaml" --out out/quickstart.h5 "$@"
