#!/usr/bin/env python3
"""python/manyadd/sweep.py without Slurm (plan, local, collect, run-one, the sbatch script) on micro runs of
the C++ train and evaluate (a few seconds in all), and manyadd.grids. Checks:
- plan lists the runs in the product's order with their names, directories and status, and writes
  plan.json; local -j 2 trains and evaluates every run (each model byte-identical to `train --config` of
  its planned configuration); a second local runs nothing and leaves every file as it was;
- a run killed mid-way (SIGKILL to the whole `local` process group, after its first checkpoint) resumes
  and ends byte-identical to the uninterrupted run (model, checkpoint, log.csv and eval.csv but their
  wall-clock columns);
- collect: the long grids.csv (axis columns, a comma in a value quoted), runs.csv, table.md, the median
  per group (cell by cell against the runs' grids) and its heatmap;
- a changed description against an existing plan is refused (exit 2) until --replan, which keeps the
  finished runs; a run directory started with another configuration is refused; bad descriptions and
  paths exit 2 with the reason and write nothing;
- `slurm --no-submit`'s script: the array of the runs not evaluated, %P, --requeue, per-task logs,
  --cpus-per-task from train.threads, the options passed through;
- the controls-cpu study (bench/results/controls-cpu/sweep.json) at a small toy size gives the grids and
  models of its commands.sh at the same size; the position-code study's sweep.json plans commands.sh's
  18 runs with its recipe;
- the grid-ut family (train_grid, evaluate_grid) with a phase: each model byte-identical to train_grid
  --config then train_grid --resume with the phase's flags, the model before the phase kept; a run stopped
  before or inside its phase carries on; collect's table of instances with the medians and the best runs
  (cell by cell against the runs' CSVs); the grid-ut study's sweep.json plans runs.sh's runs;
- manyadd.grids on a known grid; controls-cpu/table.py on the committed grids prints the README's table;
  grid-ut/table.py on the committed evaluations prints its README's side-by-side table, its interventions
  figure is a PNG, grid-ut/errors.py's carry propagation holds on known problems, and grid-ut/leak.py's
  Seq2Grid weights match evaluate_grid's argmax_weight.
Needs TRAIN and EVALUATE (ctest passes the build's); MANYADD_SOURCE_DIR (default: this checkout).
"""
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SOURCE = os.environ.get("MANYADD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SOURCE, "python"))
from manyadd import grids  # noqa: E402

try:
    import matplotlib  # noqa: F401  (collect draws its heatmaps where it imports)
except ImportError:
    matplotlib = None

TRAIN = os.environ.get("TRAIN") or os.path.join(SOURCE, "build", "learn", "train")
BIN = os.path.dirname(os.path.abspath(TRAIN))
ENV = dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "python"))
ENV.pop("MANYADD_BIN", None)

# A micro model and recipe (a run: ~0.1 s of training, a 3 x 3 grid of one sample per cell).
MICRO = {"model": {"n_layers": 1, "d_model": 16, "d_head": 4, "d_ff": 16, "max_pos1": 6, "max_pos2": 6},
         "train": {"train_n": 2, "train_m": 3, "train_size": 200, "batch": 8, "steps": 20, "eval_every": 0,
                   "eval_samples": 2, "threads": 1}}
SMALL_GRID = ["--n-max", "3", "--m-max", "4"]
TRAIN_GRID = os.path.join(BIN, "train_grid")
# A micro grid universal transformer (a run: 4 steps, then 2 more in its phase; well under a second).
MICRO_GRID = {"model": {"d_emb": 8, "heads": 2, "groups": 2, "d_ffn": 8, "d_s2g": 8, "d_halt": 8, "d_ctx_ffn": 8,
                        "context_heads": 2, "max_steps_train": 4, "max_steps_eval": 4},
              "train": {"train_instance": "1-2x1-3", "batch": 8, "epochs": 2, "steps_per_epoch": 2,
                        "eval_instance": "2x3", "eval_samples": 2, "threads": 1}}


def micro_sweep(**kw):
    d = {"name": "micro", "base": json.loads(json.dumps(MICRO)),
         "axes": {"model.pos_codes": ["learned", "learned,shuffled"], "train.seed": [1, 2]},
         "run_name": "{model.pos_codes}-s{train.seed}", "evaluate": {"samples": 1, "args": SMALL_GRID}}
    d.update(kw)
    return d


def sweep(*args, rc=0, cwd=None):
    p = subprocess.run([sys.executable, "-m", "manyadd.sweep"] + [str(a) for a in args], capture_output=True,
                       text=True, env=ENV, cwd=cwd)
    if rc is not None and p.returncode != rc:
        raise AssertionError("sweep %s: exit %d (expected %d)\n%s%s" % (" ".join(map(str, args)), p.returncode, rc,
                                                                       p.stdout, p.stderr))
    return p


def read(path):
    with open(path) as f:
        return f.read()


def load(path):
    with open(path) as f:
        return json.load(f)


def same_file(a, b):
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def columns(path, k):
    """The first k columns of a CSV (log.csv, eval.csv: their last columns are wall-clock times)."""
    with open(path) as f:
        return [",".join(l.strip().split(",")[:k]) for l in f if l.strip()]


