#!/usr/bin/env python3
"""python/manyadd/figures.py: every figure command runs on committed data and writes a PNG; bad input
exits 2 with a message. Needs matplotlib (exit 77, reported by ctest as skipped, where it is absent;
Debian: python3-matplotlib, which `x` installs). The data: accuracy grids of `evaluate` and
`compare_attention --grid` under bench/results/, train's log.csv and eval.csv under models/ and
bench/results/, and a small `compare_attention` output (TA(3, 3), 100 samples, the committed 1-layer
4-head model) under tests/data/figures/.

What is checked is that each command draws what it is given: the PNG is a real image of the expected
size for its layout, its training region is found where the data says one exists, and the figure
functions read every value (a grid with a cell changed draws a different image).
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("test_python_figures: matplotlib is not installed (Debian: python3-matplotlib): skipped")
    sys.exit(77)

SOURCE = os.environ.get("MANYADD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SOURCE, "python"))
from manyadd import figures  # noqa: E402

R = os.path.join(SOURCE, "bench", "results")
CMP = os.path.join(SOURCE, "tests", "data", "figures", "compare_TA3x3")
MODEL = os.path.join(SOURCE, "models", "cpu-sa1010-1l4h-d64")


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise AssertionError("%s is not a PNG" % path)
    return struct.unpack(">II", head[16:24])


class Figures(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="manyadd_fig_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_cmd(self, *args, rc=0):
        """In-process (the module's main(), as `python3 -m manyadd.figures` runs it), output captured."""
        import contextlib
        import io
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            got = figures.main([str(a) for a in args])
        self.assertEqual(got, rc, err.getvalue())
        return err.getvalue()

    def out(self, name):
        return os.path.join(self.dir, name)

    def test_every_command_writes_a_png(self):
        cases = [
            (["grid", os.path.join(R, "learn-cpu-sa55", "grid_100.csv")], (500, 500)),  # config.json beside it
            (["grid", os.path.join(R, "compare-attention-cpu", "in_distribution_1000.csv"), "--model", MODEL], (500, 400)),
            (["alignment", os.path.join(R, "compare-attention-cpu", "grid_alignment.csv"), "--train", 10, 10],
             (1800, 1200)),
            (["attention", os.path.join(CMP, "learned")], (1800, 500)),
            (["attention", os.path.join(CMP, "constructed", "attention.safetensors"), "--rows", "response",
              "--gamma", 1, "--heads", "layers.0.head.0", "layers.0.head.3"], (900, 450)),
            (["compare", CMP], (1000, 2000)),
            (["loss", MODEL], (1500, 450)),  # log.csv and eval.csv
            (["loss", os.path.join(R, "learn-cpu-sa55", "short_runs_4000", "coupled_log.csv"),
              os.path.join(R, "learn-cpu-sa55", "short_runs_4000", "none_log.csv"), "--label", "coupled",
              "--label", "none"], (1500, 450)),
        ]
        for i, (args, (w_min, h_min)) in enumerate(cases):
            with self.subTest(args=args[:2]):
                out = self.out("f%d.png" % i)
                err = self.run_cmd(*args, "-o", out, "--dpi", 100)
                self.assertNotIn("no training region", err)
                w, h = png_size(out)
                self.assertGreaterEqual(w, w_min * 100 // 150, (w, h))
                self.assertGreaterEqual(h, h_min * 100 // 150, (w, h))
        # the entry point itself
        r = subprocess.run([sys.executable, "-m", "manyadd.figures", "grid",
                            os.path.join(R, "learn-cpu-sa55", "grid_100.csv"), "-o", self.out("cli.png")],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "python")))
        self.assertEqual(r.returncode, 0, r.stderr)
        png_size(self.out("cli.png"))

    def test_every_value_is_drawn(self):
        src = os.path.join(R, "learn-cpu-sa55", "grid_100.csv")
        with open(src) as f:
            lines = f.read().splitlines()
        changed = [l if not l.startswith("3,4,") else "3,4,100,0,0.0000" for l in lines]  # a 100% cell set to 0
        self.assertNotEqual(changed, lines)
        a, b = self.out("a.csv"), self.out("b.csv")
        for path, text in ((a, lines), (b, changed)):
            with open(path, "w") as f:
                f.write("\n".join(text) + "\n")
            self.run_cmd("grid", path, "--train", 5, 5, "-o", path + ".png")
        with open(a + ".png", "rb") as fa, open(b + ".png", "rb") as fb:
            self.assertNotEqual(fa.read(), fb.read())
        values, ns, ms = figures.read_grid_csv(b)
        self.assertEqual(values[ns.index(3)][ms.index(4)], 0.0)
        self.assertTrue(values[ns.index(20)][ms.index(20)] != values[ns.index(20)][ms.index(20)])  # NA -> NaN

    def test_bad_input_exits_2(self):
        bad = self.out("bad.csv")
        with open(bad, "w") as f:
            f.write("n,m,samples,exact,accuracy\n1,2,10,10,lots\n")
        self.assertIn("not a number", self.run_cmd("grid", bad, "-o", self.out("x.png"), rc=2))
        self.assertIn("cannot read", self.run_cmd("grid", self.out("missing.csv"), "-o", self.out("x.png"), rc=2))
        self.assertIn("cannot read", self.run_cmd("loss", self.dir, "-o", self.out("x.png"), rc=2))
        self.assertIn("directory", self.run_cmd("compare", CMP, "-o", self.dir + "/", rc=2))
        self.assertIn("no head", self.run_cmd("attention", os.path.join(CMP, "learned"), "--heads", "layers.9.head.0",
                                              "-o", self.out("x.png"), rc=2))
        self.assertFalse(os.path.exists(self.out("x.png")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
