# report_browser_test: tsp-trace report's HTML page, opened in headless Chromium, on traces tsp-sim writes.
"""Renders the page for a real run, then reads the DOM Chromium built (tables, uPlot charts) and checks a
screenshot for the charts' series colours. Usage: report_browser.py TSP_SIM SOURCE_DIR WORK_DIR."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import h5py
import matplotlib.image as mpimg
import numpy as np

TSP_SIM = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else None
SOURCE_DIR = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else Path(__file__).resolve().parents[2]
WORK_DIR = Path(sys.argv[3]).resolve() if len(sys.argv) > 3 else Path(tempfile.gettempdir())
TOOL = SOURCE_DIR / "scripts" / "tsp-trace"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", MPLBACKEND="Agg")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--window-size=1280,2200"]


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
        if path:
            return path
    raise AssertionError("no chromium: install Debian's chromium (scripts/test-packages.txt)")


def hex_rgb(code):
    return np.array([int(code[i:i + 2], 16) for i in (1, 3, 5)], dtype=float) / 255.0


class ReportPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        WORK_DIR.mkdir(parents=True, exist_ok=True)
        cls.tmp = tempfile.TemporaryDirectory(prefix="report-", dir=WORK_DIR)
        cls.dir = Path(cls.tmp.name)
        cls.trace = cls.dir / "quickstart.h5"
        run = subprocess.run(["mpirun", "-np", "2", str(TSP_SIM), "--config",
                              str(SOURCE_DIR / "configs" / "quickstart.yaml"), "--trace-level", "links",
                              "--out", str(cls.trace), "--quiet"], capture_output=True, text=True, env=ENV)
        assert run.returncode == 0, run.stderr
        cls.page = cls.dir / "report.html"
        made = subprocess.run(["/usr/bin/python3", str(TOOL), "report", str(cls.trace), "-o", str(cls.page)],
                              capture_output=True, text=True, env=ENV)
        assert made.returncode == 0, made.stderr
        profile = cls.dir / "profile"
        url = cls.page.as_uri()
        dom = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        cls.dom = dom.stdout
        cls.shot = cls.dir / "report.png"
        shot = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                               f"--screenshot={cls.shot}", url], capture_output=True, text=True, timeout=120,
                              cwd=cls.dir)
        assert shot.returncode == 0 and cls.shot.exists(), shot.stderr[-2000:]
        with h5py.File(cls.trace, "r") as f:
            cls.chips = f["/summary/chips"][()]
            cls.links = f["/summary/links"][()]
            cls.makespan = int(f["/summary/run"][0]["makespan_cycles"])
            cls.layers = f["/summary/layers"][()]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_page_is_self_contained(self):
        page = self.page.read_text()
        self.assertNotRegex(page, r"<script[^>]+src=")
        self.assertNotRegex(page, r"<link[^>]+href=")
        self.assertIn("uPlot", page)

    def test_the_script_ran(self):
        self.assertIn('data-rendered="yes"', self.dom)

    def test_summary_and_chip_table(self):
        self.assertIn(f"{self.makespan} cycles", self.dom)
        body = re.search(r'<table id="chips">.*?<tbody>(.*?)</tbody>', self.dom, re.S).group(1)
        rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
        self.assertEqual(len(rows), len(self.chips))
        first = re.findall(r"<td>(.*?)</td>", rows[0])
        self.assertEqual(first[0], str(int(self.chips[0]["chip"])))
        self.assertEqual(first[1], str(int(self.chips[0]["cycles"])))

    def test_layer_and_op_tables(self):
        body = re.search(r'<table id="layers">.*?<tbody>(.*?)</tbody>', self.dom, re.S).group(1)
        rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
        self.assertEqual(len(rows), len(self.layers))
        self.assertEqual([re.findall(r"<td>(.*?)</td>", r)[0] for r in rows], [str(int(i)) for i in self.layers["id"]])
        ops = re.search(r'<table id="ops">.*?<tbody>(.*?)</tbody>', self.dom, re.S).group(1)
        self.assertIn("<td>MatMul</td>", ops)

    def test_timeline_and_links_are_uplot_charts(self):
        self.assertEqual(len(re.findall(r'class="uplot', self.dom)), 2)
        self.assertEqual(self.dom.count("<canvas"), 2)
        chips = re.findall(r'<option value="(\d+)">chip', self.dom)
        busy = [int(c["chip"]) for c in self.chips
                if sum(int(c[f"busy_{k}"]) for k in ("mem", "vxm", "mxm", "sxm", "c2c")) > 0]
        self.assertEqual(sorted(map(int, chips)), sorted(busy))
        body = re.search(r'<table id="links-table">.*?<tbody>(.*?)</tbody>', self.dom, re.S).group(1)
        self.assertEqual(len(re.findall(r"<tr>", body)), len(self.links))

    def test_screenshot_shows_the_series(self):
        image = mpimg.imread(self.shot)[:, :, :3]
        pixels = image.reshape(-1, 3)
        nonwhite = np.mean(np.any(pixels < 0.9, axis=1))
        self.assertGreater(nonwhite, 0.02, "the page is (nearly) blank")
        # The timeline's MXM line and the links' a->b points are drawn in their colours.
        for name, colour in (("MXM", "#2ca02c"), ("link a->b", "#1f77b4")):
            close = np.sum(np.all(np.abs(pixels - hex_rgb(colour)) < 0.08, axis=1))
            self.assertGreater(close, 30, f"no {name} pixels ({colour}) in the screenshot")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
