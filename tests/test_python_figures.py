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

    def test_halting_of_an_evaluate_grid_report(self):
        rep = {"verdict": "done", "instances": [
            {"instance": "1-4x1-10", "char_acc": 0.99, "seq_acc": 0.9, "steps_hist": [0, 2, 5, 10, 3]},
            {"instance": "5-6x1-10", "char_acc": 0.8, "seq_acc": 0.3, "steps_hist": [0, 0, 0, 4, 8, 8]},
            {"instance": "2x100", "char_acc": 0.5, "seq_acc": 0.0, "steps_hist": [0, 0, 1, 1, 1, 1, 16]}]}
        import json
        a, b = self.out("ha.json"), self.out("hb.json")
        with open(a, "w") as f:
            json.dump(rep, f)
        rep["instances"][1]["steps_hist"] = [0, 0, 0, 0, 0, 0, 0, 0, 20]  # another distribution of steps
        with open(b, "w") as f:
            json.dump(rep, f)
        self.run_cmd("halting", a, "-o", a + ".png", "--dpi", 100)
        self.run_cmd("halting", b, "-o", b + ".png", "--dpi", 100)
        w, h = png_size(a + ".png")
        self.assertGreaterEqual(w, 500)
        self.assertGreaterEqual(h, 400)
        with open(a + ".png", "rb") as fa, open(b + ".png", "rb") as fb:
            self.assertNotEqual(fa.read(), fb.read())
        rows = figures.read_grid_eval(a)
        self.assertEqual([r[0] for r in rows], ["1-4x1-10", "5-6x1-10", "2x100"])
        self.assertEqual(figures._hist_quantile([0, 2, 5, 10, 3], 0.5), 3)  # 10th of 20 samples: 3 steps
        bad = self.out("hbad.json")
        with open(bad, "w") as f:
            json.dump({"instances": [{"instance": "2x3", "char_acc": 0.5, "seq_acc": 0.1, "steps_hist": [0, 0]}]}, f)
        self.assertIn("positive sum", self.run_cmd("halting", bad, "-o", self.out("x.png"), rc=2))
        self.assertIn("not an evaluate_grid", self.run_cmd("halting", os.path.join(MODEL, "config.json"), "-o",
                                                           self.out("x.png"), rc=2))

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


def write_lengths(path, values, extra=None):
    """A one-axis (parity) grid CSV as evaluate writes it: n,samples,exact,accuracy,answer_exact,answer_accuracy;
    values {n: (whole response, answer)}."""
    rows = ["n,samples,exact,accuracy,answer_exact,answer_accuracy"]
    for n, (acc, ans) in sorted(values.items()):
        rows.append("%d,1000,%d,%.4f,%d,%.4f" % (n, round(1000 * acc), acc, round(1000 * ans), ans))
    with open(path, "w") as f:
        f.write("\n".join(rows + (extra or [])) + "\n")


