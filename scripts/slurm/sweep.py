#!/usr/bin/env python3
# sweep.py: grid sweeps of tsp-sim configs, run as a Slurm job array or locally, and their results merged.
"""Generate one config per grid point, run them, and collect result_<id>.json into one CSV.

  sweep.py generate base.yaml --set parallelism.plan.tp=1,2,4 --set cluster.topology.chips=4,8 -o sweep/
  sbatch --array=0-5 ... scripts/slurm/sweep-array.sbatch     (the command generate prints)
  sweep.py collect sweep/ -o results.csv
"""

import argparse
import copy
import csv
import itertools
import json
import shlex
import subprocess
import sys
from pathlib import Path

try:
    import yaml
except ImportError:
    sys.exit("sweep.py: error: PyYAML is missing (Debian package python3-yaml)")

INDEX = "sweep.tsv"
RESULT_KEYS = ("makespan_cycles", "makespan_seconds", "throughput_per_second")
SLURM_DIR = Path(__file__).resolve().parent


class SweepError(Exception):
    """A user-facing problem with the sweep's arguments or files."""


def split_values(text):
    """Split 'a,b,[1,2]' on the commas that are not inside brackets or braces."""
    values, depth, current = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            values.append(current)
            current = ""
        else:
            current += ch
    values.append(current)
    return [v.strip() for v in values]


def parse_axis(spec):
    """'key.path=v1,v2' -> (key, [parsed YAML scalars]); values keep YAML typing (4 is an int)."""
    key, sep, rest = spec.partition("=")
    if not sep or not key.strip() or not rest.strip():
        raise SweepError(f"--set expects KEY=V1,V2,..., got '{spec}'")
    values = []
    for raw in split_values(rest):
        if raw == "":
            raise SweepError(f"--set {spec}: empty value")
        values.append(yaml.safe_load(raw))
    return key.strip(), values


def set_key(config, dotted, value):
    """Set config[a][b][c] = value for 'a.b.c', creating mappings on the way."""
    node = config
    parts = dotted.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if not isinstance(child, dict):
            if child is not None:
                # e.g. parallelism.plan: auto swept as parallelism.plan.tp: the mapping replaces it.
                print(f"sweep.py: note: {'.'.join(parts[:i + 1])} was {child!r}; replaced by a mapping",
                      file=sys.stderr)
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def cell(value):
    """A grid value as one TSV/CSV cell (YAML flow style for lists and maps)."""
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def anchor_paths(config, base_dir):
    """Make the config's file paths absolute: they resolve from the config's directory, and the
    generated configs live in the sweep directory, not beside the base config."""
    model = config.get("model")
    if isinstance(model, dict) and isinstance(model.get("onnx"), str) and not Path(model["onnx"]).is_absolute():
        model["onnx"] = str((base_dir / model["onnx"]).resolve())
    parallelism = config.get("parallelism")
    if isinstance(parallelism, dict):
        plan = parallelism.get("plan")
        if isinstance(plan, str) and plan != "auto" and not Path(plan).is_absolute():
            parallelism["plan"] = str((base_dir / plan).resolve())


def find_tsp_sim():
    """The tsp-sim the array tasks should run: on PATH, in this source tree's build/, or beside an install."""
    import shutil
    found = shutil.which("tsp-sim")
    candidates = [Path(found)] if found else []
    candidates += [SLURM_DIR.parents[1] / "build" / "tsp-sim",         # <source>/scripts/slurm
                   SLURM_DIR.parents[3] / "bin" / "tsp-sim"]           # <prefix>/share/tsp-sim/scripts/slurm
    return next((c.resolve() for c in candidates if c.is_file()), None)


def generate(args):
    base_path = Path(args.base)
    try:
        base = yaml.safe_load(base_path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SweepError(f"cannot read {base_path}: {exc}") from exc
    if not isinstance(base, dict):
        raise SweepError(f"{base_path}: expected a mapping at the top level")
    anchor_paths(base, base_path.resolve().parent)
    axes = [parse_axis(s) for s in args.set]
    keys = [k for k, _ in axes]
    if len(set(keys)) != len(keys):
        raise SweepError("each key may be given to --set once")
    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if (out / INDEX).exists() and not args.force:
        raise SweepError(f"{out / INDEX} exists; use --force to overwrite the sweep")
    points = list(itertools.product(*[v for _, v in axes]))
    width = max(4, len(str(len(points) - 1)))
    index_rows = []
    for i, point in enumerate(points):
        config = copy.deepcopy(base)
        for key, value in zip(keys, point):
            set_key(config, key, value)
        # Every point gets its own trace, so array tasks never write the same file.
        if "output.trace" not in keys:
            set_key(config, "output.trace", str(out / f"trace_{i:0{width}d}.h5"))
        path = out / f"config_{i:0{width}d}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        index_rows.append([str(i), str(path)] + [cell(v) for v in point])
    with open(out / INDEX, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "config"] + keys)
        writer.writerows(index_rows)
    print(f"sweep.py: {len(points)} configs in {out}", file=sys.stderr)
    if args.local:
        return run_local(out, index_rows, shlex.split(args.command))
    throttle = f"%{args.max_parallel}" if args.max_parallel else ""
    export = f"--export=ALL,SWEEP_DIR={out},TSP_SLURM_DIR={SLURM_DIR}"
    tsp_sim = find_tsp_sim()
    if tsp_sim:
        export += f",TSP_SIM={tsp_sim}"
    else:
        print("sweep.py: no tsp-sim on PATH or beside these scripts: add TSP_SIM=/path/to/tsp-sim to --export",
              file=sys.stderr)
    command = ["sbatch", f"--array=0-{len(points) - 1}{throttle}", export, str(SLURM_DIR / "sweep-array.sbatch")]
    print(" ".join(shlex.quote(c) for c in command))
    return 0


