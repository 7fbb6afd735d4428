"""A study's runs from one description: trained and evaluated here, N at a time, or as a Slurm job array;
then every run's grid in one table. Standard library only (collect's heatmaps use matplotlib when it
imports).

    python3 -m manyadd.sweep plan    SWEEP --out OUT            # the runs, their directories and status
    python3 -m manyadd.sweep local   SWEEP --out OUT -j 2       # run them here, 2 at a time
    python3 -m manyadd.sweep slurm   SWEEP --out OUT --partition cpu --time 2:00:00   # one array task per run
    python3 -m manyadd.sweep collect SWEEP --out OUT            # every grid in one CSV, the table, the medians
    python3 -m manyadd.sweep run-one SWEEP --out OUT --index I  # one run (what each array task calls)

The description (JSON, or TOML for a .toml file):
  {"name": "controls-cpu",                          optional: the Slurm job's name (default: OUT's name)
   "description": "...",                            optional, free text
   "base": {"model": {...}, "train": {...}},        train --config's fields; or the path of such a file
                                                    (relative to the description; other keys ignored)
   "axes": {"train.seed": [1, 2],                   a config field and its values, or a named axis whose
            "arm": {"base": {}, "t5": {"model.init": "t5"}}},   labels set several fields at once;
                                                    the runs are the Cartesian product, first axis outermost
   "run_name": "{arm}-s{train.seed}",               {axis} or {model.X}/{train.X} replaced by its value, ','
                                                    by '-' (default: 'seed1-arm' from the axes)
   "train_args": ["--device", "cuda"],              optional: train flags that are not the configuration
   "evaluate": {"samples": 50, "seed": 12345,       evaluate after each training: samples per cell (required),
                "threads": 1, "args": ["--n-max", "3"]},   test seed (12345), threads (the run's train.threads),
                                                    other flags (a smaller grid, --device cuda)
   "given": {"base-s1": "../../models/cpu-sa1010-1l4h-d64"},   optional: runs whose model is already
                                                    trained (evaluated from there, never trained)
   "median_over": ["train.seed"],                   axes collect takes medians over (default: train.seed,
                                                    train.data_seed where they are axes)
   "family": "decoder",                             optional: decoder (train, evaluate: the default) or grid-ut
                                                    (train_grid, evaluate_grid: paper 003's model)
   "phases": [{"train.epochs": 810, "train.beta": 5e-4}]}   optional: continuations after the configuration's
                                                    last step, in order, each `train --resume` with these
                                                    train fields (each sets the run's new end: train.steps,
                                                    for grid-ut train.epochs); the model before each is kept
                                                    in snapshots/NAME-stepS/
train.threads must be set: a run is deterministic for (seed, threads), and the Slurm task asks for that
many CPUs. For grid-ut, evaluate.args names what to test (evaluate_grid's --table or --instance; no
heatmap is drawn) and collect tables sequence and character accuracy per instance, with the median and
the best run per instance of every group (the paper reports the best of 10 seeds).

OUT holds plan.json (the runs in index order with their configurations and the description's hash: the
array indices stay fixed), runs/NAME/ (train's run directory), configs/NAME.json (the configuration a run
was started with), grids/NAME.csv/.png/.json (evaluate's grid, as the studies' commands.sh write them),
logs/NAME.log (the tools' output), logs/slurm-JOB_TASK.out, sweep.sbatch and collect/. A run is new, partial
(a checkpoint short of its last step), trained, or evaluated (its grid's report exists). A finished run
is skipped, a partial one resumes (`train --resume`: bit for bit), a grid already written is kept; so a
killed process, a requeued array task or a second `local` carries on where the last stopped.

A description changed after plan.json was written (its fields, the base file's, --set) is refused while
that plan stands: --replan writes a new plan (indices may move; a run directory started with another
configuration is still refused). --set KEY=VALUE changes the description for this OUT (train.steps=20,
evaluate.samples=1, 'evaluate.args=["--n-max", "3"]': a study at toy size); the plan remembers it.

Limits, checked before anything is built or written: the axes may give at most --max-runs runs (default
10000; the count is their sizes' product, computed before any run is built; pass the same --max-runs to
every command on that OUT). Every file read (the description, its base file, plan.json, a run's
config.json, the grids) must be a regular file (a FIFO or a device is refused, never waited on) of at most
1 MiB (a description, a base file), 16 MiB (a grid CSV) or 64 MiB (plan.json, config.json), nested at most
32 levels, of JSON values only (a TOML date or time, nan or inf is refused naming its key). plan.json must
be the plan its description gives (one edited by hand is refused until --replan). --out (and collect's
--to) must be a directory this process can write in, or a new name in one; a run's name is at most 200
characters.

Exit codes: 0 done; 1 some run failed or is not done (listed), or sbatch failed; 2 bad usage or input
(nothing started, nothing written).
"""
import argparse
import concurrent.futures
import csv
import fcntl
import hashlib
import io
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

from . import grids, strict
from .files import (InputError, _show, atomic_write, check_output_dir, check_output_path, check_path_length,
                    open_regular)

__all__ = ["load", "runs_of", "ensure_plan", "status", "run_one", "main"]

TOP_KEYS = ("name", "description", "base", "axes", "run_name", "train_args", "evaluate", "given", "median_over",
            "family", "phases")
# A model family: its two tools (in --bin), the train field a phase sets to move a run's end, and the last
# step of a run's train section (config.json's).
def _req_int(v):
    """v when it is a JSON integer; TypeError otherwise (a config.json not written by train)."""
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError("not an integer")
    return v


FAMILIES = {"decoder": {"train": "train", "evaluate": "evaluate", "end": "train.steps",
                        "last_step": lambda t: _req_int(t["steps"])},
            "grid-ut": {"train": "train_grid", "evaluate": "evaluate_grid", "end": "train.epochs",
                        "last_step": lambda t: _req_int(t["epochs"]) * _req_int(t["steps_per_epoch"])}}


def family(plan):
    """The plan's model family (plans written before families existed are the decoder's)."""
    return plan.get("family", "decoder")


EVAL_KEYS = ("samples", "seed", "threads", "args")
# Flags the sweep sets itself (or that would leave a run unfinished for ever).
TRAIN_OWN = ("--out", "--config", "--resume", "--stop-after", "--json", "-q", "--quiet")
EVAL_OWN = ("--model", "--csv", "--png", "--json", "--samples", "--seed", "--threads", "--problem", "--problems-csv",
            "-q", "--quiet")
SEED_AXES = ("train.seed", "train.data_seed")
FIELD = re.compile(r"^(model|train)\.[a-z][a-z0-9_]*$")
AXIS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")
FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
PLAN_FORMAT = "manyadd.sweep plan 1"
# What the reader accepts: a description or its base file (written by hand) of at most 1 MiB, the files
# the sweep and the tools write (plan.json, config.json, the grids) of at most 64 MiB, nested at most
# 32 levels (a description nests 4, plan.json 5).
MAX_DESCRIPTION, MAX_STATE, MAX_DEPTH = 1 << 20, 64 << 20, 32
# Runs a description may give (the product of its axes' sizes, computed before any run is built);
# --max-runs raises it.
MAX_RUNS = 10000
# A run's name is a file name under OUT (NAME.json, NAME-stepS/): at most 200 bytes; OUT's absolute path
# leaves 512 bytes for the paths under it.
MAX_NAME, OUT_ROOM = 200, 512
STATUSES = ("new", "partial", "trained", "evaluated")
_print_lock = threading.Lock()


def say(*a, **kw):
    with _print_lock:
        print(*a, **kw, flush=True)


# ---- the description ---------------------------------------------------------------------------------

def _scalar(v):
    return isinstance(v, (str, int, float, bool)) and not (isinstance(v, float) and not math.isfinite(v))


