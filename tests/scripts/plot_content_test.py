# plot_content_test: what tsp-trace's plots draw (labels, scales, axes), checked on the figures themselves.
"""The plots are built in-process from synthetic traces and their matplotlib artists inspected."""

import argparse
import sys
import tempfile
import unittest
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

from synthetic_trace import CLOCK_MHZ, SOURCE_DIR, write_trace  # noqa: E402

sys.path.insert(0, str(SOURCE_DIR / "scripts"))
from tsp_trace import Trace, link_utilization  # noqa: E402
from tsp_trace import cli  # noqa: E402


def ring(count):
    a = np.arange(count)
    return a, (a + 1) % count


class PlotContent(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = Path(cls.tmp.name)
        cls.summary = cls.dir / "summary.h5"
        cls.instructions = cls.dir / "instructions.h5"
        write_trace(cls.summary, "summary")
        write_trace(cls.instructions, "instructions")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def tearDown(self):
        plt.close("all")

    def args(self, **kw):
        base = dict(start=None, end=None, scale="log", layout="auto", group=None)
        base.update(kw)
        return argparse.Namespace(**base)

    def test_every_chip_of_a_rack_is_labelled(self):
        a, b = ring(72)
        util = np.linspace(0.0, 0.9, 72)
        fig = cli.draw_links(plt, 72, a, b, util, util / 2, self.args())
        ax = fig.axes[0]
        labels = {t.get_text() for t in ax.texts}
        self.assertTrue({str(c) for c in range(72)} <= labels)
        legend = [t.get_text() for t in ax.texts if t.get_text().startswith("busiest links")]
        self.assertEqual(len(legend), 1)
        self.assertIn("71-0: 90.0% / 45.0%", legend[0])  # the busiest link named first

    def test_a_large_cluster_is_drawn_per_group(self):
        a, b = ring(10440)
        util = np.zeros(10440)
        util[100] = 0.5  # link 100-101: inside the second group of 72
        util[143] = 0.8  # link 143-144: from group 1 to group 2
        fig = cli.draw_links(plt, 10440, a, b, util, np.zeros(10440), self.args())
        image = fig.axes[0].images[0]
        matrix = image.get_array()
        self.assertEqual(matrix.shape, (145, 145))
        self.assertAlmostEqual(float(matrix[1, 1]), 0.5)
        self.assertAlmostEqual(float(matrix[1, 2]), 0.8)
        self.assertTrue(np.ma.is_masked(matrix[0, 5]))  # no link between groups 0 and 5
        ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        self.assertEqual(ticks[0], "0-71")
        self.assertIn("groups of 72", fig.axes[0].get_xlabel())

    def test_utilisation_strips_use_a_log_scale_and_microseconds(self):
        with Trace(self.summary) as trace:
            fig = cli.draw_utilization_strips(plt, trace, [0, 1], self.args())
        image = fig.axes[0].images[0]
        self.assertIsInstance(image.norm, LogNorm)
        self.assertLessEqual(image.norm.vmin, 0.1)
        tops = [c for c in fig.axes[0].get_children() if type(c).__name__ == "SecondaryAxis"]
        self.assertEqual(len(tops), 1)
        self.assertEqual(tops[0].get_xlabel(), f"µs at {CLOCK_MHZ:g} MHz")
        with Trace(self.summary) as trace:
            linear = cli.draw_utilization_strips(plt, trace, [0], self.args(scale="linear"))
        self.assertNotIsInstance(linear.axes[0].images[0].norm, LogNorm)

    def test_gantt_has_a_cycle_and_a_microsecond_axis(self):
        with Trace(self.instructions) as trace:
            fig = cli.draw_gantt(plt, trace, [0], self.args())
        ax = fig.axes[0]
        self.assertEqual(ax.get_xlabel(), "cycle")
        tops = [c for c in ax.get_children() if type(c).__name__ == "SecondaryAxis"]
        self.assertEqual(len(tops), 1)
        self.assertEqual(tops[0].get_xlabel(), f"µs at {CLOCK_MHZ:g} MHz")
        self.assertGreater(len(ax.collections), 0)  # bars were drawn

    def test_link_utilisation_is_per_direction(self):
        with Trace(self.summary) as trace:
            links = trace.read("/summary/links")
            ab, ba = link_utilization(links, int(trace.run()["makespan_cycles"]))
        self.assertEqual(len(ab), len(links))
        self.assertEqual(len(ba), len(links))


if __name__ == "__main__":
    unittest.main()
