# slurm_test: scripts/slurm/sweep.py and the sbatch scripts, run outside Slurm with a stand-in tsp-sim.
"""Grid generation, local runs, result collection, and the batch script's signal forwarding."""

import csv
import io
import json
import os
import subprocess
import tempfile
import textwrap
import unittest
from pathlib import Path

import yaml

from synthetic_trace import PYTHON, SOURCE_DIR

SLURM_DIR = SOURCE_DIR / "scripts" / "slurm"
SWEEP = SLURM_DIR / "sweep.py"

# Stands in for tsp-sim: logs its arguments, answers --json from the config, and on
# FAKE_SIGNAL sends that signal to its parent (the batch shell) and waits to be told to stop.
FAKE_TSP_SIM = textwrap.dedent("""\
    #!/usr/bin/python3
    import json, os, signal, sys
    import yaml
    args = sys.argv[1:]
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    config = yaml.safe_load(open(args[args.index("--config") + 1]))
    trace = args[args.index("--out") + 1] if "--out" in args else config["output"]["trace"]
    def stop(signum, frame):
        with open(trace[:-3] + ".partial.h5", "w") as f:
            f.write(signal.Signals(signum).name)
        sys.exit(7)
    wanted = os.environ.get("FAKE_SIGNAL")
    if wanted:
        signal.signal(signal.SIGUSR1, stop)
        signal.signal(signal.SIGTERM, stop)
        os.kill(os.getppid(), getattr(signal, "SIG" + wanted))
        while True:
            signal.pause()
    chips = config["cluster"]["topology"]["chips"]
    tp = config["parallelism"]["plan"]["tp"]
    print(json.dumps({"run": {"makespan_cycles": 1000 * chips // tp, "makespan_seconds": chips / tp,
                              "throughput_per_second": 8.0 * tp / chips}, "chips": []}))
    """)

BASE_CONFIG = textwrap.dedent("""\
    cluster:
      topology: {kind: ring, chips: 2}
    model:
      builtin: mlp
    parallelism:
      plan: auto
    output:
      level: summary
    """)


class SlurmScriptsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.fake = self.dir / "fake-tsp-sim"
        self.fake.write_text(FAKE_TSP_SIM)
        self.fake.chmod(0o755)
        self.log = self.dir / "argv.log"
        self.base = self.dir / "base.yaml"
        self.base.write_text(BASE_CONFIG)
        self.env = {**os.environ, "FAKE_LOG": str(self.log)}

    def tearDown(self):
        self.tmp.cleanup()

    def sweep(self, *args):
        return subprocess.run([PYTHON, str(SWEEP), *map(str, args)], capture_output=True, text=True,
                              env=self.env)

    def calls(self):
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def generate_grid(self, *extra):
        out = self.dir / "sweep"
        result = self.sweep("generate", self.base, "--set", "parallelism.plan.tp=1,2,4",
                            "--set", "cluster.topology.chips=4,8", "-o", out, *extra)
        return out, result

    def test_generate_writes_one_config_per_point(self):
        out, result = self.generate_grid()
        self.assertEqual(result.returncode, 0, result.stderr)
        configs = sorted(out.glob("config_*.yaml"))
        self.assertEqual(len(configs), 6)
        with open(out / "sweep.tsv", newline="") as f:
            index = list(csv.DictReader(f, delimiter="\t"))
        self.assertEqual([r["id"] for r in index], [str(i) for i in range(6)])
        self.assertEqual([(r["parallelism.plan.tp"], r["cluster.topology.chips"]) for r in index],
                         [("1", "4"), ("1", "8"), ("2", "4"), ("2", "8"), ("4", "4"), ("4", "8")])
        config = yaml.safe_load(Path(index[3]["config"]).read_text())
        self.assertEqual(config["parallelism"]["plan"], {"tp": 2})
        self.assertEqual(config["cluster"]["topology"], {"kind": "ring", "chips": 8})
        self.assertEqual(config["model"], {"builtin": "mlp"})
        self.assertEqual(config["output"]["trace"], str(out.resolve() / "trace_0003.h5"))
        self.assertIn("sbatch --array=0-5 ", result.stdout)
        self.assertIn(f"SWEEP_DIR={out.resolve()}", result.stdout)
        self.assertIn("sweep-array.sbatch", result.stdout)
        self.assertIn("parallelism.plan was 'auto'", result.stderr)

    def test_generate_refuses_to_overwrite_and_bad_axis(self):
        self.assertEqual(self.generate_grid()[1].returncode, 0)
        again = self.generate_grid()[1]
        self.assertEqual(again.returncode, 1)
        self.assertIn("use --force", again.stderr)
        self.assertEqual(self.generate_grid("--force")[1].returncode, 0)
        bad = self.sweep("generate", self.base, "--set", "cluster.topology.chips", "-o", self.dir / "b")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("--set expects KEY=V1,V2", bad.stderr)

    def test_list_values_keep_their_commas(self):
        out = self.dir / "mesh"
        result = self.sweep("generate", self.base, "--set", "cluster.topology.dims=[2,2],[4,4,2]",
                            "--set", "cluster.topology.kind=mesh", "-o", out, "--max-parallel", "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("--array=0-1%2", result.stdout)
        dims = [yaml.safe_load(p.read_text())["cluster"]["topology"]["dims"]
                for p in sorted(out.glob("config_*.yaml"))]
        self.assertEqual(dims, [[2, 2], [4, 4, 2]])

    def test_local_run_then_collect(self):
        out, result = self.generate_grid("--local", "--command", f"{PYTHON} {self.fake}")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([c[1:] for c in self.calls()],
                         [[str(out.resolve() / f"config_{i:04d}.yaml"), "--json", "--quiet"]
                          for i in range(6)])
        (out / "result_5.json").unlink()
        collected = self.sweep("collect", out)
        self.assertEqual(collected.returncode, 0, collected.stderr)
        rows = list(csv.DictReader(io.StringIO(collected.stdout)))
        self.assertEqual(len(rows), 6)
        self.assertEqual(list(rows[0]), ["id", "parallelism.plan.tp", "cluster.topology.chips",
                                         "makespan_cycles", "makespan_seconds",
                                         "throughput_per_second", "status"])
        self.assertEqual(rows[3]["makespan_cycles"], str(1000 * 8 // 2))
        self.assertAlmostEqual(float(rows[4]["throughput_per_second"]), 8.0 * 4 / 4)
        self.assertEqual([r["status"] for r in rows], ["ok"] * 5 + ["missing"])
        self.assertIn("1 of 6 points have no usable result", collected.stderr)
        target = self.dir / "results.csv"
        self.assertEqual(self.sweep("collect", out, "-o", target).returncode, 0)
        self.assertEqual(target.read_text(), collected.stdout)

    def test_local_run_reports_failures(self):
        out = self.dir / "one"
        fail = self.dir / "fail.sh"
        fail.write_text("#!/bin/sh\nexit 3\n")
        fail.chmod(0o755)
        result = self.sweep("generate", self.base, "--set", "parallelism.plan.tp=1,2", "-o", out,
                            "--local", "--command", str(fail))
        self.assertEqual(result.returncode, 1)
        self.assertIn("point 0 exited with 3", result.stderr)
        rows = list(csv.DictReader(io.StringIO(self.sweep("collect", out).stdout)))
        self.assertEqual([r["status"] for r in rows], ["invalid", "invalid"])

    def batch(self, script, **env):
        return subprocess.run(["bash", str(SLURM_DIR / script)], capture_output=True, text=True,
                              env={**self.env, "LAUNCHER": "none", "TSP_SIM": str(self.fake), **env})

    def test_batch_script_runs_tsp_sim(self):
        config = self.dir / "run.yaml"
        config.write_text(BASE_CONFIG.replace("plan: auto", "plan: {tp: 2}"))
        out = self.dir / "job"
        result = self.batch("tsp-sim.sbatch", CONFIG=str(config), OUT_DIR=str(out),
                            TSP_SIM_ARGS="--seed 3")
        self.assertEqual(result.returncode, 0, result.stderr)
        [args] = self.calls()
        self.assertEqual(args, ["--config", str(config), "--json", "--quiet", "--seed", "3",
                                "--out", str(out / "trace.h5")])
        self.assertEqual(json.loads((out / "result.json").read_text())["run"]["makespan_cycles"], 1000)

    def test_batch_script_forwards_signals(self):
        config = self.dir / "run.yaml"
        config.write_text(BASE_CONFIG.replace("plan: auto", "plan: {tp: 2}"))
        for signal_name in ("USR1", "TERM"):
            out = self.dir / signal_name
            result = self.batch("tsp-sim.sbatch", CONFIG=str(config), OUT_DIR=str(out),
                                FAKE_SIGNAL=signal_name)
            self.assertEqual(result.returncode, 7, result.stderr)
            self.assertEqual((out / "trace.partial.h5").read_text(), "SIG" + signal_name)
            self.assertIn(f"got {signal_name}", result.stderr)

    def test_batch_script_needs_config_and_known_launcher(self):
        result = self.batch("tsp-sim.sbatch")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("set CONFIG", result.stderr)
        result = self.batch("tsp-sim.sbatch", CONFIG=str(self.base), OUT_DIR=str(self.dir / "x"),
                            LAUNCHER="qsub")
        self.assertEqual(result.returncode, 1)
        self.assertIn("LAUNCHER must be srun, mpirun or none", result.stderr)

    def test_array_task_runs_its_point(self):
        out, generated = self.generate_grid()
        self.assertEqual(generated.returncode, 0, generated.stderr)
        result = self.batch("sweep-array.sbatch", SWEEP_DIR=str(out), TSP_SLURM_DIR=str(SLURM_DIR),
                            SLURM_ARRAY_TASK_ID="3")
        self.assertEqual(result.returncode, 0, result.stderr)
        [args] = self.calls()
        self.assertEqual(args[:2], ["--config", str(out.resolve() / "config_0003.yaml")])
        self.assertNotIn("--out", args)  # the config's own output.trace keeps points apart
        self.assertEqual(json.loads((out / "result_3.json").read_text())["run"]["makespan_cycles"], 4000)
        missing = self.batch("sweep-array.sbatch", SWEEP_DIR=str(out), TSP_SLURM_DIR=str(SLURM_DIR),
                             SLURM_ARRAY_TASK_ID="9")
        self.assertEqual(missing.returncode, 1)
        self.assertIn("no point 9", missing.stderr)


if __name__ == "__main__":
    unittest.main()