def label(v):
    """A value as it appears in run names and in collect's columns."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else json.dumps(v)


def _read_file(path, max_bytes=MAX_DESCRIPTION):
    """The one reader of every file the sweep reads (a description, its base file, plan.json, a run's
    config.json): a regular file of at most max_bytes (a FIFO, a device, a directory or a longer file is
    refused before anything is read), JSON as strictly as the C++ reads it (no key twice, no NaN) or TOML
    for a .toml file, nested at most MAX_DEPTH levels, JSON values only (a TOML date is refused by name)."""
    if path.endswith(".toml"):
        return strict.read_toml(path, max_bytes, MAX_DEPTH)
    return strict.read_json(path, max_bytes, MAX_DEPTH)


def _object(v, what):
    """v when it is a JSON object, else InputError naming what it should have been."""
    if not isinstance(v, dict):
        raise InputError("%s must be a JSON object" % what)
    return v


def _int(v):
    """v when it is a JSON integer (not a boolean), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _config_section(where, sec, d):
    if not isinstance(d, dict):
        raise InputError("%s: '%s' must be an object of train --config fields" % (where, sec))
    for k, v in d.items():
        if not FIELD.match("%s.%s" % (sec, k)):
            raise InputError("%s: '%s.%s' is not a configuration field name" % (where, sec, k))
        if not _scalar(v):
            raise InputError("%s: %s.%s must be a string, number or boolean (got %s)" % (where, sec, k,
                                                                                        json.dumps(v)[:60]))
    return dict(d)


def _str_list(where, v):
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise InputError("%s must be a list of non-empty strings" % where)
    return list(v)


def _own_flags(where, args, own):
    for a in args:
        flag = a.split("=", 1)[0]
        if flag in own:
            raise InputError("%s: %s is set by the sweep itself" % (where, flag))


def _parse_set(text):
    if "=" not in text:
        raise argparse.ArgumentTypeError("%r: KEY=VALUE expected" % text)
    key, value = text.split("=", 1)
    try:
        v = json.loads(value)
    except (ValueError, RecursionError):  # RecursionError: JSON nested past Python's limit, read as a string
        v = value  # a bare word: a string
    return key.strip(), v


def load(path, sets=(), max_runs=MAX_RUNS):
    """The validated description (a dict: base, axes, run_name, train_args, evaluate, given, median_over,
    name) and its hash. Raises InputError naming what is wrong, and when the axes give more than max_runs
    runs (counted before any run is built)."""
    d = _read_file(path)
    where = path
    if not isinstance(d, dict):
        raise InputError("%s: the description must be an object" % where)
    for k in d:
        if k not in TOP_KEYS:
            raise InputError("%s: unknown key %r (known: %s)" % (where, k, ", ".join(TOP_KEYS)))
    here = os.path.dirname(os.path.abspath(path))
    # base: inline, or a config file as train --config reads it
    if "base" not in d:
        raise InputError("%s: no 'base' (the configuration every run starts from)" % where)
    base = d["base"]
    base_src = None
    if isinstance(base, str):
        base_src = os.path.normpath(os.path.join(here, base))
        bd = _read_file(base_src)
        if not isinstance(bd, dict):
            raise InputError("%s: a config file must be an object" % base_src)
        base, bwhere = {k: bd[k] for k in ("model", "train") if k in bd}, base_src
    elif isinstance(base, dict):
        bwhere = where + ": base"
        for k in base:
            if k not in ("model", "train"):
                raise InputError("%s has key %r: only 'model' and 'train'" % (bwhere, k))
    else:
        raise InputError("%s: 'base' must be an object {\"model\": {...}, \"train\": {...}} or a path" % where)
    base = {sec: _config_section(bwhere, sec, base.get(sec, {})) for sec in ("model", "train")}
    # The hash says whether the description changed: its fields (the base file's content in place of its
    # path), not its description text nor --set (the plan keeps --set beside it).
    digest = hashlib.sha256(json.dumps(dict({k: v for k, v in d.items() if k != "description"}, base=base),
                                       sort_keys=True, default=str).encode("utf-8")).hexdigest()
    # evaluate
    ev = d.get("evaluate")
    if not isinstance(ev, dict):
        raise InputError("%s: no 'evaluate' object (the evaluation after each training: samples, seed, threads, "
                         "args)" % where)
    ev = dict(ev)
    train_args = _str_list(where + ": train_args", d.get("train_args", []))
    for key, v in sets:  # --set: the base's fields, evaluate's, train_args
        if FIELD.match(key):
            sec, f = key.split(".", 1)
            base[sec][f] = v
        elif key.startswith("evaluate.") and key[9:] in EVAL_KEYS:
            ev[key[9:]] = v
        elif key == "train_args":
            train_args = _str_list("--set train_args", v)
        else:
            raise InputError("--set %s: KEY is model.FIELD, train.FIELD, evaluate.(%s) or train_args"
                             % (key, "|".join(EVAL_KEYS)))
        if not _scalar(v) and key not in ("evaluate.args", "train_args"):
            raise InputError("--set %s: the value must be a string, number or boolean" % key)
    for k in ev:
        if k not in EVAL_KEYS:
            raise InputError("%s: evaluate: unknown key %r (known: %s)" % (where, k, ", ".join(EVAL_KEYS)))
    for k in ("samples", "seed", "threads"):
        v = ev.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < (0 if k == "seed" else 1)):
            raise InputError("%s: evaluate.%s must be an integer >= %d (got %s)" % (where, k, 0 if k == "seed" else 1,
                                                                                 json.dumps(v)[:60]))
    if ev.get("samples") is None:
        raise InputError("%s: evaluate.samples is required (samples per grid cell; the paper: 1000)" % where)
    ev.setdefault("seed", 12345)
    ev["args"] = _str_list(where + ": evaluate.args", ev.get("args", []))
    _own_flags(where + ": evaluate.args", ev["args"], EVAL_OWN)
    _own_flags(where + ": train_args", train_args, TRAIN_OWN)
    # axes
    axes_in = d.get("axes", {})
    if not isinstance(axes_in, dict):
        raise InputError("%s: 'axes' must be an object {name: values}" % where)
    axes, setter = [], {}
    for name, vals in axes_in.items():
        aw = "%s: axis %r" % (where, name)
        if FIELD.match(name):
            if not isinstance(vals, list) or not vals:
                raise InputError("%s: a non-empty list of values expected" % aw)
            for v in vals:
                if not _scalar(v):
                    raise InputError("%s: value %s is not a string, number or boolean" % (aw, json.dumps(v)[:60]))
            points = [(label(v), {name: v}) for v in vals]
        elif AXIS_NAME.match(name):
            if not isinstance(vals, dict) or not vals:
                raise InputError("%s: a named axis is a non-empty object {label: {\"model.X\": value, ...}} (a "
                                 "configuration field axis is named model.X or train.X)" % aw)
            points = []
            for lab, sets_ in vals.items():
                if not RUN_NAME.match(lab):
                    raise InputError("%s: label %r: letters, digits and . _ + = - only" % (aw, lab))
                if not isinstance(sets_, dict):
                    raise InputError("%s: label %r must map to {\"model.X\": value, ...}" % (aw, lab))
                for k, v in sets_.items():
                    if not FIELD.match(k):
                        raise InputError("%s: label %r sets %r: not model.FIELD or train.FIELD" % (aw, lab, k))
                    if not _scalar(v):
                        raise InputError("%s: label %r: %s must be a string, number or boolean" % (aw, lab, k))
                points.append((lab, dict(sets_)))
        else:
            raise InputError("%s: an axis is a configuration field (model.X, train.X) or a name (letters, digits, "
                             "_)" % aw)
        labels = [p[0] for p in points]
        if len(set(labels)) != len(labels):
            raise InputError("%s: a value appears twice" % aw)
        for _, s in points:
            for k in s:
                if setter.get(k, name) != name:
                    raise InputError("%s: %s is also set by axis %r" % (aw, k, setter[k]))
                setter[k] = name
                if k in [key for key, _ in sets]:
                    raise InputError("--set %s: the field is an axis (%r)" % (k, name))
        axes.append((name, points))
    n_runs = math.prod(len(pts) for _, pts in axes)
    if n_runs > max_runs:
        raise InputError("%s: the axes give %d runs (%s), more than the %d this tool plans unless told: --max-runs "
                         "%d if that many is meant" % (where, n_runs, " x ".join(str(len(p)) for _, p in axes),
                                                       max_runs, n_runs))
    names = [a for a, _ in axes]
    run_name = d.get("run_name", "-".join(("%s{%s}" % (a.split(".", 1)[1], a)) if FIELD.match(a) else "{%s}" % a
                                          for a in names) or "run")
    if not isinstance(run_name, str) or not run_name:
        raise InputError("%s: run_name must be a non-empty string" % where)
    if len(run_name) > MAX_DESCRIPTION // 8:
        raise InputError("%s: run_name is %d characters long" % (where, len(run_name)))
    median_over = d.get("median_over", [a for a in names if a in SEED_AXES])
    median_over = _str_list(where + ": median_over", median_over) if median_over else []
    for a in median_over:
        if a not in names:
            raise InputError("%s: median_over names %r, not an axis (%s)" % (where, a, ", ".join(names) or "none"))
    given = d.get("given", {})
    if not isinstance(given, dict) or not all(isinstance(v, str) and v for v in given.values()):
        raise InputError("%s: 'given' must be an object {run name: model directory}" % where)
    name = d.get("name")
    if name is not None and (not isinstance(name, str) or not RUN_NAME.match(name)):
        raise InputError("%s: name %r: letters, digits and . _ + = - only" % (where, name))
    fam = d.get("family", "decoder")
    if fam not in FAMILIES:
        raise InputError("%s: family %s: one of %s" % (where, json.dumps(fam), ", ".join(FAMILIES)))
    if fam == "grid-ut" and not any(a.split("=", 1)[0] in ("--table", "--instance") for a in ev["args"]):
        raise InputError("%s: evaluate.args must name what evaluate_grid tests: --table T or --instance I "
                         "(e.g. [\"--table\", \"iii\"])" % where)
    phases = _phases(where, d.get("phases", []), FAMILIES[fam]["end"], base, setter)
    spec = {"name": name, "base": base, "axes": axes, "run_name": run_name, "train_args": train_args,
            "evaluate": ev, "given": {k: os.path.normpath(os.path.join(here, v)) for k, v in given.items()},
            "median_over": median_over, "path": os.path.abspath(path), "base_file": base_src, "family": fam,
            "phases": phases}
    return spec, digest


