# doc_commands_test: every shell command shown in README.md and docs/getting-started.md runs as written.
"""Usage: doc_commands.py SOURCE_DIR BINARY_DIR WORK_DIR.

The commands run in order, one shell each, in WORK_DIR laid out as a source tree (build/ is the build
under test; configs/, scripts/, examples/ and tests/ are the sources), so that `out/` and other files a
command writes land there. Lines that set up a machine or the whole suite (scripts/quickstart.sh,
scripts/test.sh) and batch submissions (sbatch: tests/scripts/slurm_real.py runs those on a real
Slurm) are not run here; every other line is, and a non-zero exit fails the test."""

import os
import re
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from work_dir import fresh_work_dir  # noqa: E402

SOURCE_DIR = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
BINARY_DIR = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else SOURCE_DIR / "build"
WORK_DIR = Path(sys.argv[3]).resolve() if len(sys.argv) > 3 else Path("/tmp/tsp-doc-commands")
DOCS = ("README.md", "docs/getting-started.md")
NOT_HERE = (re.compile(r"^scripts/(quickstart|test)\.sh\b"), re.compile(r"\bsbatch\b"))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", MPLBACKEND="Agg",
           TSP_REPORT_ASSETS=str(BINARY_DIR / "report-assets"))


def commands(doc):
    """The shell commands of a Markdown file's ```sh blocks: continuation lines joined, comments kept."""
    text = (SOURCE_DIR / doc).read_text(encoding="utf-8")
    found = []
    for block in re.finditer(r"```(?:sh|bash)\n(.*?)```", text, re.S):
        joined = block.group(1).replace("\\\n", " ")
        for line in joined.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                found.append(line.strip())
    return found


class DocumentedCommands(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        fresh_work_dir(WORK_DIR)
        (WORK_DIR / "build").symlink_to(BINARY_DIR)
        for name in ("configs", "scripts", "examples", "tests"):
            (WORK_DIR / name).symlink_to(SOURCE_DIR / name)

    def test_every_command_runs(self):
        ran = 0
        for doc in DOCS:
            for command in commands(doc):
                if any(p.search(command) for p in NOT_HERE):
                    continue
                with self.subTest(doc=doc, command=command):
                    result = subprocess.run(["bash", "-c", command], cwd=WORK_DIR, env=ENV, capture_output=True,
                                            text=True, timeout=900)
                    self.assertEqual(result.returncode, 0,
                                     f"{doc}: `{command}` exited {result.returncode}:\n{result.stderr[-3000:]}")
                ran += 1
        self.assertGreater(ran, 10)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
