# install_test: `cmake --install` into a fresh prefix, then the installed tools used from outside the source tree.
"""Usage: installed_tree.py BINARY_DIR WORK_DIR. Installs the build into WORK_DIR/prefix and runs the installed
quickstart.sh, tsp-trace (its module found beside the install) and the report page from another directory."""

import os
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from work_dir import fresh_work_dir  # noqa: E402

BINARY_DIR = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else None
WORK_DIR = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else None
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", MPLBACKEND="Agg")
ENV.pop("TSP_REPORT_ASSETS", None)


class InstalledTree(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        fresh_work_dir(WORK_DIR)
        cls.prefix = WORK_DIR / "prefix"
        cls.run_dir = WORK_DIR / "elsewhere"
        cls.run_dir.mkdir()
        out = subprocess.run(["cmake", "--install", str(BINARY_DIR), "--prefix", str(cls.prefix)],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr

    def run_here(self, *args):
        return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=self.run_dir, env=ENV)

    def test_installed_quickstart_runs_outside_the_source_tree(self):
        result = self.run_here(self.prefix / "share" / "tsp-sim" / "scripts" / "quickstart.sh", "--quiet")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("makespan:", result.stdout)
        self.assertIn("simulation:  2 ranks", result.stdout)
        self.assertTrue((self.run_dir / "out" / "quickstart.h5").is_file())
        summary = self.run_here(self.prefix / "bin" / "tsp-trace", "summary", "out/quickstart.h5", "--what", "run")
        self.assertEqual(summary.returncode, 0, summary.stderr)
        self.assertIn("makespan_cycles", summary.stdout)
        if (BINARY_DIR / "report-assets").is_dir():
            page = self.run_here(self.prefix / "bin" / "tsp-trace", "report", "out/quickstart.h5", "-o", "q.html")
            self.assertEqual(page.returncode, 0, page.stderr)
            self.assertIn("uPlot", (self.run_dir / "q.html").read_text())

    def test_a_project_builds_on_the_installed_libraries(self):
        source = Path(__file__).resolve().parents[2] / "examples" / "library"
        build = WORK_DIR / "library-build"
        configure = subprocess.run(["cmake", "-S", str(source), "-B", str(build), f"-DCMAKE_PREFIX_PATH={self.prefix}",
                                    "-DCMAKE_BUILD_TYPE=Release"], capture_output=True, text=True)
        self.assertEqual(configure.returncode, 0, configure.stdout + configure.stderr)
        made = subprocess.run(["cmake", "--build", str(build), "-j2"], capture_output=True, text=True)
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        # It includes the installed headers, not the source tree's.
        cache = (build / "CMakeFiles" / "pipeline_cycles.dir" / "flags.make").read_text()
        self.assertIn(str(self.prefix / "include" / "tsp-sim"), cache)
        self.assertNotIn(str(source.parents[1] / "src"), cache)
        config = self.prefix / "share" / "tsp-sim" / "configs" / "quickstart.yaml"
        result = self.run_here(build / "pipeline_cycles", config)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        lines = [line for line in result.stdout.splitlines() if line.startswith("chip ")]
        self.assertEqual(len(lines), 4, result.stdout)
        for line in lines:
            words = line.split()
            self.assertEqual(words[3], words[6], line)  # predicted == simulated
            self.assertGreater(int(words[3]), 0, line)
        broken = self.run_here(build / "pipeline_cycles", self.run_dir / "missing.yaml")
        self.assertEqual(broken.returncode, 2, broken.stderr)
        self.assertIn("missing.yaml", broken.stderr)

    def test_the_module_is_installed_for_users_scripts(self):
        where = self.run_here(self.prefix / "bin" / "tsp-trace", "--python-path")
        self.assertEqual(where.returncode, 0, where.stderr)
        self.assertEqual(Path(where.stdout.strip()), self.prefix / "share" / "tsp-sim" / "python")
        probe = subprocess.run(["/usr/bin/python3", "-c", "import tsp_trace; print(tsp_trace.__file__)"],
                               capture_output=True, text=True, cwd=self.run_dir,
                               env=dict(ENV, PYTHONPATH=where.stdout.strip()))
        self.assertEqual(probe.returncode, 0, probe.stderr)
        self.assertTrue(probe.stdout.strip().startswith(str(self.prefix)))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