def _phases(where, phases, end, base, setter):
    """The phases, validated: a list of {"train.X": value} objects, each setting the family's end field
    (train.steps or train.epochs) to more than the one before."""
    if not isinstance(phases, list):
        raise InputError("%s: 'phases' must be a list of objects {\"train.X\": value, ...}" % where)
    last = base["train"].get(end.split(".", 1)[1]) if end not in setter else None
    for i, ph in enumerate(phases, 1):
        pw = "%s: phase %d" % (where, i)
        if not isinstance(ph, dict) or not ph:
            raise InputError("%s must be a non-empty object {\"train.X\": value, ...}" % pw)
        for k, v in ph.items():
            if not FIELD.match(k) or not k.startswith("train."):
                raise InputError("%s sets %r: a phase changes train fields only (train.X; a resumed run keeps its "
                                 "model)" % (pw, k))
            if not _scalar(v):
                raise InputError("%s: %s must be a string, number or boolean" % (pw, k))
        v = ph.get(end)
        if not isinstance(v, int) or isinstance(v, bool):
            raise InputError("%s must set %s (an integer): where the phase ends" % (pw, end))
        if isinstance(last, int) and not isinstance(last, bool) and v <= last:
            raise InputError("%s: %s %d must exceed the %s's %d" % (pw, end, v, "base" if i == 1 else
                                                                     "phase %d" % (i - 1), last))
        last = v
    return [dict(ph) for ph in phases]


def _render_name(template, axis_labels, config):
    def sub(m):
        key = m.group(1)
        if key in axis_labels:
            v = axis_labels[key]
        elif FIELD.match(key) and key.split(".", 1)[1] in config[key.split(".", 1)[0]]:
            v = label(config[key.split(".", 1)[0]][key.split(".", 1)[1]])
        else:
            raise InputError("run_name %r: {%s} is neither an axis nor a field of the configuration" % (template, key))
        return v.replace(",", "-")
    name = re.sub(r"\{([^{}]*)\}", sub, template)
    if not RUN_NAME.match(name) or name in (".", ".."):
        raise InputError("run_name %r gives %r: letters, digits and . _ + = - only, not first . _ + = -"
                         % (_show(template), _show(name)))
    if len(name) > MAX_NAME:
        raise InputError("run_name %r gives a name of %d characters (%r): a run's name is a file name, at most %d"
                         % (_show(template), len(name), _show(name), MAX_NAME))
    return name


def runs_of(spec):
    """The runs in index order: the Cartesian product of the axes, first axis outermost."""
    runs = []
    for combo in itertools.product(*[pts for _, pts in spec["axes"]]):
        cfg = {sec: dict(spec["base"][sec]) for sec in ("model", "train")}
        labels = {}
        for (axis, _), (lab, sets_) in zip(spec["axes"], combo):
            labels[axis] = lab
            for k, v in sets_.items():
                sec, f = k.split(".", 1)
                cfg[sec][f] = v
        name = _render_name(spec["run_name"], labels, cfg)
        runs.append({"index": len(runs), "name": name, "axes": labels, "config": cfg,
                     "given": spec["given"].get(name)})
    seen = {}
    for r in runs:
        if r["name"] in seen:
            raise InputError("runs %d and %d are both named %r: put every axis into run_name"
                             % (seen[r["name"]], r["index"], r["name"]))
        seen[r["name"]] = r["index"]
    for g in spec["given"]:
        if g not in seen:
            raise InputError("given: %r is not a run of the sweep (runs: %s)" % (g, ", ".join(list(seen)[:8])))
    end = FAMILIES[spec["family"]]["end"].split(".", 1)[1]
    for r in runs:
        t = r["config"]["train"].get("threads")
        if not isinstance(t, int) or isinstance(t, bool) or t < 1:
            raise InputError("run %s: train.threads must be set to an integer >= 1 (a run is deterministic for "
                             "(seed, threads); the Slurm task asks for that many CPUs)" % r["name"])
        e = r["config"]["train"].get(end)
        if spec["phases"] and isinstance(e, (int, float)) and spec["phases"][0]["train." + end] <= e:
            raise InputError("run %s: phase 1's train.%s %s must exceed the run's %s" % (
                r["name"], end, spec["phases"][0]["train." + end], e))
    return runs


def phase_configs(config, phases):
    """The configuration each phase continues with (the run's, then every phase's fields added in turn)."""
    out, cfg = [], {sec: dict(config[sec]) for sec in ("model", "train")}
    for ph in phases:
        for k, v in ph.items():
            cfg["train"][k.split(".", 1)[1]] = v
        out.append({sec: dict(cfg[sec]) for sec in ("model", "train")})
    return out


# ---- the tools ---------------------------------------------------------------------------------------

