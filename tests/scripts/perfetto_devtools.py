# perfetto_devtools: a real run's `tsp-trace perfetto` export as Chrome DevTools' trace engine reads it.
"""Usage: perfetto_devtools.py TSP_SIM SOURCE_DIR NODE_MODULES WORK_DIR. Runs the quickstart at trace level
instructions on 2 ranks, exports it for Perfetto, loads the export with DevTools' trace engine (npm
@paulirish/trace_engine, the Performance panel's parser) and checks that it sees one process per chip that
worked, every track and slice of the export, and a flow per chip-to-chip transfer."""

import collections
import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

import h5py

sys.path.insert(0, str(Path(__file__).resolve().parent))
from work_dir import fresh_work_dir  # noqa: E402

TSP_SIM, SOURCE, MODULES, WORK = (Path(a).resolve() for a in sys.argv[1:5]) if len(sys.argv) > 4 else (None,) * 4
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


class PerfettoInDevTools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        work = fresh_work_dir(WORK)
        cls.trace, cls.export = work / "q.h5", work / "q.json"
        run = subprocess.run(["mpirun", "-np", "2", str(TSP_SIM), "--config", str(SOURCE / "configs" / "quickstart.yaml"),
                              "--trace-level", "instructions", "--out", str(cls.trace), "--quiet"],
                             capture_output=True, text=True, env=ENV)
        assert run.returncode == 0, run.stderr
        export = subprocess.run(["/usr/bin/python3", str(SOURCE / "scripts" / "tsp-trace"), "perfetto", str(cls.trace),
                                 "-o", str(cls.export)], capture_output=True, text=True)
        assert export.returncode == 0, export.stderr
        loaded = subprocess.run(["node", str(SOURCE / "tests" / "scripts" / "devtools" / "load_perfetto.mjs"),
                                 str(MODULES), str(cls.export)], capture_output=True, text=True)
        assert loaded.returncode == 0, loaded.stderr
        cls.parsed = json.loads(loaded.stdout)
        cls.events = json.loads(cls.export.read_text())["traceEvents"]

    def slices(self):
        """Complete events of the export per (pid, tid)."""
        count = collections.Counter((e["pid"], e["tid"]) for e in self.events if e.get("ph") == "X")
        out = collections.defaultdict(dict)
        for (pid, tid), n in count.items():
            out[str(pid)][str(tid)] = n
        return dict(out)

    def test_devtools_sees_every_track_and_slice(self):
        self.assertEqual(self.parsed["processes"], self.slices())

    def test_a_process_per_chip_that_worked(self):
        with h5py.File(self.trace) as f:
            chips = f["summary/chips"][:]
            instructions = len(f["events/instructions"])
        worked = sorted(str(int(c["chip"])) for c in chips if c["instructions"] > 0)
        self.assertEqual(sorted(self.parsed["processes"]), worked)
        # Every instruction row is one slice; the rest of the slices are the transfers on the links.
        total = sum(sum(tracks.values()) for tracks in self.parsed["processes"].values())
        self.assertGreaterEqual(total, instructions)

    def test_a_flow_per_transfer(self):
        with h5py.File(self.trace) as f:
            transfers = len(f["events/c2c"])
        self.assertGreater(transfers, 0)
        self.assertEqual(self.parsed["flows"], transfers)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
