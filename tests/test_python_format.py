#!/usr/bin/env python3
"""python/manyadd/format.py (the task format, position IDs and samplers) against the C++ definitions.

tests/data/format_golden.json is what `format_ids --cases tests/data/format_cases.json` writes (the C++
of construct/src/format.cpp and learn/src/data.cpp, eval.cpp's cell seed): sequences, shapes, the IDs
of every position mode at various offsets, targets, widths of both padding rules up to n, m = 1e8, the
TA/SA samplers' draws, and inputs the C++ refuses. Two checks, both exact (integers and strings):
  - the C++ still writes the committed file byte for byte (FORMAT_IDS names the tool; ctest sets it),
    so the file cannot drift from the C++;
  - the Python twin reproduces every case, and refuses (InputError) every input the C++ refuses.
Standard library only: never skipped.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("MANYADD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SOURCE, "python"))
from manyadd import format as fmt  # noqa: E402
from manyadd.files import InputError  # noqa: E402

CASES = os.path.join(SOURCE, "tests", "data", "format_cases.json")
GOLDEN = os.path.join(SOURCE, "tests", "data", "format_golden.json")


def load(path):
    with open(path, "rb") as f:
        return f.read()


def python_sequence_case(c):
    """The Python answer to one sequence case, in the golden file's terms."""
    ops = fmt.parse_problem(c["problem"])
    n = c.get("n", max(len(o) for o in ops))
    shape = fmt.Shape.make(n, len(ops), c.get("padding", "minimal"))
    mode = c.get("pos_mode", "coupled")
    fmt.pos_levels(mode)
    toks = fmt.build_sequence(ops, shape)
    pos = fmt.position_ids_for(shape, mode, c.get("s1", 1), c.get("s2", 1))
    eq = shape.eq_index
    return {"n": shape.n, "operands": ops, "m": shape.m, "l": shape.l, "N": shape.N, "eq_index": eq,
            "tokens": fmt.decode(toks), "pos": pos, "targets": [-1] * eq + toks[eq + 1:] + [fmt.EOS]}


class Golden(unittest.TestCase):
    def test_cpp_writes_the_committed_file(self):
        exe = os.environ.get("FORMAT_IDS")
        if not exe:
            self.skipTest("FORMAT_IDS is not set (ctest sets it to the built tool)")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "golden.json")
            r = subprocess.run([exe, "--cases", CASES, "--json", out], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(load(out), load(GOLDEN),
                             "format_ids no longer writes tests/data/format_golden.json: the C++ format changed "
                             "(regenerate the file with the command in this test, and update python/manyadd/format.py)")

    def test_python_reproduces_every_case(self):
        golden = json.loads(load(GOLDEN))
        cases = json.loads(load(CASES))
        self.assertEqual(len(golden), len(cases))
        kinds = {"sequence": 0, "error": 0, "width": 0, "sample": 0}
        for c, g in zip(cases, golden):
            with self.subTest(case=c):
                if "sample" in c:
                    kinds["sample"] += 1
                    seed = fmt.cell_seed(c["seed"], c["n"], c["m"]) if c.get("cell") else c["seed"]
                    if c.get("cell"):
                        self.assertEqual(seed, g["cell_seed"])
                    rng = fmt.Rng(seed)
                    if c["sample"] == "TA":
                        got = [fmt.sample_TA(rng, c["n"], c["m"]) for _ in range(c["count"])]
                    else:
                        got = fmt.sample_SA(rng, c["n"], c["m"], c["count"])
                    self.assertEqual(["+".join(p) for p in got], g["problems"])
                elif "width" in c:
                    kinds["width"] += 1
                    self.assertEqual(fmt.width(c["width"], c["n"], c["m"]), g["l"])
                elif "error" in g:
                    kinds["error"] += 1
                    with self.assertRaises(InputError):
                        python_sequence_case(c)
                else:
                    kinds["sequence"] += 1
                    mine = python_sequence_case(c)
                    for k, v in mine.items():
                        self.assertEqual(v, g[k], k)
                    # the parser inverts the builder
                    m, l, ops, sums = fmt.parse_sequence(g["tokens"])
                    self.assertEqual((m, l, ops), (g["m"], g["l"], g["operands"]))
                    self.assertEqual(int(sums[-1]), sum(int(o) for o in ops))
        # the file covers what it is meant to (a shrunken case list would pass vacuously)
        self.assertGreaterEqual(kinds["sequence"], 30)
        self.assertGreaterEqual(kinds["error"], 6)
        self.assertGreaterEqual(kinds["width"], 100)
        self.assertGreaterEqual(kinds["sample"], 5)
        modes = {c.get("pos_mode", "coupled") for c, g in zip(cases, golden) if "tokens" in g}
        self.assertEqual(modes, set(fmt.POS_MODES))

    def test_worked_example(self):
        # docs/construction.md: m = 3, n = 2, l = 3, N = 28, the paper's offsets s1 = 4, s2 = 2
        shape = fmt.Shape.make(2, 3, "theorem")
        self.assertEqual(fmt.decode(fmt.build_sequence("57+48+96", shape)), "$057+048+096=000>750>501>102")
        p1, p2 = fmt.position_ids(shape, 4, 2)
        self.assertEqual(p1[:5], [0, 7, 6, 5, 4])  # BOS, then significance 3, 2, 1 at s1 + t, '+' at s1
        self.assertEqual(p2[12:17], [2, 2, 2, 2, 3])  # '=' and B_0 at s2, the '>' before B_1 at s2 + 1

    def test_bad_input(self):
        for bad in ("", "1++2", "12a", "+"):
            with self.assertRaises(InputError):
                fmt.parse_problem(bad)
        with self.assertRaises(InputError):
            fmt.decode([14])
        with self.assertRaises(InputError):
            fmt.encode("57*48")
        with self.assertRaises(InputError):
            fmt.parse_sequence("$057+048=000>750>50")
        with self.assertRaises(InputError):
            fmt.make_example("57+48+96", "coupled", (3, 40))  # l = 3 needs max_pos1 >= 4


if __name__ == "__main__":
    unittest.main()
