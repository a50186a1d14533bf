#!/usr/bin/env bash
# Installs the build into out/examples/library/prefix, builds main.cpp against that install and runs it
# on this example's config (run from anywhere; needs build/ from scripts/quickstart.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=out/examples/library
cmake --install build --prefix "$out/prefix" > /dev/null
cmake -S examples/library -B "$out/build" -DCMAKE_PREFIX_PATH="$PWD/$out/prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$out/build" -j2 > /dev/null
"$out/build/pipeline_cycles" examples/library/config.yaml | tee "$out/cycles.txt"