def default_bin():
    return os.environ.get("MANYADD_BIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                         "build", "learn")


def tools(bin_dir, fam="decoder"):
    """The family's train and evaluate executables in bin_dir: {"train": path, "evaluate": path}."""
    out = {}
    for t in ("train", "evaluate"):
        p = os.path.abspath(os.path.join(bin_dir, FAMILIES[fam][t]))
        if not (os.path.isfile(p) and os.access(p, os.X_OK)):
            raise InputError("no executable %s (build it: ./x build; or pass --bin DIR, or set MANYADD_BIN)" % p)
        out[t] = p
    return out


def config_flags(train):
    """train's flags that set a configuration field ('--seed' -> 'train.seed'), read from its --help."""
    try:
        text = subprocess.run([train, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {m.group(1): "%s.%s" % (m.group(2), m.group(3))
            for m in re.finditer(r"^\s+(--[a-z0-9-]+)\s+\S+\s+(model|train)\.([a-z0-9_]+):", text, re.M)}


def check_configs(train, runs, phases=()):
    """train is the authority on its configuration: each distinct one (a run's, and the one each phase
    continues with) is handed to it with an --out it cannot create (a path under a regular file), so it
    validates every field and value and stops before writing anything; its refusal is the message."""
    distinct = {}
    for r in runs:
        if r["given"] is None:
            distinct.setdefault(json.dumps(r["config"], sort_keys=True), r)
            for i, c in enumerate(phase_configs(r["config"], phases), 1):
                distinct.setdefault(json.dumps(c, sort_keys=True), dict(r, name="%s (phase %d)" % (r["name"], i)))
    with tempfile.TemporaryDirectory(prefix="manyadd_sweep_") as tmp:
        blocker = os.path.join(tmp, "file")
        open(blocker, "w").close()

        def one(item):
            i, (key, r) = item
            cfg = os.path.join(tmp, "%d.json" % i)
            with open(cfg, "w") as f:
                f.write(key)
            out = os.path.join(blocker, "run")
            p = subprocess.run([train, "--config", cfg, "--out", out, "-q"], capture_output=True, text=True)
            msg = (p.stderr.strip().splitlines() or [""])[-1]
            if p.returncode == 2 and "cannot create" in p.stderr and out in p.stderr:
                return None
            tool = os.path.basename(train)
            return "run %s: %s refuses its configuration (exit %d): %s" % (
                r["name"], tool, p.returncode, msg.replace(tool + ": ", "", 1))
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, max(1, len(distinct)))) as ex:
            errors = [e for e in ex.map(one, enumerate(distinct.items())) if e]
    if errors:
        raise InputError("\n".join(errors))


# ---- OUT: the plan and the runs' state ---------------------------------------------------------------

def paths(out, name):
    return {"run": os.path.join(out, "runs", name), "config": os.path.join(out, "configs", name + ".json"),
            "csv": os.path.join(out, "grids", name + ".csv"), "png": os.path.join(out, "grids", name + ".png"),
            "json": os.path.join(out, "grids", name + ".json"), "log": os.path.join(out, "logs", name + ".log")}


def model_dir(out, run):
    return run["given"] or paths(out, run["name"])["run"]


def snapshot_dir(out, name, step):
    """Where the model before a phase is kept: OUT/snapshots/NAME-stepS (config.json, model.safetensors)."""
    return os.path.join(out, "snapshots", "%s-step%d" % (name, step))


def progress(plan, run_dir):
    """(step, the last step of the configuration the run has now, the index of the phase to continue with
    or None) of a started run, from its config.json."""
    fam = family(plan)
    end_step = FAMILIES[fam]["last_step"]
    cpath = os.path.join(run_dir, "config.json")
    c = _read_file(cpath, MAX_STATE)
    try:
        step, end = _req_int(c["step"]), end_step(_object(c["train"], "train"))
        nxt = None
        if step >= end:
            for k, ph in enumerate(plan.get("phases", [])):
                t = dict(c["train"], **{f.split(".", 1)[1]: v for f, v in ph["set"].items()})
                if end_step(t) > step:
                    nxt = k
                    break
    except (KeyError, TypeError, ValueError, AttributeError, InputError):
        raise InputError("%s: no step / %s (integers)" % (cpath, "train.epochs, train.steps_per_epoch"
                                                          if fam == "grid-ut" else "train.steps")) from None
    return step, end, nxt


def status(out, run, plan):
    """new | partial | trained | evaluated, from the files alone."""
    p = paths(out, run["name"])
    if run["given"]:
        trained = os.path.isfile(os.path.join(run["given"], "model.safetensors"))
    else:
        if not os.path.isfile(os.path.join(p["run"], "checkpoint.safetensors")):
            return "new"
        step, end, nxt = progress(plan, p["run"])
        trained = step >= end and nxt is None
    if not trained:
        return "partial" if not run["given"] else "new"
    return "evaluated" if os.path.isfile(p["json"]) and os.path.isfile(p["csv"]) else "trained"


OUT_DIRS = ("runs", "configs", "grids", "logs", "snapshots")


def _check_out(out, write=True):
    """--out up front: a directory this process may write in (or a new name in one), or with write=False
    an existing directory (collect reads it)."""
    if write:
        check_output_dir(out, "--out", OUT_ROOM)
    else:
        if not out:
            raise InputError("--out is empty: give the sweep's directory")
        check_path_length(out, "--out")
        if os.path.lexists(out) and not os.path.isdir(out):
            raise InputError("--out '%s' exists and is not a directory" % _show(out))
        if not os.path.isdir(out):
            raise InputError("%s has no plan.json: nothing was planned or run there" % _show(out))


def _check_runs_against(out, runs):
    """Every run directory that exists belongs to its planned run: started with the planned
    configuration (configs/NAME.json), and no path the run writes is something else."""
    bad = []
    for d in OUT_DIRS:
        if os.path.lexists(os.path.join(out, d)) and not os.path.isdir(os.path.join(out, d)):
            bad.append("%s exists and is not a directory" % os.path.join(out, d))
    if bad:
        raise InputError("\n".join(bad))
    for r in runs:
        p = paths(out, r["name"])
        for what in ("run",):
            if os.path.lexists(p[what]) and not os.path.isdir(p[what]):
                bad.append("%s exists and is not a directory" % p[what])
        for what in ("config", "csv", "png", "json", "log"):
            if os.path.lexists(p[what]) and not os.path.isfile(p[what]):
                bad.append("%s exists and is not a regular file" % p[what])
        if r["given"]:
            for f in ("config.json", "model.safetensors"):
                if not os.path.isfile(os.path.join(r["given"], f)):
                    bad.append("run %s: given model %s has no %s" % (r["name"], _show(r["given"]), f))
        elif os.path.isfile(os.path.join(p["run"], "checkpoint.safetensors")) and os.path.isfile(p["config"]):
            was = _read_file(p["config"], MAX_STATE)
            if was != r["config"]:
                w = was if isinstance(was, dict) else {}
                diff = ["%s.%s %s -> %s" % (s, k, json.dumps(sec.get(k))[:60], json.dumps(r["config"][s].get(k))[:60])
                        for s in ("model", "train") for sec in [w.get(s) if isinstance(w.get(s), dict) else {}]
                        for k in sorted(set(sec) | set(r["config"][s])) if sec.get(k) != r["config"][s].get(k)]
                bad.append("run %s was started with another configuration (%s): remove %s (and %s) to run it anew"
                           % (r["name"], "; ".join(diff[:8]) or "other sections", p["run"], p["config"]))
    if bad:
        raise InputError("\n".join(bad))


def _started(out, runs):
    return [r["name"] for r in runs if os.path.isdir(paths(out, r["name"])["run"]) or
            os.path.isfile(paths(out, r["name"])["json"])]


def _read_plan(plan_path):
    """plan.json when there is one, its form checked as far as the commands read it before comparing it
    with the description (the rest is compared whole: _plan_matches); None when there is none."""
    if not os.path.lexists(plan_path):
        return None
    old = _read_file(plan_path, MAX_STATE)
    if not isinstance(old, dict) or old.get("format") != PLAN_FORMAT:
        raise InputError("%s is not a plan of this tool (format %s)" % (
            plan_path, json.dumps(old.get("format") if isinstance(old, dict) else None)[:60]))
    sets, runs = old.get("set"), old.get("runs")
    if not (isinstance(old.get("sweep_sha256"), str) and isinstance(sets, list) and isinstance(runs, list)
            and all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) for x in sets)
            and all(isinstance(r, dict) and isinstance(r.get("name"), str) and RUN_NAME.match(r["name"])
                    and len(r["name"]) <= MAX_NAME for r in runs)):
        raise InputError("%s is not a plan of this tool (sweep_sha256, set or runs malformed): --replan writes it "
                         "anew" % plan_path)
    return old


def _plan_doc(spec, digest, sets, runs, phases):
    return {"format": PLAN_FORMAT, "sweep": spec["path"], "base_file": spec["base_file"], "sweep_sha256": digest,
            "set": [list(s) for s in sets], "name": spec["name"],
            "axes": [{"name": a, "values": [l for l, _ in pts]} for a, pts in spec["axes"]],
            "median_over": spec["median_over"], "train_args": spec["train_args"], "evaluate": spec["evaluate"],
            "family": spec["family"], "phases": phases, "runs": runs}


