#!/usr/bin/env python3
"""python/manyadd/format.py (the task format, position IDs and samplers) against the C++ definitions.

tests/data/format_golden.json is what `format_ids --cases tests/data/format_cases.json` writes (the C++
of construct/src/format.cpp and learn/src/tasks/data.cpp, eval.cpp's cell seed): sequences, shapes, the IDs
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


def python_task_case(c):
    """The Python answer to one task case ({"task": ...}), in the golden file's terms."""
    task = c["task"]
    fmt.task_levels(task)
    mode = c.get("pos_mode", {1: "digits", 2: "coupled", 3: "coupled3"}[fmt.task_levels(task)])
    s = (c.get("s1", 1), c.get("s2", 1), c.get("s3", 1))
    ops = fmt.task_parse(task, c["problem"])
    w = fmt.task_write(task, ops)
    pos = fmt.task_position_ids(w, mode, s)
    answer, consistent = fmt.task_read(task, w.tokens)
    return {"pos_mode": mode, "s": list(s), "operands": ops, "T": len(w.tokens), "eq_index": w.eq,
            "answer_span": list(w.answer_span), "tokens": fmt.decode(w.tokens), "rel": w.rel, "span": w.span,
            "pos": pos, "targets": [-1] * w.eq + w.tokens[w.eq + 1:] + [fmt.EOS], "answer": answer,
            "consistent": consistent, "reference": fmt.task_reference(task, ops)}


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
        kinds = {"sequence": 0, "error": 0, "width": 0, "sample": 0, "task": 0, "task_error": 0, "task_sample": 0}
        for c, g in zip(cases, golden):
            with self.subTest(case=c):
                if "sample" in c and "task" in c:
                    kinds["task_sample"] += 1
                    seed = fmt.cell_seed(c["seed"], c["n"], c["m"]) if c.get("cell") else c["seed"]
                    rng = fmt.Rng(seed)
                    if c["sample"] == "cell":
                        got = [fmt.task_sample_cell(c["task"], rng, c["n"], c["m"]) for _ in range(c["count"])]
                    else:
                        got = fmt.task_sample_train(c["task"], rng, c["n"], c["m"], c["count"])
                    self.assertEqual([fmt.task_to_string(c["task"], p) for p in got], g["problems"])
                elif "sample" in c:
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
                elif "task" in c and "error" in g:
                    kinds["task_error"] += 1
                    with self.assertRaises(InputError):
                        python_task_case(c)
                elif "task" in c:
                    kinds["task"] += 1
                    mine = python_task_case(c)
                    for k, v in mine.items():
                        self.assertEqual(v, g[k], k)
                    self.assertEqual(g["answer"], g["reference"])
                    self.assertTrue(g["consistent"])
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
        self.assertGreaterEqual(kinds["task"], 30)
        self.assertGreaterEqual(kinds["task_error"], 10)
        self.assertGreaterEqual(kinds["task_sample"], 14)
        modes = {g.get("pos_mode", "coupled") for c, g in zip(cases, golden) if "tokens" in g}
        self.assertEqual(modes, set(fmt.ALL_POS_MODES))
        self.assertEqual({g["task"] for g in golden if "task" in g and "tokens" in g}, set(fmt.TASKS))

    def test_worked_example(self):
        # docs/construction.md: m = 3, n = 2, l = 3, N = 28, the paper's offsets s1 = 4, s2 = 2
        shape = fmt.Shape.make(2, 3, "theorem")
        self.assertEqual(fmt.decode(fmt.build_sequence("57+48+96", shape)), "$057+048+096=000>750>501>102")
        p1, p2 = fmt.position_ids(shape, 4, 2)
        self.assertEqual(p1[:5], [0, 7, 6, 5, 4])  # BOS, then significance 3, 2, 1 at s1 + t, '+' at s1
        self.assertEqual(p2[12:17], [2, 2, 2, 2, 3])  # '=' and B_0 at s2, the '>' before B_1 at s2 + 1

    def test_papers_figures(self):
        # Figure 2 (parity): query 0101, scratchpad 0110, IDs 2345 1 2345 (BOS 0 first)
        w = fmt.task_write("parity", ["0101"])
        self.assertEqual(fmt.decode(w.tokens), "$0101=0110")
        self.assertEqual(fmt.task_position_ids(w, "digits")[0], [0, 2, 3, 4, 5, 1, 2, 3, 4, 5])
        # Figure 8b (multiplication), the three rows as the figure prints them (BOS dropped)
        w = fmt.task_write("multiplication", ["37", "925"])
        self.assertEqual(fmt.decode(w.tokens)[1:], "37*925=581+470+333=58100>52900>52243")
        rows = ["".join(str(i) for i in ids[1:]) for ids in fmt.task_position_ids(w, "coupled3")]
        self.assertEqual(rows, ["320000123412341234000000000000000000", "000321111122223333111111222222333333",
                                "000000123423453456123456123456123456"])
        # McLeish et al. Sec. 2: 98282 + 3859172 = 2787472 (28289 + 2719583, written reversed)
        self.assertEqual(fmt.decode(fmt.task_write("addition-2op", ["28289", "2719583"]).tokens),
                         "$98282+3859172=2787472")

    def test_random_instances_agree_with_cpp(self):
        # Beyond the committed cases: 280 random instances (every task, cells up to 12 x 8, every mode the
        # task admits, random offsets) written by both twins must agree field by field, and each must read
        # back to its reference answer (the property test of test_tasks, on the Python side).
        exe = os.environ.get("FORMAT_IDS")
        if not exe:
            self.skipTest("FORMAT_IDS is not set (ctest sets it to the built tool)")
        rng = fmt.Rng(20250101)
        cases = []
        for task in fmt.TASKS:
            coupling = {1: "digits", 2: "coupled", 3: "coupled3"}[fmt.task_levels(task)]
            modes = sorted({coupling, "digits", "absolute", "none"})
            one_axis = task.startswith("parity")
            for _ in range(40):
                n = rng.uniform(1, 12)
                m = 1 if one_axis else rng.uniform(2 if task.startswith("addition") and task != "addition-2op" else 1, 8)
                ops = fmt.task_sample_cell(task, rng, n, m)
                answer, consistent = fmt.task_read(task, fmt.task_write(task, ops).tokens)
                self.assertTrue(consistent, (task, ops))
                self.assertEqual(answer, fmt.task_reference(task, ops), (task, ops))
                cases.append({"task": task, "problem": fmt.task_to_string(task, ops),
                              "pos_mode": modes[rng.uniform(0, len(modes) - 1)],
                              "s1": rng.uniform(1, 30), "s2": rng.uniform(1, 30), "s3": rng.uniform(1, 30)})
        with tempfile.TemporaryDirectory() as d:
            cf, out = os.path.join(d, "cases.json"), os.path.join(d, "golden.json")
            with open(cf, "w") as f:
                json.dump(cases, f)
            r = subprocess.run([exe, "--cases", cf, "--json", out], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                golden = json.load(f)
        self.assertEqual(len(golden), len(cases))
        for c, g in zip(cases, golden):
            self.assertNotIn("error", g, c)
            mine = python_task_case(c)
            for k, v in mine.items():
                self.assertEqual(v, g[k], "%s: %s" % (c, k))

    def test_bad_input(self):
        for bad in ("", "1++2", "12a", "+"):
            with self.assertRaises(InputError):
                fmt.parse_problem(bad)
        with self.assertRaises(InputError):
            fmt.decode([15])  # '*' (14) is the last token
        with self.assertRaises(InputError):
            fmt.encode("57-48")
        with self.assertRaises(InputError):
            fmt.parse_sequence("$057+048=000>750>50")
        with self.assertRaises(InputError):
            fmt.make_example("57+48+96", "coupled", (3, 40))  # l = 3 needs max_pos1 >= 4


if __name__ == "__main__":
    unittest.main()
