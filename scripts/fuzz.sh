#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz/ (every library instrumented, ASan and UBSan)
# and runs each on its seed corpus, then the saved regressions: for SECONDS (default 30) from a random
# seed, or with --runs N for N inputs from seed S (default 1), the same inputs on every run of a build.
# Usage: scripts/fuzz.sh [SECONDS] | scripts/fuzz.sh --runs N [--seed S]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build-fuzz"
seconds=30 runs=0 seed=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="${2:?--runs needs a count}"; [[ "$seed" == 0 ]] && seed=1; shift 2 ;;
    --seed) seed="${2:?--seed needs a value}"; shift 2 ;;
    [0-9]*) seconds="$1"; shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (usage: fuzz.sh [SECONDS] | fuzz.sh --runs N [--seed S])" >&2; exit 2 ;;
  esac
done
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSP_FUZZ=ON \
    -DTSP_BUILD_BENCH=OFF -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
fi
cmake -S "$root" -B "$build_dir" -DTSP_FUZZ_SECONDS="$seconds" -DTSP_FUZZ_RUNS="$runs" -DTSP_FUZZ_SEED="$seed" >/dev/null
cmake --build "$build_dir" -j2 --target config_fuzzer onnx_fuzzer
cd "$build_dir"
exec ctest -L fuzz --output-on-failure
