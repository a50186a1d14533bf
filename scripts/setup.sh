#!/usr/bin/env bash
# Installs the missing Debian packages, then configures and builds tsp-sim (Release, -j2).
# Idempotent and quiet when nothing needs doing. Usage: scripts/setup.sh [--sanitize]
# With TSP_TEST_PACKAGES=1 (scripts/test.sh sets it) it also installs scripts/test-packages.txt: what only the
# test suite needs (PyTorch for the model zoo, Slurm and munge, Chromium), so that quickstart stays light.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build"
cmake_args=(-DCMAKE_BUILD_TYPE=Release)
if [[ "${1:-}" == "--sanitize" ]]; then
  build_dir="$root/build-sanitize"
  cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSP_SANITIZE=ON -DTSP_BUILD_BENCH=OFF)
fi
if [[ "${CI:-}" == "true" ]]; then
  cmake_args+=(-DTSP_WERROR=ON)
fi

lists=("$root/scripts/debian-packages.txt")
[[ "${TSP_TEST_PACKAGES:-}" == "1" ]] && lists+=("$root/scripts/test-packages.txt")
mapfile -t wanted < <(cat "${lists[@]}" | grep -v '^\s*#' | grep -v '^\s*$')
missing=()
for pkg in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq >/dev/null
  "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

log="$build_dir/setup.log"
mkdir -p "$build_dir"
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  if ! cmake -S "$root" -B "$build_dir" "${cmake_args[@]}" >"$log" 2>&1; then
    cat "$log"; echo "setup: cmake configure failed (log: $log)" >&2; exit 1
  fi
fi
if ! cmake --build "$build_dir" -j2 >"$log" 2>&1; then
  grep -E "error|Error" "$log" | head -40 >&2 || true
  echo "setup: build failed (full log: $log)" >&2
  exit 1
fi
