#!/usr/bin/env python3
"""The table of the reduced CPU runs (README.md here): for every configuration run_cpu.sh ran, from its
run's grid.csv (evaluate's, through run_config.py) and log.csv; standard library only.

usage: table.py OUT [--threshold 0.9]     (OUT: run_cpu.sh's output root)

Columns: the configuration; in-distribution mean and worst cell (TA(n, m), n <= 5, m <= 5: the
training region SA(5, 5)); the mean over the other cells of the grid (n up to 10, m up to 10); cells at
or above the threshold; the longest operand length at m = 2 and the most operands at n = 1 with every
smaller cell at or above it (manyadd.grids' metrics, written once for every study); the
training loss of the last log row; the wall time of training and evaluation (run.json).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
from manyadd import grids  # noqa: E402

ORDER = ["coupled", "coupled-noscratch", "nope", "nope-noscratch", "fire", "fire-noscratch", "fire-min",
         "fire-min-noscratch", "rope", "rope-noscratch"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--threshold", type=float, default=0.9)
    a = p.parse_args()
    names = [n for n in ORDER if os.path.isdir(os.path.join(a.out, n))]
    names += sorted(n for n in os.listdir(a.out) if os.path.isdir(os.path.join(a.out, n)) and n not in names)
    pct = int(round(100 * a.threshold))
    print("| configuration | task | pos_mode | in-distribution mean | worst in-distribution cell | mean outside "
          "(to 10 x 10) | cells >= %d%% | longest n at m = 2 | most m at n = 1 | final loss | train s | evaluate s |"
          % pct)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in names:
        d = os.path.join(a.out, n, "s1_d1")
        gp = os.path.join(d, "grid.csv")
        if not os.path.isfile(gp):
            print("| %s | not evaluated |||||||||||" % n)
            continue
        g = grids.read_grid(gp)
        ind = [v for (i, j), v in g.items() if i <= 5 and j <= 5]
        out = [v for (i, j), v in g.items() if (i > 5 or j > 5) and v is not None]
        mm = grids.metrics(g, a.threshold)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(d, "log.csv")) as f:
            loss = f.read().strip().splitlines()[-1].split(",")[1]
        with open(os.path.join(d, "run.json")) as f:
            run = json.load(f)
        mode = cfg["model"]["pos_mode"] + (" (%s)" % cfg["model"]["fire_threshold"] if "fire_threshold" in cfg["model"] else "")
        print("| %s | %s | %s | %.3f | %.2f | %.3f | %d/%d | %d | %d | %.2g | %.0f | %.0f |" % (
            n, cfg["train"]["task"], mode, sum(ind) / len(ind), min(ind), sum(out) / len(out), mm["cells_at_threshold"],
            mm["cells"], mm["longest_operand_at_m2"], mm["most_operands_at_n1"], float(loss), run.get("train_seconds", 0),
            run.get("eval_seconds", 0)))


if __name__ == "__main__":
    main()
