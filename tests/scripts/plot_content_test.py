# plot_content_test: what tsp-trace's plots draw, read off the matplotlib figures (not only that a PNG exists).
"""Each plot command is run in this process with its figure captured before it is saved."""

import sys
import tempfile
import unittest
from pathlib import Path

import h5py
import matplotlib
import numpy as np

matplotlib.use("Agg")

from synthetic_trace import CLOCK_MHZ, SOURCE_DIR, ring_links, write_trace  # noqa: E402

sys.path.insert(0, str(SOURCE_DIR / "scripts"))
from tsp_trace import cli  # noqa: E402
from matplotlib.collections import LineCollection, PolyCollection  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402


class PlotContent(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = Path(cls.tmp.name)
        cls.instructions = cls.dir / "instructions.h5"
        write_trace(cls.instructions, "instructions", chips=4, ops=True, plans=True)
        cls.summary = cls.dir / "summary.h5"
        write_trace(cls.summary, "summary", chips=4)
        cls.rack = cls.dir / "rack.h5"
        write_trace(cls.rack, "links", chips=72)
        cls.system = cls.dir / "system.h5"
        write_trace(cls.system, "links", chips=210)
        # Three runs: two of one model on 4 and 8 chips, one of another model.
        cls.runs = []
        for name, chips, model in (("mlp4", 4, "mlp"), ("mlp8", 8, "mlp"), ("bert8", 8, "bert")):
            path = cls.dir / f"{name}.h5"
            write_trace(path, "summary", chips=chips)
            with h5py.File(path, "a") as f:
                f["meta"].attrs["config_yaml"] = f"model: {{builtin: {model}}}\n" + f["meta"].attrs["config_yaml"]
            cls.runs.append(path)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def draw(self, *argv):
        """The figure `tsp-trace ARGV` saves."""
        figures = []
        saved = cli.save
        cli.save = lambda fig, out: figures.append(fig)
        try:
            self.assertEqual(cli.main([str(a) for a in argv] + ["-o", str(self.dir / "unused.png")]), 0)
        finally:
            cli.save = saved
        self.assertEqual(len(figures), 1)
        return figures[0]

    @staticmethod
    def texts(ax):
        return [t.get_text() for t in ax.texts]

    def test_timeline_bars_layers_and_both_time_axes(self):
        fig = self.draw("timeline", self.instructions, "--chips", "0,2")
        axes = [ax for ax in fig.axes if ax.get_ylabel().startswith("chip ")]
        self.assertEqual([ax.get_ylabel() for ax in axes], ["chip 0", "chip 2"])
        for ax, chip in zip(axes, (0, 2)):
            bars = sum(len(c.get_paths()) for c in ax.collections if isinstance(c, PolyCollection))
            self.assertEqual(bars, 40 + chip, "one bar per instruction row of the chip")
            # The three layers, in order, each marked from its first instruction on the chip.
            self.assertEqual(self.texts(ax), ["L0", "L1", "L2"])
            starts = [t.xy[0] for t in ax.texts]
            self.assertEqual(starts, sorted(starts))
            self.assertEqual(starts[0], 0)
        self.assertEqual(axes[-1].get_xlabel(), "cycle")
        labels = [child.get_xlabel() for ax in fig.axes for child in ax.child_axes]
        self.assertIn(f"µs at {CLOCK_MHZ:g} MHz", labels)
        fig.canvas.draw()  # the µs axis follows the cycle axis when drawn
        seconds = axes[0].child_axes[0]
        self.assertAlmostEqual(seconds.get_xlim()[1], axes[0].get_xlim()[1] / CLOCK_MHZ, places=6)

    def test_utilisation_strips_are_log_scaled_unless_asked(self):
        fig = self.draw("timeline", self.summary, "--chips", "1,3")
        images = [im for ax in fig.axes for im in ax.get_images()]
        self.assertEqual(len(images), 2)
        self.assertTrue(all(isinstance(im.norm, LogNorm) for im in images))
        self.assertEqual(images[0].get_array().shape[0], 5, "one row per unit kind")
        self.assertIn("log", fig.axes[-1].get_ylabel())
        linear = self.draw("timeline", self.summary, "--chips", "1", "--scale", "linear")
        image = [im for ax in linear.axes for im in ax.get_images()][0]
        self.assertNotIsInstance(image.norm, LogNorm)
        self.assertEqual((image.norm.vmin, image.norm.vmax), (0.0, 1.0))

    def test_rack_links_are_drawn_and_every_chip_labelled(self):
        fig = self.draw("links", self.rack)
        ax = fig.axes[0]
        lines = [c for c in ax.collections if isinstance(c, LineCollection)]
        self.assertEqual(len(lines), 1)
        self.assertEqual(len(lines[0].get_segments()), len(ring_links(72)))
        labels = [t.get_text() for t in ax.texts if t.get_text().isdigit()]
        self.assertEqual(sorted(int(t) for t in labels), list(range(72)))
        self.assertIn("72 chips", ax.get_title())

    def test_larger_clusters_are_aggregated_per_group(self):
        fig = self.draw("links", self.system)
        ax = fig.axes[0]
        image = [im for im in ax.get_images() if isinstance(im, AxesImage)][0]
        self.assertEqual(image.get_array().shape, (3, 3), "210 chips in groups of 72")
        self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["0-71", "72-143", "144-209"])
        # A ring links consecutive chips: groups meet only their neighbours and themselves.
        cells = np.ma.getmaskarray(image.get_array())
        self.assertFalse(cells[0, 0] or cells[0, 1] or cells[1, 2])
        grouped = self.draw("links", self.system, "--group", "30")
        self.assertEqual([im for im in grouped.axes[0].get_images()][0].get_array().shape, (7, 7))

    def test_compare_joins_only_runs_of_one_model(self):
        fig = self.draw("compare", *self.runs)
        top = fig.axes[0]
        joined = {line.get_label(): list(line.get_xdata()) for line in top.get_lines()}
        self.assertEqual(joined, {"mlp": [4.0, 8.0], "bert": [8.0]})
        self.assertEqual(top.get_lines()[1].get_linestyle(), "-", "the mlp runs on 4 and 8 chips are a scaling curve")
        self.assertEqual(top.get_lines()[0].get_linestyle(), "None", "a lone run is a point")
        self.assertEqual(sorted(t.get_text() for t in top.texts), ["bert8", "mlp4", "mlp8"])

    def test_plans_mark_the_pareto_front_and_the_best_plan(self):
        fig = self.draw("plans", self.instructions)
        chips_axis = fig.axes[0]
        front = [line for line in chips_axis.get_lines() if line.get_label() == "Pareto front"]
        self.assertEqual(len(front), 1)
        x, y = front[0].get_xdata(), front[0].get_ydata()
        self.assertTrue(np.all(np.diff(x) > 0) and np.all(np.diff(y) > 0), "the front rises with the chips")
        self.assertTrue(any("rank 0" in t.get_text() for t in chips_axis.get_legend().get_texts()))


if __name__ == "__main__":
    unittest.main(verbosity=2)