def _plan_matches(old, spec, digest, sets, runs):
    """Whether plan.json is the plan this description gives, field by field: so what the commands take
    from it (run names, configurations, the tools' flags) is what the description says. Not compared:
    the paths of the description, of its base file and of given models (absolute where it was planned:
    a plan read from another checkout keeps them), the phases' flags (from train --help: checked for
    form and values)."""
    want = _plan_doc(spec, digest, sets, runs, None)
    if set(old) != set(want):
        return False
    for k, v in want.items():
        if k not in ("sweep", "base_file", "phases", "runs") and old[k] != v:
            return False
    if len(old["runs"]) != len(runs):
        return False
    for got, r in zip(old["runs"], runs):
        g = got.get("given")
        if (set(got) != set(r) or any(got[k] != r[k] for k in r if k != "given")
                or (g is None) != (r["given"] is None) or not (g is None or isinstance(g, str) and g)):
            return False
    ph = old["phases"]
    if not isinstance(ph, list) or len(ph) != len(spec["phases"]):
        return False
    for got, want_set in zip(ph, spec["phases"]):
        if not isinstance(got, dict) or set(got) != {"set", "args"} or got["set"] != want_set:
            return False
        args = got["args"]
        if not isinstance(args, list) or len(args) != 2 * len(want_set):
            return False
        for v, flag, value in zip(want_set.values(), args[0::2], args[1::2]):
            if not (isinstance(flag, str) and FLAG.match(flag) and flag not in TRAIN_OWN and value == label(v)):
                return False
    return True


def ensure_plan(sweep, out, sets=None, replan=False, bin_dir=None, write=True, max_runs=MAX_RUNS):
    """OUT/plan.json for this description: read when it matches, else (first time, or --replan) validated
    and written. Returns the plan."""
    _check_out(out, write)
    plan_path = os.path.join(out, "plan.json")
    old = _read_plan(plan_path)
    if sets is None:
        sets = [tuple(s) for s in old["set"]] if old else []
    spec, digest = load(sweep, sets, max_runs)
    runs = runs_of(spec)
    same = old is not None and old["sweep_sha256"] == digest and [tuple(s) for s in old["set"]] == list(sets)
    if same and _plan_matches(old, spec, digest, sets, runs):
        _check_runs_against(out, old["runs"])
        return old
    if old is not None and not replan:
        started = _started(out, old["runs"])
        why = ("it was changed since it was written (its fields are not those the description gives)" if same else
               "its --set differs since the plan was written" if old["sweep_sha256"] == digest else
               "the description (or its base file) changed since the plan was written")
        raise InputError("%s does not match %s: %s (%d of its %d runs started). Run with --replan to write a new "
                         "plan (run indices may move; a submitted array must not be running), or use another --out"
                         % (sweep, plan_path, why, len(started), len(old["runs"])))
    if not write:
        raise InputError("%s has no plan.json: nothing was planned or run there" % out)
    t = tools(bin_dir or default_bin(), spec["family"])
    flags = config_flags(t["train"])
    for a in spec["train_args"]:
        if a.split("=", 1)[0] in flags:
            raise InputError("train_args: %s sets %s, a field of the configuration: put it into base or an axis (a "
                             "run's configuration is what plan.json and config.json say)"
                             % (a, flags[a.split("=", 1)[0]]))
    flag_of = {field: flag for flag, field in flags.items()}
    phases = []
    for i, ph in enumerate(spec["phases"], 1):
        args = []
        for k, v in ph.items():
            if k not in flag_of:
                raise InputError("phase %d: %s is not a field a flag of %s sets (its --help lists them): a "
                                 "resume could not pass it" % (i, k, os.path.basename(t["train"])))
            args += [flag_of[k], label(v)]
        phases.append({"set": ph, "args": args})
    check_configs(t["train"], runs, spec["phases"])
    _check_runs_against(out, runs)
    plan = _plan_doc(spec, digest, sets, runs, phases)
    _make_dir(out)
    atomic_write(plan_path, json.dumps(plan, indent=1) + "\n")
    if old is not None:
        say("sweep: wrote a new plan (--replan): %s" % plan_path)
    return plan


# ---- running one run ---------------------------------------------------------------------------------

class RunFailed(Exception):
    pass


# The tools running now, so that a stop (SIGTERM, SIGINT) stops them too: a run stopped mid-way resumes
# from its last checkpoint next time.
_running = set()
_stopping = []
_run_lock = threading.RLock()  # reentrant: the handler runs in the main thread, which may hold it


def _stop(signum, frame):
    _stopping.append(signum)
    with _run_lock:
        for p in list(_running):
            p.terminate()


