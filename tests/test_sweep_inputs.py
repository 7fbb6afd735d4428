#!/usr/bin/env python3
"""Bad input to manyadd.sweep and to the C++ tools' last CLI edges (needs hypothesis, Debian
python3-hypothesis, which `x` installs: exit 77, reported as skipped, without).

  - Reproducers: every case of tests/data/sweep/cases.json (files in an empty directory, a command line)
    exits 2 with one line on stderr naming the problem, within 20 s, under a 2 GiB address-space cap,
    and leaves the directory as it was (nothing created, nothing changed).
  - The edges the cases cannot state: --max-runs raises the bound on the runs (and the refusal names the
    count); evaluate and evaluate_grid read a problem with blanks around it alike.
  - Fuzzing: plan, local, collect and run-one (in this process, under an address-space cap: what the
    imports took plus 1 GiB) on a finished micro sweep (2 runs of train and evaluate) with one of its files
    changed: the description, its base file, plan.json, configs/NAME.json, runs/NAME/config.json,
    grids/NAME.csv or grids/NAME.json mutated by the C++ fuzz targets' families (tests/mutations.py), or
    replaced by a FIFO, a directory, a link to /dev/zero, a sparse 8 GiB file or a document nested 100,000
    deep; and plan on a mutated TOML description. Each command returns 0, 1 or 2 (no exception, no hang:
    60 s per example); on 2 the message is "sweep: ..." and nothing under the directory changed.

MANYADD_FUZZ_CASES sets the fuzzing's examples per command (default 100; the TOML plan half of it).
"""
import contextlib
import io
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError as e:
    print("test_sweep_inputs: %s (Debian: python3-hypothesis): skipped" % e)
    sys.exit(77)

SOURCE = os.environ.get("MANYADD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SOURCE, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from manyadd import sweep  # noqa: E402
try:
    import tomllib  # noqa: F401  (the TOML cases need Python 3.11; skipped before)
    HAVE_TOML = True
except ImportError:
    HAVE_TOML = False
from mutations import TOKENS, mutate  # noqa: E402

BUILD_LEARN = os.path.join(SOURCE, "build", "learn")
TOOLS = {t: os.environ.get(t.upper()) or os.path.join(BUILD_LEARN, t)
         for t in ("train", "evaluate", "train_grid", "evaluate_grid")}
BIN = os.path.dirname(os.path.abspath(TOOLS["train"]))
CASES = os.path.join(SOURCE, "tests", "data", "sweep", "cases.json")
FUZZ_CASES = int(os.environ.get("MANYADD_FUZZ_CASES") or 100)
CAP = 2 << 30  # the bound: every reproducer refused under 2 GiB
CASE_SECONDS = 20
ENV = dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "python"))
ENV.pop("MANYADD_BIN", None)
LONG = "a" * 256
PATH4096 = "/".join(["d" * 199] * 20) + "/" + "e" * 96  # 4096 bytes, each name within NAME_MAX
_TMP = tempfile.mkdtemp(prefix="manyadd_sweep_inputs_")

# A micro sweep (a run: ~0.1 s of training and a 3 x 4 grid of one sample per cell), its base in a file.
MICRO = {"model": {"n_layers": 1, "d_model": 16, "d_head": 4, "d_ff": 16, "max_pos1": 6, "max_pos2": 6},
         "train": {"train_n": 2, "train_m": 3, "train_size": 200, "batch": 8, "steps": 20, "eval_every": 0,
                   "eval_samples": 2, "threads": 1}}
DESCRIPTION = {"name": "fuzz", "base": "b.json", "axes": {"train.seed": [1, 2]}, "run_name": "s{train.seed}",
               "evaluate": {"samples": 1, "args": ["--n-max", "3", "--m-max", "4"]}}
DESCRIPTION_TOML = """name = "fuzz"
run_name = "s{train.seed}"
[base.model]
n_layers = 1
d_model = 16
d_head = 4
d_ff = 16
[base.train]
steps = 20
threads = 1
train_size = 200
batch = 8
[axes]
"train.seed" = [1, 2]
[evaluate]
samples = 1
args = ["--n-max", "3"]
"""


