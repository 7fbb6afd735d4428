#!/usr/bin/env python3
"""The median heatmap of one configuration over its evaluated runs, and one line comparing it with the
paper's figure; standard library only.

usage: summarize.py ROOT/<config name> [--bin build/learn] [--threshold 0.9]

Reads every run directory (s<seed>_d<data seed>/) whose run.json says it was evaluated, takes its
grid.csv, and writes into the configuration's directory (a task other than addition, config.json's
train.task: median_grid.csv with the median of both of its metrics, the whole response and the answer
tokens, summary.json and summary.txt with its own comparison, see task_metrics(); no PNG):
  median_grid.csv   n,m,runs,accuracy: the median over the runs per cell (the paper's heatmaps are
                    medians over seeds x data seeds; with an even count, the mean of the middle two)
  median_grid.png   that grid drawn by grid_png (the project's heatmap, as evaluate draws it), or by
                    matplotlib when grid_png is not there and matplotlib imports; else none (said so)
  summary.json      per run and for the median: cells >= threshold of all cells, the worst cell, the
                    longest operand length at m = 2 and the most operands at n = 1 (manyadd.grids.metrics)
  summary.txt       the comparison line, also printed
Exit codes: 0 written; 1 no evaluated run; 2 bad usage.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from manyadd.grids import median, metrics, read_grid  # noqa: E402  (the metrics, written once)

# What the paper says about each configuration in words (its heatmaps carry the rest; Sec. 4.3 and
# Appendix C of the paper).
PAPER = {
    "fig1-6l8h": "Figure 1 (median of 8): every cell >= 67.8% (Sec. 4.3)",
    "fig10-1l2h": "Figure 10 (median of 6): generalizes in operand count, fails at once for longer operands (Sec. 4.3)",
    "fig10-1l4h": "Figure 10 (median of 6): 'surprisingly high accuracy, even outperforming' the 6L8H baseline (Sec. 4.3)",
    "fig10-2l2h": "Figure 10 (median of 6): >= 90.0% on all 870 cells (Sec. 4.3)",
    "fig12-d64": "Figure 12 (median of 8): the weakest width; no numbers in the text, compare the heatmaps",
    "fig12-d128": "Figure 12 (median of 8): between d64 and d256; no numbers in the text, compare the heatmaps",
    "fig12-d256": "Figure 12 (median of 8): no numbers in the text, compare the heatmaps",
    "fig12-d512": "Figure 12 (median of 8): the strongest width; no numbers in the text, compare the heatmaps",
    "fig3-parity": "Figure 3 (answer token, teacher-forced): near-perfect up to 100 bits, trained on 1-20 (Sec. 3.2)",
    "fig3-parity-noscratch": "not in Figure 3 (its no-scratchpad curves, NoPE, RoPE, FIRE, drop to 50% just past "
                             "the training lengths; with the scratchpad NoPE and FIRE hold up to ~35 bits, Sec. 3.2)",
    # The reduced CPU studies (bench/results/parity, bench/results/multiplication): the same figures'
    # claims, for models far smaller than the paper's.
    "cpu-parity": "Figure 3, scratchpad + coupling (6L8H in the paper; this is a reduced model): near-perfect "
                  "up to 100 bits (Sec. 3.2)",
    "cpu-parity-nope": "Figure 3, NoPE + scratchpad (6L8H in the paper; reduced here): strong up to ~35 bits",
    "cpu-parity-noscratch": "not in Figure 3 (coupled parity without scratchpad; its no-scratchpad curves, NoPE, "
                            "RoPE, FIRE, drop to 50% just past the training lengths, Sec. 3.2)",
    "cpu-parity-noscratch-nope": "Figure 3, NoPE without scratchpad (reduced here): ~50% just past the training "
                                 "lengths (Sec. 3.2)",
    "cpu-mul-sm44": "Figure 9, scratchpad + tri-level coupling (6L8H on SM(10, 10) in the paper; reduced here: "
                    "SM(4, 4)): >= 78.55% on every cell up to 20 x 15 digits, i.e. 2 x and 1.5 x the training "
                    "lengths (8 x 6 for SM(4, 4)) (Sec. 1, Figure 9)",
    "cpu-mul-sm44-noscratch": "Figure 9, coupling without scratchpad (reduced here): fails even in distribution, "
                              "weak generalization when one operand is short (Sec. 5.3)",
    "fig9-multiplication": "Figure 9 (median of 4): >= 78.55% on every cell up to 20 x 15 digits, trained on 10 x 10 "
                           "(Sec. 5.3)",
    "fig9-multiplication-noscratch": "Figure 9, coupling without scratchpad: fails even in distribution (Sec. 5.3)",
}
# Columns of every grid.csv row besides n, m: the whole response's exact match, and (every task but
# addition) the final answer's tokens alone (parity's Figure 3 metric).
METRICS = ("accuracy", "answer_accuracy")


def reach(tc):
    """Figure 9's claim reaches twice the training length of A and 1.5 times that of B (SM(10, 10) to
    20 x 15 digits); for another training set SM(n, m), the same ratios: (2 n, floor(1.5 m))."""
    n, m = ((tc or {}).get("train_n"), (tc or {}).get("train_m"))
    return (20, 15) if not isinstance(n, int) or not isinstance(m, int) else (2 * n, (3 * m) // 2)


def task_metrics(grid, task, thr, within=(20, 15)):
    """The other tasks' comparison with their figure: parity, the longest query length n such that every
    evaluated length up to it is >= thr; multiplication, the worst cell with n <= within[0], m <= within[1]
    (Figure 9's claim: 20 x 15, see reach()); and, for both, cells >= thr and the worst cell."""
    vals = [a for a in grid.values() if a is not None]
    out = {"cells_at_threshold": sum(a >= thr for a in vals), "cells": len(vals), "worst_cell": min(vals)}
    if task.startswith("parity"):
        longest = 0
        for n, _ in sorted(grid):
            if grid[(n, 1)] is None or grid[(n, 1)] < thr:
                break
            longest = n
        out["longest_query_at_threshold"] = longest
    elif task.startswith("multiplication"):
        inner = [a for (n, m), a in grid.items() if n <= within[0] and m <= within[1]]
        out["reach"] = list(within)
        out["worst_cell_in_reach"] = None if not inner or None in inner else min(inner)
    return out


def task_line(name, runs, task, med, thr, within=(20, 15)):
    pct = int(round(100 * thr))
    parts = []
    for col, what in (("accuracy", "whole response"), ("answer_accuracy", "answer tokens")):
        if med.get(col) is None:
            continue
        mm = task_metrics(med[col], task, thr, within)
        words = "%s: %d/%d cells >= %d%%, worst %.1f%%" % (what, mm["cells_at_threshold"], mm["cells"], pct,
                                                          100 * mm["worst_cell"])
        if "longest_query_at_threshold" in mm:
            words += ", every length up to %d bits >= %d%%" % (mm["longest_query_at_threshold"], pct)
        if mm.get("worst_cell_in_reach") is not None:
            words += ", worst cell up to %d x %d digits %.1f%%" % (within[0], within[1], 100 * mm["worst_cell_in_reach"])
        parts.append(words)
    return "%s (%s), median of %d runs (%s): %s | paper: %s" % (
        name, task, len(runs), " ".join(r for r, _, _ in runs), "; ".join(parts),
        PAPER.get(name, "no figure of the paper for this configuration"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config_dir", help="ROOT/<config name> as run_config.py writes it")
    p.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build",
                                                 "learn"), help="directory of grid_png")
    p.add_argument("--threshold", type=float, default=0.9, help="exact-match threshold (default 0.9)")
    a = p.parse_args()
    d = a.config_dir.rstrip("/")
    if not os.path.isdir(d):
        print("summarize.py: no directory %s" % d, file=sys.stderr)
        return 2
    name = os.path.basename(d)
    runs = []
    for r in sorted(os.listdir(d)):
        rj = os.path.join(d, r, "run.json")
        if os.path.isfile(rj):
            with open(rj) as f:
                info = json.load(f)
            if info.get("evaluated"):
                runs.append((r, info, read_grid(os.path.join(d, r, "grid.csv"))))
    if not runs:
        print("summarize.py: no evaluated run in %s" % d, file=sys.stderr)
        return 1
    cells = sorted(runs[0][2])
    for r, _, g in runs:
        if sorted(g) != cells:
            print("summarize.py: %s has another grid than %s" % (r, runs[0][0]), file=sys.stderr)
            return 2
    med = {}
    for c in cells:
        vals = [g[c] for _, _, g in runs if g[c] is not None]
        med[c] = median(vals) if len(vals) == len(runs) else None
    tc = None
    try:
        with open(os.path.join(d, runs[0][0], "config.json")) as f:
            tc = json.load(f)["train"]
    except (OSError, KeyError, ValueError):
        pass
    task = (tc or {}).get("task", "addition")
    csv = os.path.join(d, "median_grid.csv")
    if task != "addition":  # the median of both metrics; the TA heatmap and metrics below are addition's
        meds = {}
        for col in METRICS:
            gs = [read_grid(os.path.join(d, r, "grid.csv"), col) for r, _, _ in runs]
            if any(g is None for g in gs):
                continue
            meds[col] = {c: (median([g[c] for g in gs]) if all(g[c] is not None for g in gs) else None) for c in cells}
        cols = [c for c in METRICS if c in meds]
        fmt_v = lambda v: "NA" if v is None else "%.4f" % v
        rows = ["n,m,runs," + ",".join(cols)] + ["%d,%d,%d,%s" % (n, m, len(runs), ",".join(
            fmt_v(meds[c][(n, m)]) for c in cols)) for n, m in cells]
        with open(csv, "w") as f:
            f.write("\n".join(rows) + "\n")
        within = reach(tc)
        line = task_line(name, runs, task, meds, a.threshold, within)
        with open(os.path.join(d, "summary.json"), "w") as f:
            json.dump({"config": name, "task": task, "threshold": a.threshold,
                       "median": {c: task_metrics(meds[c], task, a.threshold, within) for c in cols},
                       "runs": {r: dict(seed=i["seed"], data_seed=i["data_seed"], gpu=i.get("gpu"),
                                        **{c: task_metrics(read_grid(os.path.join(d, r, "grid.csv"), c), task,
                                                           a.threshold, within) for c in cols}) for r, i, _ in runs},
                       "png": "none (the runs' grid_rows/*.png are evaluate's)", "line": line}, f, indent=2)
            f.write("\n")
        with open(os.path.join(d, "summary.txt"), "w") as f:
            f.write(line + "\n")
        print(line)
        print("median grid: %s" % csv)
        return 0
    lines = ["n,m,runs,accuracy"] + ["%d,%d,%d,%s" % (n, m, len(runs), "NA" if med[(n, m)] is None else
                                                     "%.4f" % med[(n, m)]) for n, m in cells]
    with open(csv, "w") as f:
        f.write("\n".join(lines) + "\n")
    png = os.path.join(d, "median_grid.png")
    grid_png = os.path.join(a.bin, "grid_png")
    how = "none (neither grid_png nor matplotlib)"
    if os.access(grid_png, os.X_OK):
        cmd = [grid_png, "--csv", csv, "--png", png]
        if tc:
            cmd += ["--train-n", str(tc["train_n"]), "--train-m", str(tc["train_m"])]
        if subprocess.run(cmd, capture_output=True).returncode == 0:
            how = "grid_png"
    else:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            ns = sorted({n for n, _ in cells})
            ms = sorted({m for _, m in cells})
            img = [[float("nan") if med[(n, m)] is None else med[(n, m)] for m in ms] for n in ns]
            fig, ax = plt.subplots(figsize=(6, 6))
            ax.imshow(img, cmap="RdBu", vmin=0, vmax=1, extent=(ms[0] - .5, ms[-1] + .5, ns[-1] + .5, ns[0] - .5))
            ax.set_xlabel("number of operands")
            ax.set_ylabel("length of each operand")
            ax.set_title("%s: median of %d runs" % (name, len(runs)))
            fig.savefig(png, dpi=100)
            how = "matplotlib"
        except ImportError:
            pass
    mm = metrics(med, a.threshold)
    per_run = {r: dict(metrics(g, a.threshold), seed=i["seed"], data_seed=i["data_seed"],
                       train_seconds=i.get("train_seconds"), eval_seconds=i.get("eval_seconds"), gpu=i.get("gpu"))
               for r, i, g in runs}
    pct = int(round(100 * a.threshold))
    line = ("%s, median of %d runs (%s): %d/%d cells >= %d%%, worst cell %.1f%%, longest operand at m = 2: %d, "
            "most operands at n = 1: %d | paper: %s" % (
                name, len(runs), " ".join(r for r, _, _ in runs), mm["cells_at_threshold"], mm["cells"], pct,
                100 * mm["worst_cell"], mm["longest_operand_at_m2"], mm["most_operands_at_n1"],
                PAPER.get(name, "no figure of the paper for this configuration")))
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"config": name, "threshold": a.threshold, "median": mm, "runs": per_run, "png": how,
                   "line": line}, f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "summary.txt"), "w") as f:
        f.write(line + "\n")
    print(line)
    print("median heatmap: %s, png: %s" % (csv, how if how.startswith("none") else png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
