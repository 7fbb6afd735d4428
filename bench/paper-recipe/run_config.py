#!/usr/bin/env python3
"""Train one configuration of the paper (learn/configs/paper/*.json) for a list of (seed, data seed)
runs, in resumable pieces, and evaluate each finished run on the grid, also in pieces; standard
library only.

usage: run_config.py --config learn/configs/paper/fig12-d64.json --runs 0:0,0:1,1:0 --out ROOT
                     [--bin build/learn] [--device cuda] [--eval-device DEV] [--parallel N]
                     [--piece-seconds 500] [--budget-seconds S] [--reserve-seconds 30]
                     [--n-max 30] [--m-max 30] [--samples 1000] [--train-arg=--flag ...]

Each run lives in ROOT/<config name>/s<seed>_d<data seed>/ and holds what `train` writes (config.json,
model.safetensors, checkpoint.safetensors, log.csv, eval.csv), train.log and evaluate.log (the tools'
stderr), grid_rows/ (one evaluate call per operand length n), grid.csv and grid.png (the whole grid,
once every row is done) and run.json: the commands, their wall times and exit codes, the device, the
GPU name (nvidia-smi, "none" without one) and the commit.

Pieces: every `train` call gets --max-seconds min(--piece-seconds, time left), so no call outlives a
machine's per-command limit; the next call resumes (--resume, bit for bit) wherever the last one
stopped. Evaluation goes one row (one n, every m) per call, for the same reason. With --budget-seconds
the driver starts no piece that cannot end --reserve-seconds before the budget (checkpointing and the
tools' start-up take that), and a later call of the same command line carries on. Runs go --parallel
at a time: several small models share one GPU.

Exit codes: 0 every run trained and evaluated; 1 some run left unfinished (the budget ran out) or a
tool call failed (its exit code and log are in run.json); 2 bad usage.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import threading
import time


def gpu_name():
    if shutil.which("nvidia-smi") is None:
        return "none"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        names = [s.strip() for s in out.stdout.splitlines() if s.strip()]
        return ", ".join(names) if out.returncode == 0 and names else "none"
    except (OSError, subprocess.SubprocessError):
        return "none"


def git_commit(repo):
    try:
        out = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def parse_runs(text):
    runs = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError("--runs takes SEED:DATA_SEED pairs separated by commas, e.g. 0:0,0:1 (got %r)" % item)
        runs.append((int(parts[0]), int(parts[1])))
    if len(set(runs)) != len(runs):
        raise ValueError("--runs lists a pair twice")
    return runs


def read_json(path):
    with open(path) as f:
        return json.load(f)


def write_json(path, obj):  # write then rename: a reader never sees half a file
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


class Driver:
    def __init__(self, args):
        self.a = args
        self.train = os.path.join(args.bin, "train")
        self.evaluate = os.path.join(args.bin, "evaluate")
        self.grid_png = os.path.join(args.bin, "grid_png")
        for exe in (self.train, self.evaluate):
            if not os.access(exe, os.X_OK):
                raise ValueError("no executable %s (build it, or pass --bin)" % exe)
        self.name = os.path.splitext(os.path.basename(args.config))[0]
        self.root = os.path.join(args.out, self.name)
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget_seconds if args.budget_seconds > 0 else None
        self.gpu = gpu_name()
        self.commit = git_commit(os.path.dirname(os.path.abspath(__file__)))
        self.lock = threading.Lock()

    def left(self):
        """Seconds a new piece may use, or None without a budget."""
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic() - self.a.reserve_seconds

    def call(self, run, kind, cmd, log):
        t = time.monotonic()
        with open(log, "a") as f:
            f.write("$ %s\n" % " ".join(cmd))
            f.flush()
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
        secs = time.monotonic() - t
        run["calls"].append({"kind": kind, "cmd": cmd, "seconds": round(secs, 2), "rc": rc})
        return rc

    def train_state(self, d):
        cfg = os.path.join(d, "config.json")
        if not os.path.exists(os.path.join(d, "checkpoint.safetensors")) or not os.path.exists(cfg):
            return 0, None
        c = read_json(cfg)
        return int(c.get("step", 0)), int(c["train"]["steps"])

    def one(self, seed, data_seed):
        a = self.a
        d = os.path.join(self.root, "s%d_d%d" % (seed, data_seed))
        os.makedirs(d, exist_ok=True)
        rj = os.path.join(d, "run.json")
        run = read_json(rj) if os.path.exists(rj) else {
            "config": os.path.abspath(a.config), "config_name": self.name, "seed": seed, "data_seed": data_seed,
            "calls": []}
        run.update({"device": a.device, "eval_device": a.eval_device or a.device, "gpu": self.gpu,
                    "commit": self.commit, "train_args": a.train_arg})
        ok = True

        def save():
            run["train_seconds"] = round(sum(c["seconds"] for c in run["calls"] if c["kind"] == "train"), 2)
            run["eval_seconds"] = round(sum(c["seconds"] for c in run["calls"] if c["kind"] == "evaluate"), 2)
            write_json(rj, run)

        # Training, piece by piece.
        while True:
            step, steps = self.train_state(d)
            if steps is not None and step >= steps:
                break
            left = self.left()
            if left is not None and (left < a.min_piece_seconds or left <= 0):
                break
            piece = a.piece_seconds if left is None else min(a.piece_seconds, left)  # > 0: 0 would be no limit
            if steps is None:
                cmd = [self.train, "--config", a.config, "--seed", str(seed), "--data-seed", str(data_seed),
                       "--out", d]
            else:
                cmd = [self.train, "--out", d, "--resume"]
            cmd += ["--device", a.device, "--max-seconds", repr(float(piece))] + a.train_arg
            rc = self.call(run, "train", cmd, os.path.join(d, "train.log"))
            save()
            if rc != 0:
                ok = False
                break
            if self.train_state(d)[0] <= step:  # e.g. a --stop-after in --train-arg: never loop forever
                run["calls"][-1]["error"] = "no progress: the call ended at step %d again" % step
                ok = False
                break
        step, steps = self.train_state(d)
        run["steps"], run["finished"] = step, steps is not None and step >= steps
        # Evaluation, one operand length n per call.
        rows = os.path.join(d, "grid_rows")
        os.makedirs(rows, exist_ok=True)
        while ok and run["finished"]:
            todo = [n for n in range(1, a.n_max + 1) if not os.path.exists(os.path.join(rows, "n%d.csv" % n))]
            if not todo:
                break
            left = self.left()
            if left is not None and (left < a.min_piece_seconds or left <= 0):
                break
            n = todo[0]
            part = os.path.join(rows, "n%d.part.csv" % n)
            cmd = [self.evaluate, "--model", d, "--n-min", str(n), "--n-max", str(n), "--m-min", "2", "--m-max",
                   str(a.m_max), "--samples", str(a.samples), "--device", a.eval_device or a.device, "--csv", part,
                   "--png", os.path.join(rows, "n%d.png" % n), "--json", os.path.join(rows, "n%d.json" % n)]
            rc = self.call(run, "evaluate", cmd, os.path.join(d, "evaluate.log"))
            save()
            if rc != 0:
                ok = False
                break
            os.replace(part, os.path.join(rows, "n%d.csv" % n))
        done = all(os.path.exists(os.path.join(rows, "n%d.csv" % n)) for n in range(1, a.n_max + 1))
        if ok and run["finished"] and done:
            lines = ["n,m,samples,exact,accuracy"]
            for n in range(1, a.n_max + 1):
                with open(os.path.join(rows, "n%d.csv" % n)) as f:
                    lines += [l.strip() for l in f.read().splitlines()[1:] if l.strip()]
            with open(os.path.join(d, "grid.csv"), "w") as f:
                f.write("\n".join(lines) + "\n")
            if os.access(self.grid_png, os.X_OK):
                tc = read_json(os.path.join(d, "config.json"))["train"]
                self.call(run, "grid_png", [self.grid_png, "--csv", os.path.join(d, "grid.csv"), "--png",
                                            os.path.join(d, "grid.png"), "--train-n", str(tc["train_n"]),
                                            "--train-m", str(tc["train_m"])], os.path.join(d, "evaluate.log"))
        run["evaluated"] = ok and run["finished"] and done
        save()
        with self.lock:
            print("%s s%d_d%d: step %d/%s, %s, train %.0f s, eval %.0f s" % (
                self.name, seed, data_seed, step, steps, "evaluated" if run["evaluated"] else
                ("FAILED (see run.json)" if not ok else "unfinished (run again to continue)"),
                run["train_seconds"], run["eval_seconds"]), flush=True)
        return run["evaluated"]

    def go(self, runs):
        os.makedirs(self.root, exist_ok=True)
        print("%s: %d runs, %d at a time, device %s, GPU %s" % (self.name, len(runs), self.a.parallel,
                                                              self.a.device, self.gpu), flush=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.a.parallel) as ex:
            results = list(ex.map(lambda r: self.one(*r), runs))
        print("%s: %d of %d runs evaluated in %.0f s" % (self.name, sum(results), len(runs),
                                                        time.monotonic() - self.t0), flush=True)
        return all(results)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", required=True, help="a configuration file (learn/configs/paper/*.json)")
    p.add_argument("--runs", required=True, help="SEED:DATA_SEED pairs, comma separated (e.g. 0:0,0:1,1:0,1:1)")
    p.add_argument("--out", required=True, help="root directory of the runs")
    p.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build",
                                                 "learn"), help="directory of train, evaluate, grid_png")
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"], help="train --device (default cuda)")
    p.add_argument("--eval-device", default=None, choices=["cpu", "cuda"], help="evaluate --device (default: --device)")
    p.add_argument("--parallel", type=int, default=1, help="runs at a time (default 1)")
    p.add_argument("--piece-seconds", type=float, default=500, help="train --max-seconds per call (default 500)")
    p.add_argument("--budget-seconds", type=float, default=0, help="stop starting pieces after this; 0 = none")
    p.add_argument("--reserve-seconds", type=float, default=30,
                   help="kept free at the end of the budget for checkpoints and start-up (default 30)")
    p.add_argument("--min-piece-seconds", type=float, default=20, help="no piece shorter than this (default 20)")
    p.add_argument("--n-max", type=int, default=30, help="grid: operand lengths 1..N (default 30)")
    p.add_argument("--m-max", type=int, default=30, help="grid: operand counts 2..M (default 30)")
    p.add_argument("--samples", type=int, default=1000, help="samples per cell (default 1000)")
    p.add_argument("--train-arg", action="append", default=[],
                   help="an extra train flag, repeated on every call (e.g. --train-arg=--steps=100)")
    a = p.parse_args()
    try:
        if a.parallel < 1 or a.piece_seconds <= 0 or a.n_max < 1 or a.m_max < 2 or a.samples < 1:
            raise ValueError("need --parallel >= 1, --piece-seconds > 0, --n-max >= 1, --m-max >= 2, --samples >= 1")
        if not os.path.isfile(a.config):
            raise ValueError("no configuration file %s" % a.config)
        runs = parse_runs(a.runs)
        drv = Driver(a)
    except ValueError as e:
        print("run_config.py: %s" % e, file=sys.stderr)
        return 2
    return 0 if drv.go(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