def _cap():
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def expand(text):
    return text.replace("{long}", LONG).replace("{path4096}", PATH4096).replace("{models}",
                                                                               os.path.join(SOURCE, "models"))


def make_file(path, spec):
    """A case's file (cases.json's "about")."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if spec.get("fifo"):
        os.mkfifo(path)
        return
    with open(path, "wb") as f:
        if "sparse" in spec:
            f.truncate(spec["sparse"])
        elif "nest" in spec:
            prefix, opening, closing, depth, suffix = spec["nest"]
            f.write((prefix + opening * depth + closing * depth + suffix).encode())
        elif "json" in spec:
            f.write(json.dumps(spec["json"]).encode())
        else:
            f.write(spec["text"].encode())


def snapshot(d):
    """Every path under d with its type, size and modification time (a sparse file is not read)."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            s = os.lstat(p)
            out[os.path.relpath(p, d)] = (stat.S_IFMT(s.st_mode), s.st_size if not stat.S_ISDIR(s.st_mode) else 0,
                                          s.st_mtime_ns)
    return out


class Reproducers(unittest.TestCase):
    """Each case of tests/data/sweep/cases.json: exit 2, one line, quickly, under 2 GiB, nothing left."""

    @classmethod
    def setUpClass(cls):
        with open(CASES, encoding="utf-8") as f:
            cls.cases = json.load(f)

    def run_case(self, k, case, cmd, extra=()):
        if not HAVE_TOML and any(n.endswith(".toml") for n in case.get("files", {})):
            return 0
        d = os.path.join(_TMP, "case%d" % k)
        os.makedirs(d)
        for name, spec in case.get("files", {}).items():
            make_file(os.path.join(d, name), spec)
        if "model" in case:
            src, changes = case["model"]
            shutil.copytree(os.path.join(SOURCE, "models", src), os.path.join(d, "model"))
            cpath = os.path.join(d, "model", "config.json")
            with open(cpath) as f:
                doc = json.load(f)
            doc["model"].update(changes)
            with open(cpath, "w") as f:
                json.dump(doc, f, indent=1)
        before = snapshot(d)
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd + [expand(a) for a in case["args"]] + list(extra), cwd=d, env=ENV, capture_output=True,
                               text=True, errors="replace", preexec_fn=_cap, timeout=CASE_SECONDS)
        except subprocess.TimeoutExpired:
            self.fail("%s: still running after %d s" % (case["why"], CASE_SECONDS))
        took = time.monotonic() - t0
        err = p.stderr.strip()
        self.assertEqual(p.returncode, 2, "%s: exit %d\n%s" % (case["why"], p.returncode, err[-2000:]))
        self.assertEqual(len(err.splitlines()), 1, "%s: not one line:\n%s" % (case["why"], err[-2000:]))
        self.assertIn(expand(case["error"]), err, case["why"])
        self.assertEqual(snapshot(d), before, "%s: the directory changed" % case["why"])
        shutil.rmtree(d)
        return took

    def test_sweep_cases(self):
        self.assertGreater(len(self.cases["sweep"]), 20)
        worst = 0
        for k, case in enumerate(self.cases["sweep"]):
            with self.subTest(case=case["why"]):
                worst = max(worst, self.run_case(k, case, [sys.executable, "-m", "manyadd.sweep"], ["--bin", BIN]))
        print("  sweep: %d cases, the slowest %.2f s" % (len(self.cases["sweep"]), worst))

    def test_tool_cases(self):
        self.assertGreater(len(self.cases["tools"]), 10)
        worst = 0
        for k, case in enumerate(self.cases["tools"]):
            with self.subTest(case=case["why"]):
                worst = max(worst, self.run_case(1000 + k, case, [TOOLS[case["tool"]]]))
        print("  tools: %d cases, the slowest %.2f s" % (len(self.cases["tools"]), worst))


