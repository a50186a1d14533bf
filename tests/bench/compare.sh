#!/usr/bin/env bash
# Compares the benchmarks of another commit with the current tree's: builds tsp_bench of both, runs them
# alternately on this machine and prints the speed ratio per benchmark (or, with --callgrind, counts the
# simulator's instructions per chip it builds, a figure the machine's load does not move).
#
# Usage: tests/bench/compare.sh [options] OLD_REF [-- extra tsp_bench arguments]
#   --filter REGEX    benchmarks to compare (default 'BM_Simulate(Mlp|BertShard)/')
#   --rounds N        runs of each build, alternating (default 3); each run repeats each benchmark once
#   --min-time S      Google Benchmark's --benchmark_min_time per run (default 1)
#   --build DIR       the current tree's build directory (default build)
#   --callgrind       instead of timing: instructions inside the chip simulator (makeTspChip and
#                     Chip::advanceTo) per chip built (one per iteration, Google Benchmark's unreported
#                     sizing iterations included), one run per benchmark under valgrind for
#                     --min-time seconds (default then 0.3: tens of iterations, so that work done once
#                     per program weighs as it does in a long run)
#   --keep            keep OLD_REF's git worktree and its build (removed at exit otherwise)
# OLD_REF is built in DIR/compare/<commit>/tree/build from a temporary git worktree, with ccache when it is
# installed (export CCACHE_BASEDIR to the directory that holds the checkouts, and the rebuild is mostly hits).
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

filter='BM_Simulate(Mlp|BertShard)/'
rounds=3
min_time=
build_dir=build
callgrind=0
keep=0
old_ref=
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --filter) filter="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --min-time) min_time="$2"; shift 2 ;;
    --build) build_dir="$2"; shift 2 ;;
    --callgrind) callgrind=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) usage ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "compare.sh: unknown option $1" >&2; usage ;;
    *) [[ -n "$old_ref" ]] && { echo "compare.sh: one OLD_REF only" >&2; usage; }; old_ref="$1"; shift ;;
  esac
done
[[ -n "$old_ref" ]] || usage
cg_min_time="${min_time:-0.3}"
min_time="${min_time:-1}"

root="$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
cd "$root"
old_commit="$(git rev-parse --verify "$old_ref^{commit}")" || { echo "compare.sh: no commit '$old_ref'" >&2; exit 2; }
python=/usr/bin/python3
[[ -x "$python" ]] || python=python3
jobs="${JOBS:-2}"
build_dir="$(mkdir -p "$build_dir" && cd "$build_dir" && pwd)"
work="$build_dir/compare/${old_commit:0:12}"
# The old tree's build sits inside it as build/ does in a checkout, so that ccache (CCACHE_BASEDIR) finds
# the objects other checkouts compiled from the same sources.
old_src="$work/tree"
old_build="$old_src/build"
mkdir -p "$work"

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

configure_and_build() {  # source dir, build dir
  if [[ ! -f "$2/CMakeCache.txt" ]]; then
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DTSP_WERROR=ON -DPython3_EXECUTABLE="$python" "${launcher[@]}" >/dev/null
  fi
  cmake --build "$2" -j"$jobs" --target tsp_bench >/dev/null
}

cleanup() {
  if [[ "$keep" == 0 && -d "$old_src" ]]; then git worktree remove --force "$old_src" || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ ! -d "$old_src" ]]; then
  git worktree add --detach "$old_src" "$old_commit" >/dev/null 2>&1
fi
echo "building tsp_bench of $old_ref (${old_commit:0:12}) in $old_build" >&2
configure_and_build "$old_src" "$old_build"
echo "building tsp_bench of the current tree in $build_dir" >&2
configure_and_build "$root" "$build_dir"
old_bin="$old_build/tests/bench/tsp_bench"
new_bin="$build_dir/tests/bench/tsp_bench"