def _open_log(path):
    """The run's log opened for appending: a regular file only (a FIFO put there is refused, not waited
    on); RunFailed when it cannot be opened."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise RunFailed("cannot open its log %s: %s" % (path, e.strerror or e)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunFailed("its log %s is not a regular file" % path)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a")


def _call(cmd, log):
    with _open_log(log) as f:
        f.write("# %s $ %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), " ".join(shlex.quote(c) for c in cmd)))
        f.flush()
        with _run_lock:
            if _stopping:
                raise RunFailed("stopped (signal %d)" % _stopping[0])
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
            _running.add(p)
        try:
            rc = p.wait()
        finally:
            with _run_lock:
                _running.discard(p)
        f.write("# exit %d\n" % rc)
    if _stopping:
        raise RunFailed("stopped (signal %d)" % _stopping[0])
    return rc


def _tail(path, n=6, max_bytes=1 << 16):
    """The last n lines of a log (of its last max_bytes: a log may be long), [] when it cannot be read."""
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - max_bytes))
            text = f.read(max_bytes).decode("utf-8", "replace")
    except (OSError, InputError):
        return []
    return text.splitlines()[-n:]


def run_one(plan, out, index, t):
    """Trains (or resumes) and evaluates plan run `index`; returns a line saying what was done. Raises
    RunFailed with the reason."""
    r = plan["runs"][index]
    p = paths(out, r["name"])
    try:
        for d in ("runs", "configs", "grids", "logs"):
            os.makedirs(os.path.join(out, d), exist_ok=True)
    except OSError as e:
        raise RunFailed("cannot create %s: %s" % (os.path.join(out, d), e.strerror or e)) from None
    t0 = time.monotonic()
    with _open_log(p["log"]) as lock:  # one process at a time per run: the log is its lock
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RunFailed("another process is running it (%s is locked)" % p["log"]) from None
        st = status(out, r, plan)
        done = []
        while st in ("new", "partial") and not r["given"]:
            step = 0
            if st == "new":
                atomic_write(p["config"], json.dumps(r["config"], indent=1) + "\n")
                cmd = [t["train"], "--config", p["config"], "--out", p["run"], "-q"]
                done.append("trained")
            else:
                step, end, nxt = progress(plan, p["run"])
                cmd = [t["train"], "--out", p["run"], "--resume", "-q"]
                if step < end:  # the configuration it runs now (the planned one, or a phase's) is not done
                    done.append("resumed from step %d, trained" % step)
                else:  # the next phase: the model before it kept first
                    keep = snapshot_dir(out, r["name"], step)
                    if not os.path.isdir(keep):
                        tmp = keep + ".tmp"
                        try:
                            shutil.rmtree(tmp, ignore_errors=True)
                            os.makedirs(tmp)
                            for f in ("config.json", "model.safetensors"):
                                shutil.copy2(os.path.join(p["run"], f), tmp)
                            os.replace(tmp, keep)
                        except OSError as e:  # shutil.SpecialFileError (a FIFO) among them
                            shutil.rmtree(tmp, ignore_errors=True)
                            raise RunFailed("cannot keep the model before phase %d in %s: %s"
                                            % (nxt + 1, keep, e.strerror or e)) from None
                    cmd += plan["phases"][nxt]["args"]
                    done.append("phase %d (%s) from step %d, trained" % (nxt + 1, " ".join(plan["phases"][nxt]["args"]),
                                                                         step))
            rc = _call(cmd + plan["train_args"], p["log"])
            if rc != 0:
                raise RunFailed("train exited %d (%s)" % (rc, p["log"]))
            st = status(out, r, plan)
            if st == "new":
                raise RunFailed("train exited 0 but wrote no checkpoint (%s)" % p["log"])
            if st == "partial":  # on to the next phase only when this call ran its configuration to the end
                now, end, _ = progress(plan, p["run"])
                if now < end or now == step:
                    raise RunFailed("train exited 0 but the run is partial, at step %d of %d (%s)"
                                    % (now, end, p["log"]))
        if st == "new":
            raise RunFailed("given model %s has no model.safetensors" % r["given"])
        if st == "trained":
            ev = plan["evaluate"]
            threads = ev.get("threads") or r["config"]["train"]["threads"]
            cmd = [t["evaluate"], "--model", model_dir(out, r), "--samples", str(ev["samples"]), "--seed",
                   str(ev["seed"]), "--threads", str(threads)] + ev["args"] + [
                   "-q", "--csv", p["csv"]] + (["--png", p["png"]] if family(plan) == "decoder"
                                               else []) + ["--json", p["json"]]
            rc = _call(cmd, p["log"])
            if rc != 0 or not os.path.isfile(p["json"]):
                raise RunFailed("evaluate exited %d (%s)" % (rc, p["log"]))
            done.append("evaluated")
    return "%s in %.1f s" % (", ".join(done) or "already evaluated", time.monotonic() - t0)


# ---- subcommands -------------------------------------------------------------------------------------

def _rel(path):
    r = os.path.relpath(path)
    return r if not r.startswith("../../") else path


def cmd_plan(a):
    plan = ensure_plan(a.sweep, a.out, a.sets, a.replan, a.bin, max_runs=a.max_runs)
    counts = dict.fromkeys(STATUSES, 0)
    rows = []
    for r in plan["runs"]:
        st = status(a.out, r, plan)
        counts[st] += 1
        where = _rel(model_dir(a.out, r)) + (" (given)" if r["given"] else "")
        rows.append((str(r["index"]), r["name"], st, where, " ".join("%s=%s" % kv for kv in r["axes"].items())))
    w = [max(len(x[i]) for x in rows + [("index", "run", "status", "directory", "")]) for i in range(4)]
    say("%s -> %s: %d runs%s" % (_rel(a.sweep), os.path.join(_rel(a.out), "plan.json"), len(rows),
                                 ", axes " + " x ".join("%s (%d)" % (x["name"], len(x["values"])) for x in plan["axes"])
                                 if plan["axes"] else ""))
    say("  ".join(h.ljust(w[i]) for i, h in enumerate(("index", "run", "status", "directory"))) + "  axes")
    for row in rows:
        say("  ".join(row[i].ljust(w[i]) for i in range(4)) + "  " + row[4])
    say(", ".join("%d %s" % (counts[s], s) for s in STATUSES))
    return 0


def cmd_run_one(a):
    plan = ensure_plan(a.sweep, a.out, None, False, a.bin, write=False, max_runs=a.max_runs)
    if not 0 <= a.index < len(plan["runs"]):
        raise InputError("--index %d: the plan has runs 0..%d" % (a.index, len(plan["runs"]) - 1))
    t = tools(a.bin, family(plan))
    r = plan["runs"][a.index]
    say("run %d %s: %s" % (a.index, r["name"], status(a.out, r, plan)))
    try:
        say("run %d %s: %s" % (a.index, r["name"], run_one(plan, a.out, a.index, t)))
    except RunFailed as e:
        say("run %d %s: FAILED: %s" % (a.index, r["name"], e))
        for l in _tail(paths(a.out, r["name"])["log"]):
            say("    " + l)
        return 1
    return 0


def cmd_local(a):
    if a.jobs < 1:
        raise InputError("-j must be >= 1")
    plan = ensure_plan(a.sweep, a.out, a.sets, a.replan, a.bin, max_runs=a.max_runs)
    t = tools(a.bin, family(plan))
    todo = [r for r in plan["runs"] if status(a.out, r, plan) != "evaluated"]
    say("%d runs, %d evaluated already, %d to run, %d at a time" % (len(plan["runs"]), len(plan["runs"]) - len(todo),
                                                                    len(todo), a.jobs))
    failed = []

    def go(r):
        if _stopping:
            return
        try:
            say("run %d %s: %s" % (r["index"], r["name"], run_one(plan, a.out, r["index"], t)))
        except RunFailed as e:
            failed.append((r, str(e)))
            say("run %d %s: FAILED: %s" % (r["index"], r["name"], e))
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        list(ex.map(go, todo))
    if _stopping:
        left = [r["name"] for r in plan["runs"] if status(a.out, r, plan) != "evaluated"]
        say("stopped (signal %d): %d runs not done (%s); the same command carries on" % (
            _stopping[0], len(left), ", ".join(left)))
        return 1
    if failed:
        say("%d of %d runs failed:" % (len(failed), len(plan["runs"])))
        for r, e in sorted(failed, key=lambda x: x[0]["index"]):
            say("  %d %s: %s" % (r["index"], r["name"], e))
            for l in _tail(paths(a.out, r["name"])["log"], 4):
                say("      " + l)
        return 1
    say("every run evaluated; next: python3 -m manyadd.sweep collect %s --out %s" % (a.sweep, a.out))
    return 0


def _ranges(idx):
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8' (sbatch --array's syntax)."""
    parts = []
    for _, g in itertools.groupby(enumerate(idx), lambda x: x[1] - x[0]):
        g = [v for _, v in g]
        parts.append(str(g[0]) if len(g) == 1 else "%d-%d" % (g[0], g[-1]))
    return ",".join(parts)


def sbatch_script(a, plan, indices):
    out = os.path.abspath(a.out)
    cpus = a.cpus_per_task or max(max(r["config"]["train"]["threads"], plan["evaluate"].get("threads") or 0)
                                  for r in plan["runs"])
    array = _ranges(indices) + ("%%%d" % a.max_parallel if a.max_parallel else "")
    lines = ["#!/bin/bash",
             "# Written by python3 -m manyadd.sweep slurm: one array task per run of %s (its index)." % os.path.join(
                 out, "plan.json"),
             "# A task trains (or resumes from its checkpoint, bit for bit) and evaluates its run, so a requeued",
             "# or resubmitted task carries on. Resubmit: python3 -m manyadd.sweep slurm %s --out %s" % (
                 shlex.quote(plan["sweep"]), shlex.quote(out)),
             "#SBATCH --job-name=%s" % (a.job_name or plan.get("name") or os.path.basename(out)),
             "#SBATCH --array=%s" % array,
             "#SBATCH --requeue",
             "#SBATCH --open-mode=append",
             "#SBATCH --output=%s" % os.path.join(out, "logs", "slurm-%A_%a.out"),
             "#SBATCH --cpus-per-task=%d" % cpus,
             "#SBATCH --ntasks=1"]
    for opt, v in (("partition", a.partition), ("time", a.time), ("mem", a.mem), ("gpus", a.gpus),
                   ("gres", a.gres)):
        if v:
            lines.append("#SBATCH --%s=%s" % (opt, v))
    lines += ["#SBATCH %s" % x for x in a.sbatch_arg]
    py_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lines += ["set -eu",
              'export PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}' % shlex.quote(py_dir),
              "exec %s -m manyadd.sweep run-one %s --out %s --index \"$SLURM_ARRAY_TASK_ID\" --bin %s%s" % (
                  shlex.quote(a.python), shlex.quote(plan["sweep"]), shlex.quote(out),
                  shlex.quote(os.path.abspath(a.bin)), "" if a.max_runs == MAX_RUNS else " --max-runs %d" % a.max_runs)]
    return "\n".join(lines) + "\n"