class Tasks(unittest.TestCase):
    """The other tasks' figures: parity's accuracy against the query length over seeds (Figure 3), the
    task's axes on a grid, and the attention of a parity model on the keys the method intends."""
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="manyadd_fig_tasks_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    run_cmd = Figures.run_cmd

    def out(self, name):
        return os.path.join(self.dir, name)

    def seeds(self, name, answers):
        """A run_config.py configuration directory: one run per seed, each with grid.csv and config.json
        (training lengths 1..20); answers[i] = seed i's answer accuracy at lengths 5, 10, 15."""
        root = self.out(name)
        for i, a in enumerate(answers):
            d = os.path.join(root, "s%d_d0" % i)
            os.makedirs(d)
            write_lengths(os.path.join(d, "grid.csv"), {5: (1.0, a[0]), 10: (0.5, a[1]), 15: (0.25 * i, a[2])})
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write('{"model": {}, "train": {"task": "parity", "train_n": 20, "train_m": 1}}\n')
        return root

    def test_length_curves_over_seeds(self):
        root = self.seeds("cfg", [(1.0, 0.9, 0.5), (1.0, 0.7, 0.6), (1.0, 0.8, 0.2), (0.9, 0.6, 0.4)])
        files = figures.grid_files(root)
        self.assertEqual([os.path.basename(os.path.dirname(f)) for f in files], ["s0_d0", "s1_d0", "s2_d0", "s3_d0"])
        # median of 4 = mean of the middle two; the range is the smallest and largest seed
        got = figures.length_curve(files, "answer_accuracy", "range")
        self.assertEqual([r[:2] for r in got], [(5, 4), (10, 4), (15, 4)])
        for (n, k, med, lo, hi), want in zip(got, [(1.0, 0.9, 1.0), (0.75, 0.6, 0.9), (0.45, 0.2, 0.6)]):
            self.assertAlmostEqual(med, want[0])
            self.assertAlmostEqual(lo, want[1])
            self.assertAlmostEqual(hi, want[2])
        # the whole response: 0, 0.25, 0.5, 0.75 at length 15
        self.assertAlmostEqual(figures.length_curve(files, "accuracy")[2][2], 0.375)
        # ci95: mean 0.75 and t(3) = 3.182 times the standard error sqrt(var / 4), var = 0.05 / 3
        n, k, mean, lo, hi = figures.length_curve(files, "answer_accuracy", "ci95")[1]
        half = 3.182 * ((0.05 / 3) / 4) ** 0.5
        self.assertAlmostEqual(mean, 0.75)
        self.assertAlmostEqual(lo, 0.75 - half)
        self.assertAlmostEqual(hi, 0.75 + half)
        self.assertEqual(figures.length_curve(files, "answer_accuracy", "ci95")[0][4], 1.0)  # clipped to 1
        # the command: two curves (a configuration directory, and one CSV), the table, both bands
        one = self.out("one.csv")
        write_lengths(one, {5: (1.0, 1.0), 10: (0.0, 0.5), 15: (0.0, 0.5)})
        for band in ("range", "ci95"):
            png, table = self.out("f_%s.png" % band), self.out("t_%s.csv" % band)
            self.run_cmd("lengths", "--curve", "coupled", root, "--curve", "NoPE", one, "--band", band, "--table", table,
                         "-o", png, "--dpi", 100)
            w, h = png_size(png)
            self.assertGreaterEqual(w, 1000)
            with open(table) as f:
                lines = f.read().splitlines()
            self.assertEqual(len(lines), 1 + 3 + 3)
            if band == "range":
                self.assertEqual(lines[0], "curve,n,runs,answer_accuracy_median,answer_accuracy_lo,answer_accuracy_hi,"
                                           "accuracy_median,accuracy_lo,accuracy_hi")
                self.assertEqual(lines[2], '"coupled",10,4,0.7500,0.6000,0.9000,0.5000,0.5000,0.5000')
                self.assertEqual(lines[6], '"NoPE",15,1,0.5000,0.5000,0.5000,0.0000,0.0000,0.0000')
        # the training lengths come from the runs' config.json; the figure reads every value
        fig = figures.plot_lengths([("c", [root])], train_n=20)
        self.assertEqual(fig.axes[0].get_xlabel(), "Query Length (bits)")
        a, b = self.out("a.png"), self.out("b.png")
        self.run_cmd("lengths", "--curve", "x", one, "-o", a, "--train", 20)
        write_lengths(one, {5: (1.0, 1.0), 10: (0.0, 0.5), 15: (0.0, 0.9)})
        self.run_cmd("lengths", "--curve", "x", one, "-o", b, "--train", 20)
        with open(a, "rb") as fa, open(b, "rb") as fb:
            self.assertNotEqual(fa.read(), fb.read())

    def test_grid_axes_follow_the_task(self):
        # parity: evaluate's one-axis CSV is drawn against the query length
        run = os.path.join(self.seeds("p", [(1.0, 1.0, 1.0)]), "s0_d0")
        self.run_cmd("grid", os.path.join(run, "grid.csv"), "-o", self.out("p.png"))
        fig = figures.plot_grid(os.path.join(run, "grid.csv"))
        self.assertEqual(fig.axes[0].get_xlabel(), "Query Length (bits)")
        # multiplication: TM(i, j) axes and a training box from (1, 1)
        tm = self.out("tm.csv")
        with open(tm, "w") as f:
            f.write("n,m,samples,exact,accuracy,answer_exact,answer_accuracy\n")
            for n in range(1, 4):
                for m in range(1, 4):
                    f.write("%d,%d,10,10,1.0,10,1.0\n" % (n, m))
        fig = figures.plot_grid(tm, train=(2, 2), task="multiplication")
        ax = fig.axes[0]
        self.assertIn("Second Operand B", ax.get_xlabel())
        self.assertIn("First Operand A", ax.get_ylabel())
        self.assertIn("TM(i, j)", ax.get_title())
        box = [p for p in ax.patches]
        self.assertEqual(len(box), 1)
        self.assertEqual((box[0].get_x(), box[0].get_width()), (0.5, 2.0))  # columns 1..2, not 2..2
        with open(self.out("tm.json"), "w") as f:  # the task from evaluate's report beside the CSV
            f.write('{"task": "multiplication", "train_n": 2, "train_m": 2}\n')
        self.assertIn("TM(i, j)", figures.plot_grid(tm).axes[0].get_title())
        fig = figures.plot_grid(os.path.join(R, "learn-cpu-sa55", "grid_100.csv"))  # addition, unchanged
        self.assertEqual(fig.axes[0].get_xlabel(), "Number of Operands")
        self.assertIn("TA(n, m)", fig.axes[0].get_title())

    def test_parity_attention_on_the_intended_keys(self):
        import numpy as np
        from manyadd import safetensors
        n, T = 3, 8  # $ x1 x2 x3 = y1 y2 y3
        # head 0: every row r = n + k (predicting y_k) puts 0.75 on x_k and 0.25 on itself; other rows uniform.
        # head 1: uniform over the causal prefix (chance).
        a0 = np.zeros((T, T), dtype=np.float32)
        a1 = np.zeros((T, T), dtype=np.float32)
        for r in range(T):
            a1[r, :r + 1] = 1.0 / (r + 1)
            if n + 1 <= r <= 2 * n:
                a0[r, r - n] = 0.75
                a0[r, r] = 0.25
            else:
                a0[r, :r + 1] = 1.0 / (r + 1)
        meta = {"task": "parity", "n": "3", "m": "1", "samples": "7", "example_tokens": "$101=110", "model": "toy",
                "s1": "1", "s2": "1", "s3": "1"}
        path = self.out("attention.safetensors")
        safetensors.write(path, {"layers.0.head.0": a0, "layers.0.head.1": a1}, meta)
        rows = figures.parity_intended_attention(*figures.read_attention(path))
        self.assertEqual([r["head"] for r in rows], ["layers.0.head.0", "layers.0.head.1", "layers.0.best_head"])
        chance = (1 / 5 + 1 / 6 + 1 / 7) / 3
        self.assertAlmostEqual(rows[0]["x_k"], 0.75, places=6)
        self.assertAlmostEqual(rows[0]["self"], 0.25, places=6)
        self.assertEqual((rows[0]["top_is_x_k"], rows[0]["top_is_self"]), (1.0, 0.0))
        self.assertAlmostEqual(rows[1]["x_k"], chance, places=6)
        self.assertAlmostEqual(rows[1]["self"], chance, places=6)
        self.assertAlmostEqual(rows[1]["chance_one_key"], chance, places=6)
        # per row the head with the most weight on x_k (0.75 > 1 / (r + 1)) and on the row itself (0.25 > 1/5)
        self.assertAlmostEqual(rows[2]["x_k"], 0.75, places=6)
        self.assertAlmostEqual(rows[2]["self"], 0.25, places=6)
        self.assertEqual(rows[2]["top_is_x_k"], 1.0)
        table = self.out("intended.csv")
        self.run_cmd("attention", path, "--table", table, "-o", self.out("att.png"))
        with open(table) as f:
            self.assertEqual(f.read().splitlines()[1],
                             "layers.0.head.0,3,7,0.7500,0.2500,0.0000,1.0000,1.0000,0.0000,%.4f" % chance)
        # another task's maps have no intended keys here; a wrong shape is refused
        meta["task"] = "addition"
        safetensors.write(path, {"layers.0.head.0": a0}, meta)
        self.assertIn("task parity", self.run_cmd("attention", path, "--table", table, "-o", self.out("x.png"), rc=2))
        self.assertFalse(os.path.exists(self.out("x.png")))
        meta["task"], meta["n"] = "parity", "4"
        safetensors.write(path, {"layers.0.head.0": a0}, meta)
        self.assertIn("a parity cell of 4 bits", self.run_cmd("attention", path, "-o", self.out("x.png"), rc=2))

    def test_bad_input_exits_2(self):
        a, b = self.out("a.csv"), self.out("b.csv")
        write_lengths(a, {5: (1.0, 1.0), 10: (1.0, 1.0)})
        write_lengths(b, {5: (1.0, 1.0), 15: (1.0, 1.0)})
        self.assertIn("other query lengths", self.run_cmd("lengths", "--curve", "x", a, b, "-o", self.out("x.png"), rc=2))
        self.assertIn("a label and at least one path", self.run_cmd("lengths", "--curve", "x", "-o", self.out("x.png"),
                                                                    rc=2))
        self.assertIn("an m column", self.run_cmd("lengths", "--curve", "x", os.path.join(R, "learn-cpu-sa55",
                                                  "grid_100.csv"), "-o", self.out("x.png"), rc=2))
        self.assertIn("no grid.csv", self.run_cmd("lengths", "--curve", "x", self.dir, "-o", self.out("x.png"), rc=2))
        write_lengths(b, {5: (1.0, 1.0)}, ["5,1000,1000,1.0,1000,1.0"])
        self.assertIn("appears twice", self.run_cmd("lengths", "--curve", "x", b, "-o", self.out("x.png"), rc=2))
        self.assertIn("two-axis grid", self.run_cmd("grid", a, "--task", "multiplication", "-o", self.out("x.png"),
                                                    rc=2))
        self.assertIn("needs N M", self.run_cmd("grid", os.path.join(R, "learn-cpu-sa55", "grid_100.csv"), "--train",
                                                5, "-o", self.out("x.png"), rc=2))
        self.assertFalse(os.path.exists(self.out("x.png")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