# Only the benchmarks both builds have.
list() { "$1" --benchmark_list_tests --benchmark_filter="$filter" | sort; }
mapfile -t names < <(comm -12 <(list "$old_bin") <(list "$new_bin"))
[[ ${#names[@]} -gt 0 ]] || { echo "compare.sh: no benchmark matches '$filter' in both builds" >&2; exit 1; }
out="$work/results"  # beside the tree, so that it outlives the worktree
rm -rf "$out"
mkdir -p "$out"
echo "load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

if [[ "$callgrind" == 1 ]]; then
  for side in old new; do
    bin="$old_bin"; [[ "$side" == new ]] && bin="$new_bin"
    for i in "${!names[@]}"; do
      name="${names[$i]}"
      valgrind --tool=callgrind --callgrind-out-file="$out/$side.$i.callgrind" \
        --toggle-collect='tsp::sim::makeTspChip*' --toggle-collect='*::advanceTo(*' \
        "$bin" --benchmark_filter="^${name}\$" --benchmark_min_time="$cg_min_time" --benchmark_repetitions=1 \
        --benchmark_format=json --benchmark_out="$out/$side.$i.json" "${extra[@]}" >/dev/null 2>"$out/$side.$i.log"
    done
  done
else
  for ((r = 0; r < rounds; ++r)); do
    # Alternate which build goes first, so that neither always meets the same machine state.
    order=(old new); (( r % 2 == 1 )) && order=(new old)
    for side in "${order[@]}"; do
      bin="$old_bin"; [[ "$side" == new ]] && bin="$new_bin"
      "$bin" --benchmark_filter="$filter" --benchmark_min_time="$min_time" --benchmark_repetitions=1 \
        --benchmark_format=json --benchmark_out="$out/$side.$r.json" "${extra[@]}" >/dev/null
    done
  done
fi
echo "load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

TSP_BENCH_DIR="$(dirname "$0")" "$python" - "$out" "$callgrind" "$old_ref" "${names[@]}" <<'EOF'
import glob, json, os, statistics, sys
sys.path.insert(0, os.environ["TSP_BENCH_DIR"])
from sim_profile import chips_built

out, callgrind, old_ref, names = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4:]

def runs(side):
    rows = {}
    for path in sorted(glob.glob(os.path.join(out, f"{side}.*.json"))):
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                if b.get("run_type", "iteration") == "iteration":
                    rows.setdefault(b["name"], []).append(b)
    return rows

def per_chip(side, i):
    """Instructions collected per chip built: each chip one iteration, the unreported ones included."""
    path, total = os.path.join(out, f"{side}.{i}.callgrind"), 0
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
    return total / max(1, chips_built(path))

old, new = runs("old"), runs("new")
if callgrind:
    print(f"{'benchmark':40} {'old Ir/chip':>14} {'new Ir/chip':>14} {'old/new':>8}")
    for i, name in enumerate(names):
        o, n = per_chip("old", i), per_chip("new", i)
        print(f"{name:40} {o:14,.0f} {n:14,.0f} {o / n:8.3f}")
    sys.exit(0)

def median(rows, key):
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else None

print(f"{'benchmark':40} {'old CPU':>10} {'new CPU':>10} {'old/new':>8} {'old entries/s':>14} {'new entries/s':>14}")
for name in names:
    o, n = old.get(name, []), new.get(name, [])
    if not o or not n:
        print(f"{name:40} (no result: an error in one build)")
        continue
    ot, nt, unit = median(o, "cpu_time"), median(n, "cpu_time"), o[0]["time_unit"]
    oe, ne = median(o, "entries/s"), median(n, "entries/s")
    rates = f" {oe / 1e6:13.1f}M {ne / 1e6:13.1f}M" if oe and ne else ""
    print(f"{name:40} {ot:8.3f}{unit} {nt:8.3f}{unit} {ot / nt:8.3f}{rates}")
print(f"medians of {len(next(iter(old.values())))} alternating runs; old/new > 1: the current tree is faster than {old_ref}")
EOF
