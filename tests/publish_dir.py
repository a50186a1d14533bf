"""Writes a directory of generated test inputs so that readers never see a half-written file.

Every test process of a gtest suite regenerates its inputs in SetUpTestSuite, and ctest runs those
processes in parallel, so one process may read a model while another rewrites it. A script builds
its files in a private temporary directory beside OUTDIR and `published` moves each into OUTDIR
with os.replace, which is atomic: a reader sees the old file or the new one, never a partial one.
"""
import contextlib
import os
import shutil
import tempfile


@contextlib.contextmanager
def published(out):
    """Yields a fresh directory to write into; on success its tree replaces the same files in `out`."""
    out = os.path.abspath(out)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix="." + os.path.basename(out) + ".", dir=parent)
    try:
        yield staging
        for root, _, files in os.walk(staging):
            target = os.path.join(out, os.path.relpath(root, staging))
            os.makedirs(target, exist_ok=True)
            for name in files:
                os.replace(os.path.join(root, name), os.path.join(target, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