class Edges(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=_TMP)

    def sweep(self, *args):
        return subprocess.run([sys.executable, "-m", "manyadd.sweep"] + list(args), cwd=self.dir, env=ENV,
                              capture_output=True, text=True, timeout=120)

    def test_max_runs(self):
        base = os.path.join(self.dir, "b.json")
        with open(base, "w") as f:
            json.dump(MICRO, f)
        desc = os.path.join(self.dir, "s.json")
        with open(desc, "w") as f:
            json.dump(dict(DESCRIPTION, axes={"train.seed": [1, 2], "train.data_seed": [3, 4]},
                           run_name="s{train.seed}-d{train.data_seed}"), f)
        p = self.sweep("plan", desc, "--out", "out", "--bin", BIN, "--max-runs", "3")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("the axes give 4 runs (2 x 2), more than the 3 this tool plans unless told: --max-runs 4",
                      p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out")))
        p = self.sweep("plan", desc, "--out", "out", "--bin", BIN, "--max-runs", "4")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.dir, "out", "plan.json")) as f:
            self.assertEqual(len(json.load(f)["runs"]), 4)
        self.assertEqual(os.listdir(os.path.join(self.dir, "out")), ["plan.json"])  # no temporary left
        # a later command on that OUT under the default bound reads the plan it is given
        self.assertEqual(self.sweep("collect", desc, "--out", "out", "--max-runs", "3").returncode, 2)

    def test_problem_blanks_read_alike(self):
        for tool, model in (("evaluate", "cpu-sa1010-1l4h-d64"), ("evaluate_grid", "cpu-grid-ut-base-s1")):
            outs = [subprocess.run([TOOLS[tool], "--model", os.path.join(SOURCE, "models", model), "--problem", p],
                                   capture_output=True, text=True, timeout=120) for p in ("12+34", " 12 + 34 ")]
            self.assertEqual([o.returncode for o in outs], [0, 0], [o.stderr for o in outs])
            self.assertEqual(outs[0].stdout, outs[1].stdout, tool)


# ---- fuzzing ---------------------------------------------------------------------------------------

# kind (0 flip, 1 overwrite, 2 insert, 3 erase, 4 truncate, 5 duplicate, 6 replace a number), pos, len, bytes
MUTATION = st.tuples(st.integers(0, 6), st.integers(0, 2 ** 32 - 1), st.integers(0, 63),
                     st.one_of(st.sampled_from(TOKENS + [b'"2"', b'"s1"', b"[1, 2]", b'"train.seed"', b'"x,y"']),
                               st.binary(max_size=8)))
SPECIALS = ("fifo", "directory", "devzero", "sparse", "nested")
CHANGE = st.one_of(st.lists(MUTATION, min_size=1, max_size=4), st.sampled_from(SPECIALS))
TARGETS = ("s.json", "b.json", "out/plan.json", "out/configs/s1.json", "out/runs/s1/config.json", "out/grids/s1.csv",
           "out/grids/s1.json")
FUZZ = settings(max_examples=FUZZ_CASES, deadline=None, database=None, print_blob=True,
                suppress_health_check=list(HealthCheck))


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang("a command ran for 60 s: blocked or unbounded")


def change_file(path, change):
    """path's file replaced by a special file, or its bytes mutated."""
    if isinstance(change, str):
        os.unlink(path)
        if change == "fifo":
            os.mkfifo(path)
        elif change == "directory":
            os.mkdir(path)
        elif change == "devzero":
            os.symlink("/dev/zero", path)
        elif change == "sparse":
            with open(path, "wb") as f:
                f.truncate(8 << 30)
        else:
            with open(path, "w") as f:
                f.write("[" * 100000 + "]" * 100000)
        return repr(change)
    with open(path, "rb") as f:
        text = mutate(f.read(), change)
    with open(path, "wb") as f:
        f.write(text)
    return repr(text[:600])