def cmd_slurm(a):
    for opt in ("partition", "time", "mem", "gpus", "gres", "job_name"):
        v = getattr(a, opt)
        if v is not None and (not v or re.search(r"\s", v)):
            raise InputError("--%s %r: a value without spaces" % (opt.replace("_", "-"), v))
    if re.search(r"\s", os.path.abspath(a.out)):
        raise InputError("--out %s: Slurm's #SBATCH lines cannot hold a path with spaces" % a.out)
    if a.max_parallel is not None and a.max_parallel < 1:
        raise InputError("--max-parallel must be >= 1")
    if a.cpus_per_task is not None and a.cpus_per_task < 1:
        raise InputError("--cpus-per-task must be >= 1")
    script_path = os.path.join(a.out, "sweep.sbatch")
    if not a.no_submit and shutil.which("sbatch") is None:
        raise InputError("sbatch is not on PATH (no Slurm client here): --no-submit writes the script only")
    plan = ensure_plan(a.sweep, a.out, a.sets, a.replan, a.bin, max_runs=a.max_runs)
    tools(a.bin, family(plan))
    check_output_path(script_path)
    indices = [r["index"] for r in plan["runs"] if a.all or status(a.out, r, plan) != "evaluated"]
    if not indices:
        say("every run is evaluated: nothing to submit (--all submits every run anyway)")
        return 0
    for d in ("runs", "configs", "grids", "logs"):
        _make_dir(os.path.join(a.out, d))
    atomic_write(script_path, sbatch_script(a, plan, indices))
    os.chmod(script_path, 0o755)
    say("wrote %s: %d array tasks (indices %s of plan.json)" % (script_path, len(indices), _ranges(indices)))
    if a.no_submit:
        say("submit it with: sbatch %s" % script_path)
        return 0
    p = subprocess.run(["sbatch", "--parsable", script_path], capture_output=True, text=True)
    if p.returncode != 0:
        say("sweep: sbatch failed (exit %d): %s" % (p.returncode, p.stderr.strip()), file=sys.stderr)
        return 1
    job = p.stdout.strip().split(";")[0]
    say("submitted array job %s; its tasks log to %s; watch: squeue -j %s" % (
        job, os.path.join(a.out, "logs", "slurm-%s_INDEX.out" % job), job))
    say("when it is done: python3 -m manyadd.sweep collect %s --out %s" % (a.sweep, a.out))
    return 0


def _csv(rows):
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _fmt(v):
    if v is None:
        return "NA"
    if isinstance(v, float):
        return "NA" if v != v else "%.6g" % v
    return str(v)


def _make_dir(d):
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise InputError("cannot create the directory %s: %s" % (d, e.strerror or e)) from None


def _collect_dest(a):
    """Where collect writes (--to, default OUT/collect), checked up front: a directory it may write in."""
    dest = os.path.join(a.out, "collect") if a.to is None else a.to
    check_output_dir(dest, "--to" if a.to is not None else "OUT/collect")
    return dest


def cmd_collect(a):
    if not 0 < a.threshold <= 1:
        raise InputError("--threshold must be in (0, 1]")
    plan = ensure_plan(a.sweep, a.out, a.sets, False, a.bin, write=False, max_runs=a.max_runs)
    dest = _collect_dest(a)
    axes = [x["name"] for x in plan["axes"]]
    group_axes = [x for x in axes if x not in plan["median_over"]]
    done, missing = [], []
    for r in plan["runs"]:
        st = status(a.out, r, plan)
        (done if st == "evaluated" else missing).append((r, st))
    if not done:
        say("no run of %s is evaluated yet (%d runs)" % (a.out, len(plan["runs"])))
        return 1
    if family(plan) == "grid-ut":
        return _collect_instances(plan, a.out, dest, done, missing, axes, group_axes)
    long_rows, cols, table, groups = [], [], [], {}
    for r, _ in done:
        p = paths(a.out, r["name"])
        head, rows = grids.read_rows(p["csv"])
        for c in head:
            if c not in cols:
                cols.append(c)
        long_rows += [(r, dict(zip(head, l))) for l in rows]
        cpath = os.path.join(model_dir(a.out, r), "config.json")
        tc = _object(_read_file(cpath, MAX_STATE), cpath).get("train", {})
        tc = tc if isinstance(tc, dict) else {}
        train_n, train_m, task = _int(tc.get("train_n")), _int(tc.get("train_m")), tc.get("task", "addition")
        g = grids.read_grid(p["csv"])
        if not g or all(v is None for v in g.values()):
            raise InputError("%s has no evaluated cell (an accuracy column with a number)" % p["csv"])
        row = grids.table_row(g, a.threshold, (10 if train_n is None else train_n, 10 if train_m is None else train_m))
        table.append((r, row))
        key = tuple(r["axes"][x] for x in group_axes)
        groups.setdefault(key, []).append((r, g, (train_n, train_m), task if isinstance(task, str) else None))
    _make_dir(os.path.join(dest, "median"))  # every file read: now the writing
    head = ["index", "run"] + axes
    atomic_write(os.path.join(dest, "grids.csv"), _csv(
        [head + cols] + [[r["index"], r["name"]] + [r["axes"][x] for x in axes] + [c.get(k, "") for k in cols]
                         for r, c in long_rows]))
    atomic_write(os.path.join(dest, "runs.csv"), _csv(
        [head + ["status"] + list(grids.TABLE_COLUMNS)] +
        [[r["index"], r["name"]] + [r["axes"][x] for x in axes] + ["evaluated"] + [_fmt(v) for v in row]
         for r, row in table] +
        [[r["index"], r["name"]] + [r["axes"][x] for x in axes] + [st] + [""] * len(grids.TABLE_COLUMNS)
         for r, st in missing]))
    pct = int(round(100 * a.threshold))
    md = [grids.table_header(pct, "run")] + ["| %s | %s |" % (r["name"], grids.format_row(row)) for r, row in table]
    notes = []
    for key, members in groups.items():
        gname = re.sub(r"[^A-Za-z0-9._+=-]", "_", "-".join(v.replace(",", "-") for v in key)) or "all"
        names = [r["name"] for r, _, _, _ in members]
        rows = [row for r, row in table if r["name"] in names]
        med = [grids.median([x[i] for x in rows]) for i in range(len(grids.TABLE_COLUMNS))]
        md.append("| **%s, median of %d** | %s |" % (gname, len(rows), grids.format_row(med)))
        cells = sorted(set().union(*[set(g) for _, g, _, _ in members]))
        vals = {c: [g.get(c) for _, g, _, _ in members] for c in cells}
        mcsv = os.path.join(dest, "median", gname + ".csv")
        atomic_write(mcsv, "n,m,runs,accuracy\n" + "".join(  # summarize.py's median_grid.csv: NA if any run's is
            "%d,%d,%d,%s\n" % (n, m, len(members), "NA" if None in v else "%.4f" % grids.median(v))
            for (n, m), v in sorted(vals.items())))
        try:
            from . import figures
            train = members[0][2] if None not in members[0][2] else None
            task = members[0][3] if members[0][3] in figures.TASKS else None
            if task in figures.ONE_AXIS_TASKS:
                raise InputError("a one-axis grid (%s): no heatmap" % task)
            fig = figures.plot_grid(mcsv, train=train, task=task, title="%s: median of %d runs\n(%s)" % (
                gname, len(members), " ".join(names)))
            figures._save(fig, os.path.join(dest, "median", gname + ".png"), 150)
        except InputError as e:
            notes.append("median/%s.png not drawn: %s" % (gname, e))
    if missing:
        md.append("\nNot evaluated yet: " + ", ".join("%s (%s)" % (r["name"], st) for r, st in missing))
    atomic_write(os.path.join(dest, "table.md"), "\n".join(md) + "\n")
    say("\n".join(md))
    for n in notes:
        say("sweep: " + n, file=sys.stderr)
    say("wrote %s: grids.csv (every cell of %d runs), runs.csv, table.md, median/ (%d groups)" % (
        dest, len(done), len(groups)))
    if missing:
        say("%d of %d runs are not evaluated: %s" % (len(missing), len(plan["runs"]), ", ".join(
            r["name"] for r, _ in missing)))
        return 1
    return 0


