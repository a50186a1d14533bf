# slurm_real_test: the sbatch templates and the sweep, unmodified, on a real one-node Slurm on localhost.
"""Starts munged, slurmctld and slurmd (tests/scripts/local_slurm.py), then submits as a user would:
a single run of tsp-sim.sbatch under srun, the job array sweep.py prints, and a job signalled as Slurm
signals it ahead of its time limit, which leaves a partial trace. Usage: slurm_real.py TSP_SIM SOURCE_DIR WORK_DIR."""

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import h5py

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_slurm import LocalSlurm  # noqa: E402

TSP_SIM = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else None
SOURCE_DIR = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else Path(__file__).resolve().parents[2]
WORK_DIR = Path(sys.argv[3]).resolve() if len(sys.argv) > 3 else None
SLURM_DIR = SOURCE_DIR / "scripts" / "slurm"
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def job_id(sbatch_stdout):
    match = re.search(r"Submitted batch job (\d+)", sbatch_stdout)
    if not match:
        raise AssertionError(f"sbatch printed no job id: {sbatch_stdout!r}")
    return match.group(1)


class RealSlurm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        base = WORK_DIR or Path(tempfile.gettempdir())
        base.mkdir(parents=True, exist_ok=True)
        cls.tmp = tempfile.TemporaryDirectory(prefix="slurm-", dir=base)
        cls.dir = Path(cls.tmp.name)
        cls.slurm = LocalSlurm(cls.dir / "cluster").start()
        # A submit directory laid out as a source tree is (build/tsp-sim, configs/), with no tsp-sim on PATH.
        cls.submit = cls.dir / "tree"
        (cls.submit / "build").mkdir(parents=True)
        (cls.submit / "build" / "tsp-sim").symlink_to(TSP_SIM)
        (cls.submit / "configs").symlink_to(SOURCE_DIR / "configs")
        path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
                if not (Path(p) / "tsp-sim").exists()]
        cls.env = dict(cls.slurm.env(), **MPI_ENV, PATH=os.pathsep.join(path))

    @classmethod
    def tearDownClass(cls):
        cls.slurm.stop()
        cls.tmp.cleanup()

    def sbatch(self, *args, extra_env=None):
        env = dict(self.env, **(extra_env or {}))
        out = subprocess.run(["sbatch", *map(str, args)], capture_output=True, text=True, cwd=self.submit, env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        return job_id(out.stdout)

    def job_log(self, pattern):
        logs = sorted(self.submit.glob(pattern))
        return "\n".join(p.read_text(errors="replace") for p in logs)

    def wait_until_tasks_catch_usr1(self, marker, tasks, timeout=300):
        """Wait until `tasks` tsp-sim processes whose command line names `marker` catch SIGUSR1 (the
        local Slurm runs them on this host): a signal sent before srun has started them would be lost."""
        import signal as signals
        import time
        bit = 1 << (signals.SIGUSR1 - 1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = 0
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                if not cmdline or not cmdline[0].endswith(b"tsp-sim") or marker.encode() not in cmdline:
                    continue
                caught = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:")), 0)
                ready += bool(caught & bit)
            if ready >= tasks:
                return
            time.sleep(0.1)
        self.fail(f"{tasks} tsp-sim tasks catching SIGUSR1 not seen in {timeout} s")

    def test_single_run_under_srun_uses_every_task(self):
        out_dir = self.dir / "single"
        job = self.sbatch("--ntasks=2", SLURM_DIR / "tsp-sim.sbatch",
                          extra_env={"CONFIG": "configs/quickstart.yaml", "OUT_DIR": str(out_dir)})
        self.slurm.wait(job)
        log = self.job_log(f"tsp-sim-{job}.out")
        self.assertIn("srun --kill-on-bad-exit=1 --mpi=pmix", log)
        self.assertIn("tsp-sim.sbatch: done:", log)
        result = json.loads((out_dir / "result.json").read_text())
        # Both Slurm tasks are ranks of one run, not two one-rank runs writing the same file.
        self.assertEqual(result["ranks"], 2, log)
        direct = subprocess.run([str(TSP_SIM), "--config", str(SOURCE_DIR / "configs" / "quickstart.yaml"),
                                 "--json", "--quiet", "--out", str(self.dir / "direct.h5")],
                                capture_output=True, text=True, env=dict(os.environ, **MPI_ENV))
        self.assertEqual(direct.returncode, 0, direct.stderr)
        self.assertEqual(result["makespan_cycles"], json.loads(direct.stdout)["makespan_cycles"])
        with h5py.File(out_dir / "trace.h5", "r") as f:
            self.assertEqual(int(f["/summary/run"][0]["makespan_cycles"]), result["makespan_cycles"])

    def test_sweep_array_runs_the_printed_command(self):
        sweep_dir = self.dir / "sweep"
        gen = subprocess.run(["/usr/bin/python3", str(SLURM_DIR / "sweep.py"), "generate",
                              str(SOURCE_DIR / "configs" / "quickstart.yaml"),
                              "--set", "model.params.layers=4,8", "-o", str(sweep_dir)],
                             capture_output=True, text=True, cwd=self.submit, env=self.env)
        self.assertEqual(gen.returncode, 0, gen.stderr)
        command = shlex.split(gen.stdout.strip().splitlines()[-1])
        self.assertEqual(command[0], "sbatch")
        out = subprocess.run(command, capture_output=True, text=True, cwd=self.submit, env=self.env)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.slurm.wait(job_id(out.stdout))
        collected = subprocess.run(["/usr/bin/python3", str(SLURM_DIR / "sweep.py"), "collect", str(sweep_dir),
                                    "-o", str(sweep_dir / "results.csv")], capture_output=True, text=True,
                                   env=self.env)
        self.assertEqual(collected.returncode, 0, collected.stderr + self.job_log("tsp-sweep-*.out"))
        rows = (sweep_dir / "results.csv").read_text().strip().splitlines()
        self.assertEqual(len(rows), 3, rows)  # header + 2 points
        self.assertTrue(all(r.endswith(",ok") for r in rows[1:]), "\n".join(rows) + self.job_log("tsp-sweep-*.out"))
        cycles = [json.loads((sweep_dir / f"result_{i}.json").read_text())["makespan_cycles"]
                  for i in range(2)]
        self.assertLess(cycles[0], cycles[1])  # 4 layers finish before 8

    def test_time_limit_signal_leaves_a_partial_trace(self):
        # What the template's `--signal=B:USR1@120` makes Slurm do ahead of the time limit, sent at once
        # with scancel (Slurm's own time-limit check runs every 30 s, too coarse for a test): the batch
        # shell gets USR1, the template forwards it, and tsp-sim stops with exit 7 and a .partial.h5.
        config = self.dir / "long.yaml"
        config.write_text(textwrap.dedent(f"""\
            cluster:
              chip: {{preset: groq-tsp-v1}}
              topology: {{kind: ring, chips: 2}}
              link: {{lanes: 4, gbps_per_lane: 30, latency_ns: 250}}
            model:
              builtin: mlp
              params: {{layers: 2, hidden: 256, batch: 131072}}
            parallelism:
              plan: {{pp: 2, microbatches: 131072}}
            simulation: {{mode: timing, seed: 0}}
            output: {{trace: {self.dir / 'long' / 'trace.h5'}, level: summary}}
            """))
        out_dir = self.dir / "long"
        job = self.sbatch("--ntasks=2", "--time=10", SLURM_DIR / "tsp-sim.sbatch",
                          extra_env={"CONFIG": str(config), "OUT_DIR": str(out_dir), "TRACE_OUT": ""})
        self.slurm.wait_running(job)
        self.wait_until_tasks_catch_usr1(str(config), tasks=2)
        signalled = subprocess.run(["scancel", "--signal=USR1", "--batch", job], capture_output=True, text=True,
                                   env=self.env)
        self.assertEqual(signalled.returncode, 0, signalled.stderr)
        self.slurm.wait(job, timeout=600)
        log = self.job_log(f"tsp-sim-{job}.out")
        self.assertIn("got USR1", log)
        self.assertIn("interrupted: partial trace written", log)
        partial = out_dir / "trace.partial.h5"
        self.assertTrue(partial.exists(), log)
        self.assertFalse((out_dir / "trace.h5").exists())
        with h5py.File(partial, "r") as f:
            self.assertTrue(bool(f["/meta"].attrs["partial"]))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
