# tsp_trace_test: scripts/tsp-trace on synthetic traces of every trace level.
"""Each subcommand, its outputs and its error messages."""

import csv
import io
import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

import h5py
import numpy as np

from synthetic_trace import CLOCK_MHZ, KINDS, TOOL, UNITS_PER_KIND, run_tool, write_trace

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LEVELS = ("summary", "links", "instructions")


class TspTraceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = Path(cls.tmp.name)
        cls.traces, cls.chips = {}, {}
        for level in LEVELS:
            path = cls.dir / f"{level}.h5"
            cls.chips[level] = write_trace(path, level, chips=4, plans=(level == "instructions"))
            cls.traces[level] = path
        cls.single = cls.dir / "single.h5"
        write_trace(cls.single, "summary", chips=1)
        cls.wide = cls.dir / "wide.h5"
        write_trace(cls.wide, "links", chips=8, ranks=2)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def ok(self, *args):
        result = run_tool(*args)
        self.assertEqual(result.returncode, 0, f"tsp-trace {' '.join(map(str, args))}: {result.stderr}")
        return result

    def assertPng(self, path):
        data = Path(path).read_bytes()
        self.assertGreater(len(data), 1000)
        self.assertEqual(data[:8], PNG_SIGNATURE)

    def test_help(self):
        self.assertIn("perfetto", self.ok("--help").stdout)
        for command in ("summary", "timeline", "links", "compare", "perfetto", "plans"):
            self.assertIn("usage: tsp-trace " + command, self.ok(command, "--help").stdout)

    def test_summary_csv_has_one_correct_row_per_chip(self):
        for level in LEVELS:
            out = self.ok("summary", self.traces[level], "--format", "csv", "--what", "chips").stdout
            rows = list(csv.DictReader(io.StringIO(out)))
            expected = self.chips[level]
            self.assertEqual(len(rows), len(expected))
            for row, want in zip(rows, expected):
                for field in expected.dtype.names:
                    self.assertEqual(int(row[field]), int(want[field]), field)
                mem_units = UNITS_PER_KIND["MEM"]
                self.assertAlmostEqual(float(row["util_mem"]),
                                       want["busy_mem"] / (want["cycles"] * mem_units))

    def test_summary_json_all_tables(self):
        doc = json.loads(self.ok("summary", self.traces["links"], "--format", "json").stdout)
        self.assertEqual(sorted(doc), ["chips", "links", "run", "units"])
        self.assertEqual(len(doc["chips"]), 4)
        self.assertEqual(len(doc["units"]), 4 * len(KINDS))
        self.assertEqual(doc["run"][0]["makespan_cycles"], 1300)
        link0 = doc["links"][0]
        self.assertAlmostEqual(link0["util_ab"], link0["busy_cycles_ab"] / 1300)

    def test_summary_units_per_kind_and_per_unit(self):
        path = self.traces["summary"]
        with h5py.File(path, "r") as f:
            busy = f["/summary/unit_busy_cycles"][()]
            cycles = f["/summary/chips"]["cycles"]
        records = json.loads(self.ok("summary", path, "--format", "json", "--what", "units").stdout)
        vxm = [r for r in records if r["chip"] == 2 and r["kind"] == "VXM"][0]
        lo = UNITS_PER_KIND["MEM"]
        self.assertEqual(vxm["busy_cycles"], int(busy[2, lo:lo + 2].sum()))
        self.assertAlmostEqual(vxm["utilization"], busy[2, lo:lo + 2].sum() / (2 * cycles[2]))
        per_unit = json.loads(self.ok("summary", path, "--format", "json", "--what", "units",
                                      "--per-unit").stdout)
        self.assertEqual(len(per_unit), busy.size)
        self.assertAlmostEqual(per_unit[5]["utilization"], busy[0, 5] / cycles[0])

    def test_summary_table_and_csv_sections(self):
        text = self.ok("summary", self.traces["summary"]).stdout
        for name in ("chips:", "units:", "links:", "run:"):
            self.assertIn(name, text)
        sections = self.ok("summary", self.traces["summary"], "--format", "csv").stdout
        self.assertIn("# run\nmakespan_cycles,", sections)

    def test_summary_single_chip_has_no_links(self):
        doc = json.loads(self.ok("summary", self.single, "--format", "json").stdout)
        self.assertEqual(doc["links"], [])
        self.assertEqual(doc["run"][0]["chips"], 1)

    def test_timeline_every_level(self):
        for level in LEVELS:
            out = self.dir / f"timeline-{level}.png"
            result = self.ok("timeline", self.traces[level], "-o", out, "--chips", "0,2")
            self.assertPng(out)
            fallback = "drawing /timeline/utilization" in result.stderr
            self.assertEqual(fallback, level != "instructions")

    def test_timeline_window_and_bad_chip(self):
        out = self.dir / "window.png"
        self.ok("timeline", self.traces["instructions"], "-o", out, "--start", "100", "--end", "400")
        self.assertPng(out)
        bad = run_tool("timeline", self.traces["summary"], "-o", out, "--chips", "0,9")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("chip ids must be in 0..3", bad.stderr)

    def test_links_circle_and_no_links(self):
        out = self.dir / "links.png"
        self.ok("links", self.wide, "-o", out)
        self.assertPng(out)
        out = self.dir / "links-single.png"
        result = self.ok("links", self.single, "-o", out)
        self.assertIn("no chip-to-chip links", result.stderr)
        self.assertPng(out)

    def test_links_matrix_for_large_cluster(self):
        path = self.dir / "large.h5"
        write_trace(path, "summary", chips=210)
        out = self.dir / "links-large.png"
        self.ok("links", path, "-o", out)
        self.assertPng(out)

    def test_compare_csv_and_png(self):
        out = self.dir / "compare.png"
        result = self.ok("compare", self.traces["summary"], self.single, self.wide, "-o", out, "--csv")
        self.assertPng(out)
        rows = list(csv.DictReader(io.StringIO(result.stdout)))
        self.assertEqual([r["trace"] for r in rows], ["single", "summary", "wide"])
        self.assertEqual([int(r["chips"]) for r in rows], [1, 4, 8])
        self.assertEqual(rows[2]["dp"], "8")
        by_ranks = self.ok("compare", self.wide, self.single, "--x", "ranks", "--csv").stdout
        self.assertEqual([r["ranks"] for r in csv.DictReader(io.StringIO(by_ranks))], ["1", "2"])

    def test_compare_skips_search_only_traces(self):
        search = self.dir / "search-only.h5"
        search.write_bytes(Path(self.single).read_bytes())
        with h5py.File(search, "a") as f:
            del f["/summary/run"]
        result = self.ok("compare", self.single, search, "--csv")
        self.assertIn(f"skipping {search}: no simulated run in it", result.stderr)
        rows = list(csv.DictReader(io.StringIO(result.stdout)))
        self.assertEqual([r["trace"] for r in rows], ["single"])
        self.assertTrue(rows[0]["model"])
        alone = run_tool("compare", search, "--csv")
        self.assertEqual(alone.returncode, 1)
        self.assertIn("none of the traces holds a simulated run", alone.stderr)

    def test_compare_needs_an_output(self):
        result = run_tool("compare", self.single)
        self.assertEqual(result.returncode, 1)
        self.assertIn("give -o OUT.png, --csv", result.stderr)

    def test_perfetto_instructions(self):
        out = self.dir / "perfetto.json"
        self.ok("perfetto", self.traces["instructions"], "-o", out)
        events = json.loads(out.read_text())["traceEvents"]
        with h5py.File(self.traces["instructions"], "r") as f:
            rows = f["/events/instructions"][()]
            c2c = f["/events/c2c"][()]
        slices = [e for e in events if e["ph"] == "X" and e.get("cat") != "c2c"]
        self.assertEqual(len(slices), len(rows))
        got = sorted((e["pid"], e["args"]["unit"], e["args"]["program_index"], e["ts"]) for e in slices)
        want = sorted((int(r["chip"]), int(r["unit"]), int(r["program_index"]),
                       float(r["start_cycle"]) / CLOCK_MHZ) for r in rows)
        self.assertEqual(got, want)
        self.assertEqual(slices[0]["name"], "Read")
        self.assertEqual(sum(e["ph"] == "s" for e in events), len(c2c))
        self.assertEqual(sum(e["ph"] == "f" for e in events), len(c2c))
        self.assertTrue(any(e["ph"] == "C" for e in events))

    def test_export_sqlite_holds_every_table(self):
        out = self.dir / "export.db"
        result = self.ok("export", self.traces["instructions"], "-o", out, "--events")
        self.assertIn(f"wrote {out}", result.stderr)
        with h5py.File(self.traces["instructions"], "r") as f:
            chips = len(f["/summary/chips"])
            links = len(f["/summary/links"])
            instructions = int((f["/events/instructions"]["chip"] >= 0).sum())
        import sqlite3
        with sqlite3.connect(out) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            self.assertTrue({"run", "chips", "units", "unit_busy", "links", "plans", "instructions", "c2c"}
                            <= tables, tables)
            self.assertEqual(db.execute("SELECT COUNT(*) FROM chips").fetchone()[0], chips)
            self.assertEqual(db.execute("SELECT COUNT(*) FROM links").fetchone()[0], links)
            self.assertEqual(db.execute("SELECT COUNT(*) FROM instructions").fetchone()[0], instructions)
            cycles = dict(db.execute("SELECT chip, cycles FROM chips"))
            import pandas
            frame = pandas.read_sql("SELECT * FROM links", db)
        self.assertEqual(len(cycles), chips)
        self.assertEqual(len(frame), links)
        self.assertIn("util_ab", frame.columns)

    def test_export_csv_writes_a_file_per_table(self):
        out = self.dir / "export-csv"
        self.ok("export", self.traces["summary"], "-o", out, "--format", "csv")
        names = sorted(p.name for p in out.iterdir())
        self.assertIn("chips.csv", names)
        self.assertIn("run.csv", names)
        import pandas
        frame = pandas.read_csv(out / "chips.csv")
        with h5py.File(self.traces["summary"], "r") as f:
            self.assertEqual(len(frame), len(f["/summary/chips"]))
            self.assertEqual(list(frame["cycles"]), [int(c) for c in f["/summary/chips"]["cycles"]])

    def test_runs_from_a_python_without_h5py(self):
        # -S hides the site packages (h5py, numpy): the launcher finds an interpreter that has them.
        result = subprocess.run(["/usr/bin/python3", "-S", str(TOOL), "summary", str(self.traces["summary"]),
                                 "--what", "run", "--format", "json"], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("makespan_cycles", result.stdout)

    def test_says_which_python_lacks_what(self):
        env = dict(os.environ, TSP_TRACE_REEXEC="1")
        result = subprocess.run(["/usr/bin/python3", "-S", str(TOOL), "--help"], capture_output=True, text=True,
                                env=env)
        self.assertEqual(result.returncode, 1)
        self.assertIn("tsp-trace: error: no Python with h5py and numpy found:", result.stderr)
        self.assertIn("lacks h5py, numpy", result.stderr)

    def test_module_api_reads_a_trace(self):
        code = ("import sys, tsp_trace\n"
                "with tsp_trace.Trace(sys.argv[1]) as t:\n"
                "    print(len(tsp_trace.chips_table(t).records()))")
        path = subprocess.run(["/usr/bin/python3", str(TOOL), "--python-path"], capture_output=True,
                              text=True, check=True).stdout.strip()
        result = subprocess.run(["/usr/bin/python3", "-c", code, str(self.traces["summary"])], capture_output=True,
                                text=True, env=dict(os.environ, PYTHONPATH=path))
        self.assertEqual(result.returncode, 0, result.stderr)
        with h5py.File(self.traces["summary"], "r") as f:
            self.assertEqual(int(result.stdout), len(f["/summary/chips"]))

    def test_perfetto_slices_never_overlap_on_a_track(self):
        out = self.dir / "perfetto-tracks.json"
        self.ok("perfetto", self.traces["instructions"], "-o", out)
        events = json.loads(out.read_text())["traceEvents"]
        tracks = {}
        for e in events:
            if e["ph"] == "X":
                tracks.setdefault((e["pid"], e["tid"]), []).append((e["args"].get("start_cycle", 0),
                                                                   e["args"].get("end_cycle", 0), e["name"]))
        for key, spans in tracks.items():
            spans.sort()
            for (_, end, _), (start, _, name) in zip(spans, spans[1:]):
                self.assertLessEqual(end, start, f"{name} overlaps the slice before it on track {key}")
        named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
        self.assertTrue(set(tracks) <= named, "every track with slices is named")
        # MEM reads and writes of one slice sit on their own tracks.
        labels = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
        self.assertTrue(any(label.endswith(" read") for label in labels))

    def test_perfetto_leaves_out_idle_chips(self):
        out = self.dir / "perfetto-idle.json"
        self.ok("perfetto", self.traces["instructions"], "-o", out)
        events = json.loads(out.read_text())["traceEvents"]
        with h5py.File(self.traces["instructions"], "r") as f:
            chips = f["/summary/chips"][()]
        busy = {int(c["chip"]) for c in chips
                if sum(int(c[f"busy_{k}"]) for k in ("mem", "vxm", "mxm", "sxm", "c2c")) > 0}
        shown = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(shown, busy)
        self.assertTrue({e["pid"] for e in events if e["ph"] in "XC"} <= shown)

    def test_perfetto_without_events(self):
        for level in ("summary", "links"):
            out = self.dir / f"perfetto-{level}.json"
            result = self.ok("perfetto", self.traces[level], "-o", out)
            self.assertIn("writing utilisation counters", result.stderr)
            events = json.loads(out.read_text())["traceEvents"]
            counters = [e for e in events if e["ph"] == "C"]
            self.assertTrue(counters)
            self.assertTrue(all(0.0 <= e["args"]["busy"] <= 1.0 for e in counters))
            c2c = [e for e in events if e.get("cat") == "c2c" and e["ph"] == "X"]
            self.assertEqual(len(c2c) > 0, level == "links")

    def test_plans(self):
        out = self.dir / "plans.png"
        self.ok("plans", self.traces["instructions"], "-o", out)
        self.assertPng(out)
        missing = run_tool("plans", self.traces["summary"], "-o", out)
        self.assertEqual(missing.returncode, 1)
        self.assertIn(f"no /search/plans in {self.traces['summary']}", missing.stderr)

    def test_rejects_hdf5_file_that_is_not_a_trace(self):
        path = self.dir / "other.h5"
        with h5py.File(path, "w") as f:
            f["data"] = np.arange(3)
        for args in (("summary", path), ("timeline", path, "-o", self.dir / "x.png"),
                     ("perfetto", path, "-o", self.dir / "x.json"), ("compare", path, "--csv")):
            result = run_tool(*args)
            self.assertEqual(result.returncode, 1)
            self.assertEqual(result.stderr.strip(),
                             f"tsp-trace: error: {path} is not a tsp-sim trace (no /meta/format_version)")

    def test_rejects_meta_without_version(self):
        path = self.dir / "noversion.h5"
        with h5py.File(path, "w") as f:
            f.create_group("meta").attrs["tool_version"] = "x"
        result = run_tool("summary", path)
        self.assertEqual(result.returncode, 1)
        self.assertIn("is not a tsp-sim trace (no /meta/format_version)", result.stderr)

    def test_rejects_text_file(self):
        path = self.dir / "notes.txt"
        path.write_text("not a trace\n")
        result = run_tool("summary", path)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.strip(), f"tsp-trace: error: {path} is not an HDF5 file")

    def test_rejects_other_format_version(self):
        path = self.dir / "future.h5"
        write_trace(path, "summary", chips=2)
        with h5py.File(path, "a") as f:
            f["meta"].attrs["format_version"] = 2
        result = run_tool("summary", path)
        self.assertEqual(result.returncode, 1)
        self.assertIn("format_version 2", result.stderr)

    def test_unwritable_output(self):
        result = run_tool("links", self.wide, "-o", self.dir / "missing-dir" / "x.png")
        self.assertEqual(result.returncode, 1)
        self.assertIn("cannot write", result.stderr)


if __name__ == "__main__":
    unittest.main()