class Sweep(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="manyadd_sweep_test_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, name, desc):
        p = os.path.join(self.dir, name)
        with open(p, "w") as f:
            json.dump(desc, f, indent=1)
        return p

    def test_plan_local_collect(self):
        f = self.write("micro.json", micro_sweep())
        out = os.path.join(self.dir, "out")
        p = sweep("plan", f, "--out", out, "--bin", BIN)
        names = ["learned-s1", "learned-s2", "learned-shuffled-s1", "learned-shuffled-s2"]
        lines = p.stdout.splitlines()
        self.assertIn("4 runs, axes model.pos_codes (2) x train.seed (2)", lines[0])
        for i, n in enumerate(names):
            self.assertRegex(lines[2 + i], r"^%d\s+%s\s+new\s+\S*runs/%s\s" % (i, n, n))
        self.assertEqual(lines[-1], "4 new, 0 partial, 0 trained, 0 evaluated")
        plan = load(os.path.join(out, "plan.json"))
        self.assertEqual([r["name"] for r in plan["runs"]], names)
        self.assertEqual(plan["runs"][3]["config"]["model"]["pos_codes"], "learned,shuffled")
        self.assertEqual(plan["runs"][3]["config"]["train"]["seed"], 2)
        self.assertFalse(os.path.exists(os.path.join(out, "runs")))  # plan starts nothing
        p = sweep("local", f, "--out", out, "--bin", BIN, "-j", "2")
        self.assertIn("every run evaluated", p.stdout)
        for n in names:
            for ext in ("csv", "png", "json"):
                self.assertTrue(os.path.isfile(os.path.join(out, "grids", "%s.%s" % (n, ext))), n + ext)
        # A run is `train --config` of its planned configuration, byte for byte.
        cfg = self.write("cfg.json", plan["runs"][2]["config"])
        subprocess.run([TRAIN, "--config", cfg, "--out", os.path.join(self.dir, "ref"), "-q"], check=True,
                       capture_output=True)
        self.assertTrue(same_file(os.path.join(self.dir, "ref", "model.safetensors"),
                                  os.path.join(out, "runs", names[2], "model.safetensors")))
        # A second local: nothing to do, nothing rewritten.
        stamp = {n: os.stat(os.path.join(out, "grids", n + ".csv")).st_mtime_ns for n in names}
        p = sweep("local", f, "--out", out, "--bin", BIN)
        self.assertIn("4 evaluated already, 0 to run", p.stdout)
        self.assertEqual(stamp, {n: os.stat(os.path.join(out, "grids", n + ".csv")).st_mtime_ns for n in names})
        self.assertIn("0 new, 0 partial, 0 trained, 4 evaluated", sweep("plan", f, "--out", out).stdout)
        # collect
        p = sweep("collect", f, "--out", out)
        col = os.path.join(out, "collect")
        import csv
        rows = list(csv.DictReader(io.StringIO(read(os.path.join(col, "grids.csv")))))
        self.assertEqual(len(rows), 4 * 9)
        self.assertEqual(list(rows[0])[:6], ["index", "run", "model.pos_codes", "train.seed", "n", "m"])
        self.assertEqual({r["model.pos_codes"] for r in rows}, {"learned", "learned,shuffled"})
        for r in rows:  # every cell is its run's grid's
            g = grids.read_grid(os.path.join(out, "grids", r["run"] + ".csv"))
            self.assertEqual(float(r["accuracy"]), g[(int(r["n"]), int(r["m"]))])
        runs = list(csv.DictReader(io.StringIO(read(os.path.join(col, "runs.csv")))))
        self.assertEqual([r["run"] for r in runs], names)
        self.assertTrue(all(r["status"] == "evaluated" and r["cells"] == "9" for r in runs))
        for group, members in (("learned", names[:2]), ("learned-shuffled", names[2:])):
            med = grids.read_grid(os.path.join(col, "median", group + ".csv"))
            gs = [grids.read_grid(os.path.join(out, "grids", n + ".csv")) for n in members]
            self.assertEqual(sorted(med), sorted(gs[0]))
            for c in med:
                self.assertAlmostEqual(med[c], grids.median([g[c] for g in gs]), places=4)
            if matplotlib is not None:
                self.assertTrue(os.path.getsize(os.path.join(col, "median", group + ".png")) > 1000)
        table = read(os.path.join(col, "table.md"))
        self.assertIn("| **learned-shuffled, median of 2** |", table)
        self.assertIn("| learned-s1 | ", table)

    def test_killed_run_resumes_bit_for_bit(self):
        d = micro_sweep(axes={}, run_name="long")
        d["base"]["train"].update(steps=3000, log_every=10, checkpoint_every=100, eval_every=500, seed=7)
        f = self.write("long.json", d)
        out = os.path.join(self.dir, "out")
        sweep("plan", f, "--out", out, "--bin", BIN)
        cfg = os.path.join(out, "runs", "long", "config.json")
        p = subprocess.Popen([sys.executable, "-m", "manyadd.sweep", "local", f, "--out", out, "--bin", BIN],
                             env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        step, t0 = 0, time.monotonic()
        try:
            while time.monotonic() - t0 < 60:
                try:
                    step = load(cfg)["step"]
                except (OSError, ValueError, KeyError):
                    step = 0
                if step >= 200 or p.poll() is not None:
                    break
                time.sleep(0.05)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)  # the sweep and its train: a crash, no clean exit
            p.wait()
        self.assertTrue(0 < step < 3000, "the run was not caught mid-way (step %d)" % step)
        self.assertIn("1 partial", sweep("plan", f, "--out", out).stdout)
        p = sweep("local", f, "--out", out, "--bin", BIN)
        self.assertRegex(p.stdout, r"run 0 long: resumed from step \d+, trained, evaluated")
        ref = os.path.join(self.dir, "ref")
        subprocess.run([TRAIN, "--config", os.path.join(out, "configs", "long.json"), "--out", ref, "-q"], check=True,
                       capture_output=True)
        run = os.path.join(out, "runs", "long")
        for fn in ("model.safetensors", "checkpoint.safetensors"):
            self.assertTrue(same_file(os.path.join(ref, fn), os.path.join(run, fn)), fn)
        self.assertEqual(columns(os.path.join(ref, "log.csv"), 4), columns(os.path.join(run, "log.csv"), 4))
        self.assertEqual(len(columns(os.path.join(run, "log.csv"), 4)), 301)
        self.assertEqual(columns(os.path.join(ref, "eval.csv"), 3), columns(os.path.join(run, "eval.csv"), 3))

    def test_changed_description_and_replan(self):
        f = self.write("s.json", micro_sweep(axes={"train.seed": [1, 2]}, run_name="s{train.seed}"))
        out = os.path.join(self.dir, "out")
        sweep("local", f, "--out", out, "--bin", BIN)
        plan = read(os.path.join(out, "plan.json"))
        # A third seed: refused while the plan stands, then planned with --replan; the two runs are kept.
        self.write("s.json", micro_sweep(axes={"train.seed": [1, 2, 3]}, run_name="s{train.seed}"))
        for cmd in ("plan", "local", "collect", "slurm"):
            p = sweep(cmd, f, "--out", out, "--bin", BIN, rc=2)
            self.assertIn("changed since the plan was written (2 of its 2 runs started)", p.stderr)
            self.assertIn("--replan", p.stderr)
        self.assertEqual(read(os.path.join(out, "plan.json")), plan)
        p = sweep("local", f, "--out", out, "--bin", BIN, "--replan")
        self.assertIn("3 runs, 2 evaluated already, 1 to run", p.stdout)
        # --set is part of the description; the plan remembers it.
        p = sweep("plan", f, "--out", out, "--set", "evaluate.samples=2", rc=2)
        self.assertIn("its --set differs", p.stderr)
        # Other steps for runs already trained: refused even with --replan, naming the field.
        self.write("s.json", micro_sweep(axes={"train.seed": [1, 2, 3]}, run_name="s{train.seed}",
                                         base=dict(MICRO, train=dict(MICRO["train"], steps=30))))
        p = sweep("plan", f, "--out", out, "--bin", BIN, "--replan", rc=2)
        self.assertIn("run s1 was started with another configuration (train.steps 20 -> 30)", p.stderr)
        # A run's index must exist; run-one never writes a plan.
        p = sweep("run-one", f, "--out", os.path.join(self.dir, "none"), "--index", "0", "--bin", BIN, rc=2)
        self.assertIn("has no plan.json", p.stderr)

    def test_bad_input(self):
        out = os.path.join(self.dir, "out")
        afile = os.path.join(self.dir, "afile")
        open(afile, "w").close()
        base = {"model": {}, "train": {"threads": 1}}
        cases = [
            ({"base": base}, "no 'evaluate' object"),
            ({"base": base, "evaluate": {}}, "evaluate.samples is required"),
            ({"base": base, "evaluate": {"samples": 0}}, "evaluate.samples must be an integer >= 1"),
            ({"base": base, "evaluate": {"samples": 1, "bogus": 1}}, "evaluate: unknown key 'bogus'"),
            ({"base": base, "evaluate": {"samples": 1}, "extra": 1}, "unknown key 'extra'"),
            ({"evaluate": {"samples": 1}}, "no 'base'"),
            ({"base": {"model": {}, "train": {}}, "evaluate": {"samples": 1}}, "train.threads must be set"),
            ({"base": {"model": {"bogus": 1}, "train": {"threads": 1}}, "evaluate": {"samples": 1}},
             "train refuses its configuration (exit 2): model config: unknown field 'bogus'"),
            ({"base": base, "axes": {"model.pos_codes": ["learned", "nope"]}, "evaluate": {"samples": 1}},
             "run pos_codesnope: train refuses its configuration (exit 2): position code"),
            ({"base": base, "axes": {"train.seed": [1, 1]}, "evaluate": {"samples": 1}}, "a value appears twice"),
            ({"base": base, "axes": {"train.seed": []}, "evaluate": {"samples": 1}}, "a non-empty list"),
            ({"base": base, "axes": {"train.seed": [[1]]}, "evaluate": {"samples": 1}}, "is not a string, number"),
            ({"base": base, "axes": {"seed": [1, 2]}, "evaluate": {"samples": 1}},
             "a named axis is a non-empty object"),
            ({"base": base, "axes": {"a-b": [1]}, "evaluate": {"samples": 1}}, "an axis is a configuration field"),
            ({"base": base, "axes": {"train.seed": [1], "x": {"a": {"train.seed": 2}}}, "evaluate": {"samples": 1}},
             "train.seed is also set by axis 'train.seed'"),
            ({"base": base, "axes": {"train.seed": [1, 2]}, "run_name": "x", "evaluate": {"samples": 1}},
             "runs 0 and 1 are both named 'x'"),
            ({"base": base, "run_name": "{nope}", "evaluate": {"samples": 1}}, "{nope} is neither an axis"),
            ({"base": base, "run_name": "a/b", "evaluate": {"samples": 1}}, "letters, digits and . _ + = - only"),
            ({"base": base, "train_args": ["--seed", "3"], "evaluate": {"samples": 1}},
             "--seed sets train.seed, a field of the configuration"),
            ({"base": base, "train_args": ["--out", "x"], "evaluate": {"samples": 1}}, "--out is set by the sweep"),
            ({"base": base, "evaluate": {"samples": 1, "args": ["--csv", "x"]}}, "--csv is set by the sweep"),
            ({"base": base, "given": {"other": "."}, "evaluate": {"samples": 1}}, "given: 'other' is not a run"),
            ({"base": base, "given": {"run": "nowhere"}, "evaluate": {"samples": 1}}, "has no config.json"),
            ({"base": base, "median_over": ["train.seed"], "evaluate": {"samples": 1}}, "median_over names"),
            ({"base": "missing.json", "evaluate": {"samples": 1}}, "cannot read"),
            ({"base": base, "family": "rnn", "evaluate": {"samples": 1}}, 'family "rnn": one of decoder, grid-ut'),
            ({"base": base, "family": "grid-ut", "evaluate": {"samples": 1}}, "must name what evaluate_grid tests"),
            ({"base": base, "phases": {"train.steps": 9}, "evaluate": {"samples": 1}}, "'phases' must be a list"),
            ({"base": base, "phases": [{}], "evaluate": {"samples": 1}}, "phase 1 must be a non-empty object"),
            ({"base": base, "phases": [{"model.d_model": 8, "train.steps": 9}], "evaluate": {"samples": 1}},
             "phase 1 sets 'model.d_model': a phase changes train fields only"),
            ({"base": base, "phases": [{"train.lr": 0.1}], "evaluate": {"samples": 1}},
             "phase 1 must set train.steps (an integer)"),
            ({"base": {"model": {}, "train": {"threads": 1, "steps": 20}}, "phases": [{"train.steps": 20}],
              "evaluate": {"samples": 1}}, "phase 1: train.steps 20 must exceed the base's 20"),
            ({"base": base, "phases": [{"train.steps": 9000}, {"train.steps": 8000}], "evaluate": {"samples": 1}},
             "phase 2: train.steps 8000 must exceed the phase 1's 9000"),
            ({"base": base, "axes": {"train.steps": [100, 200]}, "phases": [{"train.steps": 150}],
              "evaluate": {"samples": 1}}, "run steps200: phase 1's train.steps 150 must exceed the run's 200"),
            ({"base": base, "phases": [{"train.steps": 9000, "train.lr": -1}], "evaluate": {"samples": 1}},
             "run run (phase 1): train refuses its configuration (exit 2)"),
            ({"base": MICRO_GRID, "family": "grid-ut", "phases": [{"train.epochs": 3, "train.bogus": 1}],
              "evaluate": {"samples": 1, "args": ["--table", "iii"]}},
             "phase 1: train.bogus is not a field a flag of train_grid sets"),
        ]
        for desc, msg in cases:
            f = self.write("bad.json", desc)
            p = sweep("plan", f, "--out", out, "--bin", BIN, rc=2)
            self.assertIn(msg, p.stderr, desc)
            self.assertFalse(os.path.exists(out), desc)
        f = self.write("ok.json", {"base": base, "evaluate": {"samples": 1}})
        for args, msg in ((["--out", afile], "exists and is not a directory"),
                          (["--out", os.path.join(afile, "x")], "does not exist"),
                          (["--out", out, "--bin", self.dir], "no executable"),
                          (["--out", out, "--set", "foo=1"], "KEY is model.FIELD"),
                          (["--out", out, "--set", "novalue"], "KEY=VALUE expected")):
            p = sweep("plan", f, *args, rc=2)
            self.assertIn(msg, p.stderr, args)
        with open(os.path.join(self.dir, "broken.json"), "w") as fh:
            fh.write('{"base": ')
        self.assertIn("is not valid JSON", sweep("plan", os.path.join(self.dir, "broken.json"), "--out", out,
                                                 rc=2).stderr)
        with open(os.path.join(self.dir, "twice.json"), "w") as fh:
            fh.write('{"base": {}, "base": {}}')
        self.assertIn("key 'base' appears twice", sweep("plan", os.path.join(self.dir, "twice.json"), "--out", out,
                                                        rc=2).stderr)
        self.assertIn("has no plan.json", sweep("collect", f, "--out", out, rc=2).stderr)
        self.assertFalse(os.path.exists(out))
        # A path a run writes taken by something else: refused before anything runs.
        sweep("plan", f, "--out", out, "--bin", BIN)
        os.makedirs(os.path.join(out, "grids", "run.csv"))
        p = sweep("local", f, "--out", out, "--bin", BIN, rc=2)
        self.assertIn("grids/run.csv exists and is not a regular file", p.stderr)
        os.rmdir(os.path.join(out, "grids", "run.csv"))
        os.makedirs(os.path.join(out, "runs"))
        open(os.path.join(out, "runs", "run"), "w").close()
        p = sweep("local", f, "--out", out, "--bin", BIN, rc=2)
        self.assertIn("runs/run exists and is not a directory", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "logs")))

    def test_toml_and_slurm_script(self):
        toml = os.path.join(self.dir, "s.toml")
        with open(toml, "w") as fh:
            fh.write("""name = "tomlsweep"
run_name = "{arm}-s{train.seed}"
train_args = ["--device", "cpu"]
[base.model]
n_layers = 1
d_model = 16
d_head = 4
d_ff = 16
max_pos1 = 6
max_pos2 = 6
[base.train]
train_n = 2
train_m = 3
train_size = 200
batch = 8
steps = 20
eval_every = 0
eval_samples = 2
threads = 2
[axes]
"train.seed" = [1, 2]
[axes.arm.base]
[axes.arm.t5]
"model.init" = "t5"
[evaluate]
samples = 1
args = ["--n-max", "3", "--m-max", "4"]
""")
        out = os.path.join(self.dir, "out")
        p = sweep("plan", toml, "--out", out, "--bin", BIN)
        self.assertIn("4 runs, axes train.seed (2) x arm (2)", p.stdout)
        plan = load(os.path.join(out, "plan.json"))
        self.assertEqual([r["name"] for r in plan["runs"]], ["base-s1", "t5-s1", "base-s2", "t5-s2"])
        self.assertEqual(plan["runs"][1]["config"]["model"]["init"], "t5")
        sweep("run-one", toml, "--out", out, "--index", "1", "--bin", BIN)
        sweep("run-one", toml, "--out", out, "--index", "2", "--bin", BIN)
        self.assertIn("--device cpu", read(os.path.join(out, "logs", "t5-s1.log")))
        p = sweep("slurm", toml, "--out", out, "--bin", BIN, "--no-submit", "--partition", "gpu", "--time", "1:00:00",
                  "--gpus", "1", "--gres", "gpu:1", "--mem", "4G", "--max-parallel", "2", "--sbatch-arg=--account=x")
        self.assertIn("2 array tasks (indices 0,3 of plan.json)", p.stdout)
        script = read(os.path.join(out, "sweep.sbatch"))
        for line in ("#SBATCH --job-name=tomlsweep", "#SBATCH --array=0,3%2", "#SBATCH --requeue",
                     "#SBATCH --output=%s/logs/slurm-%%A_%%a.out" % os.path.abspath(out), "#SBATCH --cpus-per-task=2",
                     "#SBATCH --partition=gpu", "#SBATCH --time=1:00:00", "#SBATCH --gpus=1", "#SBATCH --gres=gpu:1",
                     "#SBATCH --mem=4G", "#SBATCH --account=x", "#SBATCH --open-mode=append"):
            self.assertIn(line + "\n", script)
        self.assertIn('run-one %s --out %s --index "$SLURM_ARRAY_TASK_ID" --bin %s' % (
            os.path.abspath(toml), os.path.abspath(out), BIN), script)
        p = sweep("slurm", toml, "--out", out, "--no-submit", "--all", "--time", "a b", rc=2)
        self.assertIn("a value without spaces", p.stderr)
        sweep("slurm", toml, "--out", out, "--bin", BIN, "--no-submit", "--all")
        self.assertIn("#SBATCH --array=0-3\n", read(os.path.join(out, "sweep.sbatch")))

    def test_controls_cpu_study_matches_commands_sh(self):
        """bench/results/controls-cpu: commands.sh and sweep.json at one toy size, the same grids and models."""
        toy_train = ["--train-size", "200"]
        mirror = os.path.join(self.dir, "mirror")  # commands.sh runs from a root with build/learn, models/, bench/
        os.makedirs(os.path.join(mirror, "build"))
        os.symlink(BIN, os.path.join(mirror, "build", "learn"))
        for d in ("models", "bench", "python"):
            os.symlink(os.path.join(SOURCE, d), os.path.join(mirror, d))
        cmd_out = os.path.join(self.dir, "cmd")
        env = dict(ENV, STEPS="20", SAMPLES="1", GRID=" ".join(SMALL_GRID), EXTRA=" ".join(toy_train), BATCH="8",
                   EVAL_SAMPLES="1")
        p = subprocess.run(["bash", "bench/results/controls-cpu/commands.sh", cmd_out], cwd=mirror, env=env,
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = os.path.join(self.dir, "sweep")
        sets = ["train.steps=20", "evaluate.samples=1", "evaluate.args=%s" % json.dumps(SMALL_GRID),
                "train.train_size=200", "train.batch=8", "train.eval_samples=1"]
        study = os.path.join(SOURCE, "bench", "results", "controls-cpu", "sweep.json")
        p = sweep("local", study, "--out", out, "--bin", BIN, "-j", "2", *[x for s in sets for x in ("--set", s)])
        names = ["base-s1", "base-s2", "none-s1", "none-s2", "t5-s1", "t5-s2", "authors-s1", "authors-s2"]
        self.assertEqual([r["name"] for r in load(os.path.join(out, "plan.json"))["runs"]], names)
        self.assertIn("run 0 base-s1: evaluated", p.stdout)  # the committed model, evaluated as committed
        for n in names:
            self.assertTrue(same_file(os.path.join(cmd_out, "grids", n + ".csv"),
                                      os.path.join(out, "grids", n + ".csv")), n)
            if n != "base-s1":
                self.assertTrue(same_file(os.path.join(cmd_out, n, "model.safetensors"),
                                          os.path.join(out, "runs", n, "model.safetensors")), n)
        # collect's table is table.py's (groups: the arms, medians over the seeds).
        p = sweep("collect", study, "--out", out)
        t = subprocess.run([sys.executable, os.path.join(SOURCE, "bench", "results", "controls-cpu", "table.py"),
                            os.path.join(out, "grids")], capture_output=True, text=True, check=True).stdout
        table = read(os.path.join(out, "collect", "table.md"))
        for line in t.splitlines()[2:]:
            self.assertIn(line, table)

    def test_position_codes_sweep_plans_commands_sh(self):
        study = os.path.join(SOURCE, "bench", "results", "position-codes", "sweep.json")
        out = os.path.join(self.dir, "pc")
        sweep("plan", study, "--out", out, "--bin", BIN, "--set", "train.train_size=200")
        runs = load(os.path.join(out, "plan.json"))["runs"]
        desc = load(study)
        arms = desc["axes"]["arm"]  # the arms as the description orders them, each one controlled change
        self.assertEqual(list(arms)[0], "learned")
        self.assertEqual(arms["learned"], {})
        self.assertEqual([r["name"] for r in runs], ["%s-s%d" % (a, s) for a in arms for s in (1, 2, 3)])
        recipe = {"model": {"n_layers": 1, "n_heads": 4, "d_model": 64, "d_head": 16, "d_ff": 256, "max_pos1": 40,
                            "max_pos2": 40},
                  "train": {"train_n": 10, "train_m": 10, "steps": 8000, "batch": 64, "lr": 3e-3, "threads": 1,
                            "log_every": 100, "eval_every": 1000, "eval_samples": 50, "checkpoint_every": 500,
                            "train_size": 200}}
        for r in runs:
            want = json.loads(json.dumps(recipe))
            arm = r["name"].rsplit("-s", 1)[0]
            for key, value in arms[arm].items():  # the arm's fields and nothing else
                section, field = key.split(".", 1)
                want[section][field] = value
            want["train"]["seed"] = int(r["axes"]["train.seed"])
            self.assertEqual(r["config"], want, r["name"])
        plan = load(os.path.join(out, "plan.json"))
        self.assertEqual(plan["evaluate"], {"samples": 50, "seed": 12345, "threads": 1, "args": ["--device", "cpu-fast"]})
        self.assertEqual(plan["train_args"], ["--device", "cpu-fast"])

    def test_grid_ut_family_with_a_phase(self):
        d = {"name": "gmicro", "family": "grid-ut", "base": json.loads(json.dumps(MICRO_GRID)),
             "axes": {"arm": {"base": {}, "nogroups": {"model.groups": 1}}, "train.seed": [1, 2]},
             "run_name": "{arm}-seed{train.seed}", "phases": [{"train.epochs": 3, "train.beta": 5e-4}],
             "evaluate": {"samples": 5, "seed": 1, "args": ["--instance", "2x3", "--instance", "1-2x1-4"]}}
        f = self.write("g.json", d)
        out = os.path.join(self.dir, "out")
        names = ["base-seed1", "base-seed2", "nogroups-seed1", "nogroups-seed2"]
        sweep("plan", f, "--out", out, "--bin", BIN)
        plan = load(os.path.join(out, "plan.json"))
        self.assertEqual(plan["family"], "grid-ut")
        self.assertEqual(plan["phases"], [{"set": {"train.epochs": 3, "train.beta": 5e-4},
                                           "args": ["--epochs", "3", "--beta", "0.0005"]}])
        # Two runs started by hand: one at the end of its configuration (its phase not begun), one inside
        # its phase; the sweep carries both on.
        run = lambda n: os.path.join(out, "runs", n)  # noqa: E731
        os.makedirs(os.path.join(out, "configs"))
        for i in (1, 2):
            cfg = os.path.join(out, "configs", names[i] + ".json")
            with open(cfg, "w") as fh:
                json.dump(plan["runs"][i]["config"], fh, indent=1)
            subprocess.run([TRAIN_GRID, "--config", cfg, "--out", run(names[i]), "-q"], check=True, capture_output=True)
        subprocess.run([TRAIN_GRID, "--out", run(names[2]), "--resume", "--epochs", "3", "--beta", "0.0005",
                        "--stop-after", "5", "-q"], check=True, capture_output=True)
        self.assertEqual(load(os.path.join(run(names[2]), "config.json"))["step"], 5)
        p = sweep("plan", f, "--out", out)
        self.assertIn("2 new, 2 partial, 0 trained, 0 evaluated", p.stdout)
        p = sweep("local", f, "--out", out, "--bin", BIN, "-j", "2")
        self.assertIn("run 0 base-seed1: trained, phase 1 (--epochs 3 --beta 0.0005) from step 4, trained, evaluated",
                      p.stdout)
        self.assertIn("run 1 base-seed2: phase 1 (--epochs 3 --beta 0.0005) from step 4, trained, evaluated", p.stdout)
        self.assertIn("run 2 nogroups-seed1: resumed from step 5, trained, evaluated", p.stdout)
        # Every run is train_grid --config then train_grid --resume with the phase's flags, byte for byte,
        # and the model before the phase is kept.
        for i, n in enumerate(names):
            ref = os.path.join(self.dir, "ref-" + n)
            cfg = self.write("cfg-%s.json" % n, plan["runs"][i]["config"])
            subprocess.run([TRAIN_GRID, "--config", cfg, "--out", ref, "-q"], check=True, capture_output=True)
            if n != names[2]:  # the run whose phase was begun by hand has no snapshot
                self.assertTrue(same_file(os.path.join(ref, "model.safetensors"),
                                          os.path.join(out, "snapshots", n + "-step4", "model.safetensors")), n)
            subprocess.run([TRAIN_GRID, "--out", ref, "--resume", "--epochs", "3", "--beta", "0.0005", "-q"],
                           check=True, capture_output=True)
            for fn in ("model.safetensors", "checkpoint.safetensors"):
                self.assertTrue(same_file(os.path.join(ref, fn), os.path.join(run(n), fn)), n + " " + fn)
            self.assertEqual(load(os.path.join(run(n), "config.json"))["step"], 6)
        self.assertFalse(os.path.exists(os.path.join(out, "snapshots", names[2] + "-step4")))
        self.assertIn("0 new, 0 partial, 0 trained, 4 evaluated", sweep("plan", f, "--out", out).stdout)
        self.assertIn("4 evaluated already, 0 to run", sweep("local", f, "--out", out, "--bin", BIN).stdout)
        # collect: the instances, the runs' accuracies, the medians and best per group
        p = sweep("collect", f, "--out", out)
        col = os.path.join(out, "collect")
        import csv
        runs = {r["run"]: r for r in csv.DictReader(io.StringIO(read(os.path.join(col, "runs.csv"))))}
        self.assertEqual(list(runs), names)
        table = read(os.path.join(col, "table.md")).splitlines()
        self.assertEqual(table[2], "| run | 2x3 | 1-2x1-4 |")
        for n in names:
            with open(os.path.join(out, "grids", n + ".csv")) as fh:
                rows = {r["instance"]: r for r in csv.DictReader(fh)}
            self.assertEqual(list(rows), ["2x3", "1-2x1-4"])
            for inst, r in rows.items():
                self.assertEqual(float(runs[n]["seq:" + inst]), float(r["seq_acc"]))
                self.assertEqual(float(runs[n]["char:" + inst]), float(r["char_acc"]))
        for arm in ("base", "nogroups"):
            members = [runs[n] for n in names if n.startswith(arm + "-")]
            for what, fn in (("median", grids.median), ("best", max)):
                want = ["%.3f / %.4f" % (fn([float(m["seq:" + i]) for m in members]),
                                         fn([float(m["char:" + i]) for m in members])) for i in ("2x3", "1-2x1-4")]
                self.assertIn("| **%s, %s of 2** | %s |" % (arm, what, " | ".join(want)), table)
        instances = list(csv.DictReader(io.StringIO(read(os.path.join(col, "instances.csv")))))
        self.assertEqual(len(instances), 8)
        self.assertEqual(list(instances[0])[:5], ["index", "run", "arm", "train.seed", "instance"])

    def test_grid_ut_study_plans_runs_sh(self):
        # bench/results/grid-ut/sweep.json plans the runs of runs.sh: its names in its order, each with the
        # flags runs.sh passes train_grid (--seed S [--groups 1] --threads 2, then the phase's --epochs 810
        # --beta 5e-4) and its Table III evaluation.
        here = os.path.join(SOURCE, "bench", "results", "grid-ut")
        out = os.path.join(self.dir, "study")
        sweep("plan", os.path.join(here, "sweep.json"), "--out", out, "--bin", BIN)
        plan = load(os.path.join(out, "plan.json"))
        sh = read(os.path.join(here, "runs.sh"))
        self.assertIn("runs=(base-seed1 nogroups-seed1 base-seed2 nogroups-seed2 base-seed3 nogroups-seed3)", sh)
        self.assertEqual([r["name"] for r in plan["runs"]], ["base-seed1", "nogroups-seed1", "base-seed2",
                                                             "nogroups-seed2", "base-seed3", "nogroups-seed3"])
        for r in plan["runs"]:
            s = int(r["name"].rsplit("seed", 1)[1])
            self.assertEqual(r["config"], {"model": {"groups": 1} if r["name"].startswith("nogroups") else {},
                                           "train": {"seed": s, "threads": 2}})
        self.assertIn("threads=${THREADS:-2}", sh)
        self.assertIn('--resume --epochs 810 --beta 5e-4 --threads "$threads" --device cpu-fast', sh)
        self.assertEqual(plan["phases"][0]["args"], ["--epochs", "810", "--beta", "0.0005"])
        self.assertEqual(plan["train_args"], ["--device", "cpu-fast"])
        self.assertIn('--table iii --samples 1000 --threads "$threads" --device cpu-fast', sh)
        self.assertEqual(plan["evaluate"], {"samples": 1000, "seed": 1, "threads": 2,
                                            "args": ["--table", "iii", "--device", "cpu-fast"]})

    def test_grids(self):
        g = {(n, m): 1.0 for n in range(1, 4) for m in range(2, 5)}
        g[(3, 2)], g[(1, 4)], g[(2, 3)] = 0.5, None, 0.8
        self.assertEqual(grids.metrics(g, 0.9), {"cells_at_threshold": 6, "cells": 8, "worst_cell": 0.5,
                                                 "longest_operand_at_m2": 2, "most_operands_at_n1": 3})
        r = grids.table_row(g, 0.9, train=(2, 3))  # in-distribution: n <= 2, m <= 3
        self.assertEqual(r[:2], [(1 + 1 + 1 + 0.8) / 4, 0.8])
        self.assertAlmostEqual(r[2], 7.3 / 8)
        self.assertEqual(r[3:], [6, 8, 2, 3])
        self.assertEqual(grids.median([3, 1, 2, 10]), 2.5)
        self.assertEqual(grids.format_row([1, 0.75, 0.5, 4.5, 9, 2, 3]), "1.0000 | 0.75 | 0.500 | 4.5/9 | 2 | 3")
        # controls-cpu/table.py on the committed grids prints the table of its README.
        here = os.path.join(SOURCE, "bench", "results", "controls-cpu")
        t = subprocess.run([sys.executable, os.path.join(here, "table.py"), os.path.join(here, "grids")],
                           capture_output=True, text=True, check=True).stdout
        readme = read(os.path.join(here, "README.md"))
        self.assertEqual(len(t.splitlines()), 14)
        for line in t.splitlines():
            self.assertIn(line + "\n", readme)

    def test_grid_ut_tables(self):
        # grid-ut/table.py on the committed evaluations prints the side-by-side table of its README, and its
        # figure of the interventions is a PNG; errors.py's carry propagation on known problems.
        here = os.path.join(SOURCE, "bench", "results", "grid-ut")
        table = os.path.join(here, "table.py")
        t = subprocess.run([sys.executable, table], capture_output=True, text=True, check=True).stdout
        readme = read(os.path.join(here, "README.md"))
        self.assertEqual(len(t.splitlines()), 19)  # header, rule, 17 instances
        for line in t.splitlines():
            self.assertIn(line + "\n", readme)
        with tempfile.TemporaryDirectory() as d:
            png = os.path.join(d, "lengths.png")
            subprocess.run([sys.executable, table, "--interventions", os.path.join(here, "interventions"), "--png", png],
                           capture_output=True, text=True, check=True)
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            bad = subprocess.run([sys.executable, table, "--png", png], capture_output=True, text=True)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("usage", bad.stderr)
        sys.path.insert(0, here)
        try:
            import errors
        finally:
            sys.path.remove(here)
        self.assertEqual(errors.longest_propagation("15+85"), 1)     # the carry of 5+5 makes 1+8 carry out
        self.assertEqual(errors.longest_propagation("9995+5"), 3)    # the carry from 5+5 runs through three 9s
        self.assertEqual(errors.longest_propagation("1234+4321"), 0)  # no carry at all
        self.assertEqual(errors.columns("12+345"), [7, 5, 3])
        # --update replaces the sections of the files it is given and keeps the others (the problems CSVs are
        # not committed): two files, then the first again with another answer
        with tempfile.TemporaryDirectory() as d:
            head = "instance,steps,exact,problem,sum,prediction\n"
            a, b, md = os.path.join(d, "a.csv"), os.path.join(d, "b.csv"), os.path.join(d, "errors.md")
            for path, body in ((a, "2x2,7,1,15+85,100,100\n"), (b, "2x2,7,0,15+85,100,_90\n")):
                with open(path, "w") as f:
                    f.write(head + body)
            run = [sys.executable, os.path.join(here, "errors.py")]
            subprocess.run(run + ["--update", md, b], check=True)
            subprocess.run(run + ["--update", md, a], check=True)
            got = read(md)
            self.assertEqual(got, subprocess.run(run + [a, b], capture_output=True, text=True, check=True).stdout)
            with open(a, "w") as f:
                f.write(head + "2x2,7,0,15+85,100,101\n")
            subprocess.run(run + ["--update", md, a], check=True)
            got = read(md)
            self.assertEqual(got.count("## "), 2)
            self.assertIn(a + ", 2x2: 1 problems, sequence accuracy 0.000", got)
            self.assertIn(b + ", 2x2: 1 problems, sequence accuracy 0.000", got)
            # bad files: a CSV without the columns, a row short of fields, a missing file, bytes that are not text
            bad = os.path.join(d, "bad.csv")
            for body, msg in (("a,b\n1,2\n", "no column instance"), (head + "2x2,7,1\n", "fewer fields"),
                              (None, "No such file"), (b"\xff\xfe\x00a,b\n", "not a CSV file")):
                if body is None:
                    os.remove(bad)
                else:
                    with open(bad, "wb" if isinstance(body, bytes) else "w") as f:
                        f.write(body)
                p = subprocess.run(run + [bad], capture_output=True, text=True)
                self.assertEqual(p.returncode, 2, msg)
                self.assertIn(msg, p.stderr)
                self.assertNotIn("Traceback", p.stderr)
            for args in (["--update"], ["--update", md, "-x"], [], ["--update", a]):  # a: not an errors.md
                p = subprocess.run(run + args, capture_output=True, text=True)
                self.assertEqual(p.returncode, 2, args)
                self.assertIn("errors.py: ", p.stderr, args)
        # leak.py's Seq2Grid (numpy, float64) against evaluate_grid's argmax_weight (C++, fp32) on the
        # committed base model: 2 x 602 and 2 x 30, 4 problems each.
        leak = os.path.join(here, "leak.py")
        model = os.path.join(SOURCE, "models", "cpu-grid-ut-base-s1")
        with tempfile.TemporaryDirectory() as d:
            rows = os.path.join(d, "problems.csv")
            subprocess.run([os.path.join(BIN, "evaluate_grid"), "--model", model, "--instance", "2x602", "--instance",
                            "2x30", "--samples", "4", "--batch", "4", "--threads", "1", "-q", "--problems-csv", rows],
                           check=True, capture_output=True)
            p = subprocess.run([sys.executable, leak, model, "--check", rows], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn(": 8 problems, largest |weight - argmax_weight|", p.stdout)
            p = subprocess.run([sys.executable, leak, model, "--check", rows, "--tol", "1e-12"], capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)  # the check can fail
        t = subprocess.run([sys.executable, leak, model, "--lengths", "602"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
        self.assertEqual(len(t), 3)
        self.assertRegex(t[2], r"\| TTTTTTTTTTNO \| 4\.27e-04 \(8\.67e-04\) \| .* \| 0\.598 \| 811 \|$")
        for args, msg in (([os.path.join(SOURCE, "models", "cpu-sa1010-1l4h-d64")], "not a grid model"),
                          ([model, "--lengths", "0"], "--lengths"), ([model, model, "--check", "x.csv"], "one MODEL"),
                          ([model, "--check", os.path.join(here, "README.md")], "not evaluate_grid --problems-csv")):
            p = subprocess.run([sys.executable, leak] + args, capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(msg, p.stderr, args)


if __name__ == "__main__":
    if not (os.path.isfile(TRAIN) and os.path.isfile(os.path.join(BIN, "evaluate"))):
        print("test_sweep: no train/evaluate at %s (set TRAIN, or build)" % BIN, file=sys.stderr)
        sys.exit(2)
    unittest.main()