def _collect_instances(plan, out, dest, done, missing, axes, group_axes):
    """collect for grid-ut: every run's rows (evaluate_grid's CSV: one per instance) into instances.csv;
    runs.csv and table.md: sequence / character accuracy per instance and run, and per group the median
    over its runs and the best run's value, cell by cell."""
    insts, acc, long_rows, cols = [], {}, [], []
    for r, _ in done:
        path = paths(out, r["name"])["csv"]
        head, rows = grids.read_rows(path)
        recs = [dict(zip(head, l)) for l in rows]
        for rec in recs:
            try:
                sa, ca = float(rec["seq_acc"]), float(rec["char_acc"])
                if not (0 <= sa <= 1 and 0 <= ca <= 1) or not rec["instance"]:
                    raise ValueError
                acc.setdefault(r["name"], {})[rec["instance"]] = (sa, ca)
            except (KeyError, TypeError, ValueError):
                raise InputError("%s is not evaluate_grid's CSV (instance, seq_acc, char_acc per row)" % path) from None
            if rec["instance"] not in insts:
                insts.append(rec["instance"])
            cols += [c for c in rec if c not in cols]
            long_rows.append((r, rec))
    _make_dir(dest)
    head = ["index", "run"] + axes
    atomic_write(os.path.join(dest, "instances.csv"), _csv(
        [head + cols] + [[r["index"], r["name"]] + [r["axes"][x] for x in axes] + [c.get(k, "") for k in cols]
                         for r, c in long_rows]))
    acc_cols = [c for i in insts for c in ("seq:" + i, "char:" + i)]
    atomic_write(os.path.join(dest, "runs.csv"), _csv(
        [head + ["status"] + acc_cols] +
        [[r["index"], r["name"]] + [r["axes"][x] for x in axes] + ["evaluated"] +
         [_fmt(acc[r["name"]][i][k]) if i in acc[r["name"]] else "NA" for i in insts for k in (0, 1)]
         for r, _ in done] +
        [[r["index"], r["name"]] + [r["axes"][x] for x in axes] + [st] + [""] * len(acc_cols) for r, st in missing]))

    def cell(v):
        return "—" if v is None else "%.3f / %.4f" % v
    md = ["Sequence / character accuracy per instance.", "",
          "| run | " + " | ".join(insts) + " |", "|---|" + "---|" * len(insts)]
    md += ["| %s | %s |" % (r["name"], " | ".join(cell(acc[r["name"]].get(i)) for i in insts)) for r, _ in done]
    groups = {}
    for r, _ in done:
        groups.setdefault(tuple(r["axes"][x] for x in group_axes), []).append(r["name"])
    for key, names in groups.items():
        gname = "-".join(key) or "all"
        for what, f in (("median", grids.median), ("best", max)):
            vals = []
            for i in insts:
                have = [acc[n][i] for n in names if i in acc[n]]
                vals.append(None if len(have) < len(names) else (f([v[0] for v in have]), f([v[1] for v in have])))
            md.append("| **%s, %s of %d** | %s |" % (gname, what, len(names), " | ".join(cell(v) for v in vals)))
    if missing:
        md.append("\nNot evaluated yet: " + ", ".join("%s (%s)" % (r["name"], st) for r, st in missing))
    md.append("\nbest: the largest value over the group's runs, cell by cell (sequence and character accuracy "
              "apart: it may mix runs); the paper reports its best seed of 10.")
    atomic_write(os.path.join(dest, "table.md"), "\n".join(md) + "\n")
    say("\n".join(md))
    say("wrote %s: instances.csv (every instance of %d runs), runs.csv, table.md (%d groups)" % (
        dest, len(done), len(groups)))
    if missing:
        say("%d of %d runs are not evaluated: %s" % (len(missing), len(plan["runs"]), ", ".join(
            r["name"] for r, _ in missing)))
        return 1
    return 0


def check_options(a):
    """The options every command takes, checked before anything is read or run: the paths (not empty,
    within the file system's limits; --out writable, or for collect readable with --to writable) and
    --max-runs."""
    if a.max_runs < 1:
        raise InputError("--max-runs must be >= 1")
    if not a.sweep:
        raise InputError("the description's path is empty")
    check_path_length(a.sweep, "the description")
    if not a.bin:
        raise InputError("--bin is empty: give the directory of the tools")
    check_path_length(a.bin, "--bin")
    if a.cmd == "collect":
        _check_out(a.out, write=False)
        _collect_dest(a)
    else:
        _check_out(a.out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m manyadd.sweep", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, plan=True, replan=True):
        p.add_argument("sweep", help="the description (JSON, or TOML for .toml)")
        p.add_argument("--out", required=True, help="the sweep's directory (plan.json, runs/, grids/, logs/)")
        p.add_argument("--bin", default=default_bin(), help="directory of train and evaluate (default: "
                                                             "$MANYADD_BIN or build/learn)")
        if plan:
            p.add_argument("--set", dest="sets", action="append", type=_parse_set, metavar="KEY=VALUE",
                           help="change the description for this OUT (model.F, train.F, evaluate.K, train_args; "
                                "VALUE is JSON or a bare string); the plan remembers it")
        if replan:
            p.add_argument("--replan", action="store_true", help="write a new plan for a changed description")
        p.add_argument("--max-runs", type=int, default=MAX_RUNS, metavar="N",
                       help="refuse a description whose axes give more runs than this, counted before any run is "
                            "built (default %d; the same N for every command on that OUT)" % MAX_RUNS)
    common(sub.add_parser("plan", help="write or read OUT/plan.json; list the runs and their status"))
    lo = sub.add_parser("local", help="run every run not evaluated yet here, -j at a time")
    common(lo)
    lo.add_argument("-j", "--jobs", type=int, default=1, help="runs at a time (default 1)")
    sl = sub.add_parser("slurm", help="write OUT/sweep.sbatch (an array task per run) and submit it")
    common(sl)
    sl.add_argument("--partition")
    sl.add_argument("--time", help="each task's time limit (sbatch --time; a task that runs out is requeued "
                                   "only by hand: resubmit, it resumes)")
    sl.add_argument("--gpus", help="sbatch --gpus per task (e.g. 1; add --device cuda to train_args and "
                                   "evaluate.args)")
    sl.add_argument("--gres", help="sbatch --gres (e.g. gpu:1)")
    sl.add_argument("--mem", help="sbatch --mem per task")
    sl.add_argument("--cpus-per-task", type=int, help="default: the largest train.threads / evaluate.threads")
    sl.add_argument("--max-parallel", type=int, help="at most this many tasks at once (--array=...%%P)")
    sl.add_argument("--job-name", help="default: the description's name, else OUT's")
    sl.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                    help="another #SBATCH line's option (e.g. --account=X), repeatable")
    sl.add_argument("--python", default=sys.executable, help="the interpreter the tasks run (default: this one)")
    sl.add_argument("--all", action="store_true", help="a task for every run (default: the runs not evaluated)")
    sl.add_argument("--no-submit", action="store_true", help="write the script only")
    co = sub.add_parser("collect", help="every grid into OUT/collect/: grids.csv, runs.csv, table.md, median/")
    common(co, replan=False)
    co.add_argument("--threshold", type=float, default=0.9, help="the cells-at-threshold metric (default 0.9)")
    co.add_argument("--to", help="directory to write (default OUT/collect)")
    ro = sub.add_parser("run-one", help="train (or resume) and evaluate one run of OUT/plan.json")
    common(ro, plan=False)
    ro.add_argument("--index", type=int, required=True)
    a = ap.parse_args(argv)
    a.sets, a.replan = getattr(a, "sets", None), getattr(a, "replan", False)
    if a.cmd in ("local", "run-one"):
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    try:
        check_options(a)
        return {"plan": cmd_plan, "local": cmd_local, "slurm": cmd_slurm, "collect": cmd_collect,
                "run-one": cmd_run_one}[a.cmd](a)
    except InputError as e:
        print("sweep: %s" % e, file=sys.stderr)
        return 2
    except MemoryError:  # a --max-runs raised beyond what this machine holds: nothing was written yet
        print("sweep: out of memory: the input asks for more memory than this machine can give", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
