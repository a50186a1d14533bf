#!/usr/bin/env bash
# Sets up tsp-sim, then runs the whole test suite with ctest (with --sanitize: in build-sanitize/, all but the
# tests labelled long and zoo). Usage: scripts/test.sh [--sanitize]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TSP_TEST_PACKAGES=1 "$root/scripts/setup.sh" "$@"
build_dir="$root/build"
[[ "${1:-}" == "--sanitize" ]] && build_dir="$root/build-sanitize"
# MPI tests start several ranks on a 2-core machine; as root Open MPI needs these to start at all.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if [[ "${1:-}" == "--sanitize" ]]; then
  # Open MPI's own allocations are not ours to fix. Undefined behaviour ends the process, so that a
  # test whose program only printed a report fails; exit 99 is no exit code of tsp-sim.
  export ASAN_OPTIONS=detect_leaks=0:exitcode=99 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=99
  # The sanitizers slow every run several times: the test scripts' own time limits on a run scale by this.
  export TSP_TEST_TIMEOUT_SCALE=10
  # The tests labelled long and zoo run whole real models (minutes each without the sanitizers): left out.
  cd "$build_dir"
  exec ctest --output-on-failure -j2 -LE '^(long|zoo)$'
fi
cd "$build_dir"
exec ctest --output-on-failure -j2
