#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz/ (every library instrumented, ASan and UBSan)
# and runs each for SECONDS (default 30) on its seed corpus, then the saved regressions.
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build-fuzz"
seconds="${1:-30}"
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSP_FUZZ=ON \
    -DTSP_BUILD_BENCH=OFF -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
fi
cmake -S "$root" -B "$build_dir" -DTSP_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build "$build_dir" -j2 --target config_fuzzer onnx_fuzzer
cd "$build_dir"
exec ctest -L fuzz --output-on-failure