def run_local(out, index_rows, prefix):
    """Run every point in turn with `prefix --config CFG --json --quiet`, as the array script does."""
    if not prefix:
        raise SweepError("--command is empty")
    failed = 0
    for row in index_rows:
        point, config = row[0], row[1]
        result = out / f"result_{point}.json"
        command = prefix + ["--config", config, "--json", "--quiet"]
        with open(result, "w") as stdout, open(out / f"result_{point}.log", "w") as stderr:
            try:
                rc = subprocess.run(command, stdout=stdout, stderr=stderr).returncode
            except OSError as exc:
                raise SweepError(f"cannot run {command[0]}: {exc.strerror}") from exc
        if rc != 0:
            failed += 1
            print(f"sweep.py: point {point} exited with {rc} (see {out}/result_{point}.log)",
                  file=sys.stderr)
    print(f"sweep.py: {len(index_rows) - failed} of {len(index_rows)} points succeeded", file=sys.stderr)
    return 1 if failed else 0


def find_key(doc, key):
    """A stable --json key at the top level or one level down (e.g. under 'run')."""
    if key in doc:
        return doc[key]
    for value in doc.values():
        if isinstance(value, dict) and key in value:
            return value[key]
    return ""


def collect(args):
    sweep = Path(args.directory)
    try:
        with open(sweep / INDEX, newline="") as f:
            index = list(csv.DictReader(f, delimiter="\t"))
    except OSError as exc:
        raise SweepError(f"cannot read {sweep / INDEX}: {exc.strerror}") from exc
    if not index:
        raise SweepError(f"{sweep / INDEX} lists no points")
    grid_keys = [k for k in index[0] if k not in ("id", "config")]
    rows, missing = [], 0
    for point in index:
        path = sweep / f"result_{point['id']}.json"
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            doc, status = None, "missing"
        except (OSError, ValueError):  # a run killed mid-write leaves an empty or cut file
            doc, status = None, "invalid"
        else:
            status = "ok" if isinstance(doc, dict) else "invalid"
        if status != "ok":
            doc = {}
            missing += 1
        rows.append([point["id"]] + [point[k] for k in grid_keys]
                    + [find_key(doc, k) for k in RESULT_KEYS] + [status])
    out = open(args.output, "w", newline="") if args.output else sys.stdout
    try:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["id"] + grid_keys + list(RESULT_KEYS) + ["status"])
        writer.writerows(rows)
    finally:
        if args.output:
            out.close()
    if missing:
        print(f"sweep.py: {missing} of {len(rows)} points have no usable result", file=sys.stderr)
    return 0


def parser():
    top = argparse.ArgumentParser(prog="sweep.py", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command_name", required=True, metavar="COMMAND")
    p = sub.add_parser("generate", help="write one config per grid point and a sweep.tsv index")
    p.add_argument("base", metavar="BASE.yaml", help="the config every point starts from")
    p.add_argument("--set", action="append", default=[], metavar="KEY=V1,V2",
                   help="a grid axis: dotted config key and its values (repeatable; "
                        "lists keep their commas: dims=[2,2],[4,4])")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="sweep directory")
    p.add_argument("--force", action="store_true", help="overwrite an existing sweep in DIR")
    p.add_argument("--max-parallel", type=int, metavar="N", help="array throttle (--array=0-N%%K)")
    p.add_argument("--local", action="store_true", help="run the points here, one after another")
    p.add_argument("--command", default="tsp-sim", metavar="PREFIX",
                   help="with --local: command run as PREFIX --config CFG --json --quiet "
                        "(default: tsp-sim; e.g. 'mpirun -np 2 tsp-sim')")
    p.set_defaults(func=generate)
    p = sub.add_parser("collect", help="merge result_<id>.json with the grid values into CSV")
    p.add_argument("directory", metavar="DIR", help="sweep directory")
    p.add_argument("-o", "--output", metavar="OUT.csv", help="write here instead of stdout")
    p.set_defaults(func=collect)
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except SweepError as exc:
        print(f"sweep.py: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
