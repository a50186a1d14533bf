# work_dir: the scratch directory a script test clears and remakes, guarded by a marker file.
"""Only a directory this test made before is removed: a wrong argument must not delete a tree."""

import shutil
from pathlib import Path

MARKER = ".tsp-test-workdir"


def fresh_work_dir(path):
    """Empty `path` (made by an earlier run of a test, as its marker shows) or create it; returns it."""
    path = Path(path)
    if path.exists():
        if not (path / MARKER).exists():
            raise SystemExit(f"{path} exists and is not a work directory of this test; give another")
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / MARKER).touch()
    return path