class Fuzz(unittest.TestCase):
    """The sweep's commands on a finished micro sweep with one file changed."""
    counts = {}

    @classmethod
    def setUpClass(cls):
        cls.pristine = os.path.join(_TMP, "pristine")
        os.makedirs(cls.pristine)
        with open(os.path.join(cls.pristine, "b.json"), "w") as f:
            json.dump(MICRO, f, indent=1)
        with open(os.path.join(cls.pristine, "s.json"), "w") as f:
            json.dump(DESCRIPTION, f, indent=1)
        with open(os.path.join(cls.pristine, "s.toml"), "w") as f:
            f.write(DESCRIPTION_TOML)
        p = subprocess.run([sys.executable, "-m", "manyadd.sweep", "local", "s.json", "--out", "out", "--bin", BIN],
                           cwd=cls.pristine, env=ENV, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        for t in TARGETS:
            assert os.path.isfile(os.path.join(cls.pristine, t)), t
        cls.n = 0

    @classmethod
    def tearDownClass(cls):
        print("  fuzz: exit codes per command %s" % json.dumps(cls.counts, sort_keys=True))

    def run_sweep(self, cmd, target, change, extra=(), desc="s.json"):
        Fuzz.n += 1
        d = os.path.join(_TMP, "fuzz%d" % Fuzz.n)
        shutil.copytree(self.pristine, d, symlinks=True)
        what = change_file(os.path.join(d, target), change)
        before = snapshot(d)
        out, err = io.StringIO(), io.StringIO()
        old = os.getcwd()
        os.chdir(d)
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(60)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = sweep.main([cmd, desc, "--out", "out", "--bin", BIN] + list(extra))
        except SystemExit as e:  # argparse
            rc = e.code
        except BaseException:
            self.fail("%s with %s %s: %s\n%s" % (cmd, target, what, traceback.format_exc(), err.getvalue()[-2000:]))
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.chdir(old)
        key = "%s %s" % (cmd, rc)
        Fuzz.counts[key] = Fuzz.counts.get(key, 0) + 1
        self.assertIn(rc, (0, 1, 2), "%s with %s %s: exit %r\n%s" % (cmd, target, what, rc, err.getvalue()[-2000:]))
        if rc == 2:
            self.assertTrue(err.getvalue().startswith("sweep: "), "%s with %s %s:\n%s" % (cmd, target, what,
                                                                                       err.getvalue()[-2000:]))
            self.assertEqual(snapshot(d), before, "%s with %s %s refused (%s) but changed the directory"
                             % (cmd, target, what, err.getvalue()[-600:]))
        shutil.rmtree(d)

    @FUZZ
    @given(st.sampled_from(TARGETS), CHANGE)
    def test_plan(self, target, change):
        self.run_sweep("plan", target, change)

    @FUZZ
    @given(st.sampled_from(TARGETS), CHANGE)
    def test_local(self, target, change):
        self.run_sweep("local", target, change)

    @FUZZ
    @given(st.sampled_from(TARGETS), CHANGE)
    def test_collect(self, target, change):
        self.run_sweep("collect", target, change)

    @FUZZ
    @given(st.sampled_from(TARGETS), CHANGE, st.sampled_from(["0", "1"]))
    def test_run_one(self, target, change, index):
        self.run_sweep("run-one", target, change, ["--index", index])

    @settings(max_examples=max(10, FUZZ_CASES // 2), deadline=None, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2 ** 32 - 1), st.integers(0, 63),
                              st.sampled_from(TOKENS + [b"1979-05-27", b"07:32:00", b"nan", b"inf", b"[[", b"{a=",
                                                        b"a.b.c", b'"""', b"'", b"\n[x]\n", b"="])),
                    min_size=1, max_size=3))
    def test_plan_toml(self, ms):
        if not HAVE_TOML:
            self.skipTest("no tomllib (Python < 3.11)")
        self.run_sweep("plan", "s.toml", ms, desc="s.toml")


def main():
    try:
        for t, exe in TOOLS.items():
            if not os.access(exe, os.X_OK):
                raise AssertionError("%s: no built %s (ctest sets %s)" % (exe, t, t.upper()))
        first = unittest.main(verbosity=2, exit=False, argv=[sys.argv[0], "Reproducers", "Edges"]).result
        # the fuzzing in this process under a cap: the imports plus 1 GiB (the tools it starts inherit it)
        with open("/proc/self/status") as f:
            vm = [int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")][0]
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
        print("address space capped at %.2f GiB (imports: %.2f GiB)" % ((vm + (1 << 30)) / 2 ** 30, vm / 2 ** 30))
        r = unittest.main(verbosity=2, exit=False, argv=[sys.argv[0], "Fuzz"]).result
        return 0 if first.wasSuccessful() and r.wasSuccessful() else 1
    finally:
        shutil.rmtree(_TMP, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
