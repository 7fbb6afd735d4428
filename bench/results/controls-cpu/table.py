#!/usr/bin/env python3
"""The table of the controlled runs (README.md here): one row per model from its grid CSV
(evaluate's, 30 x 29 cells), then the median of each scale's seeds; standard library only.

usage: table.py GRID_DIR [--threshold 0.9]     (GRID_DIR: the grids/ folder of commands.sh, NAME.csv)

Columns: in-distribution mean and worst cell (TA(n, m), n <= 10, 2 <= m <= 10: the training region
SA(10, 10)); the mean over the 870 cells; cells at or above the threshold; the longest operand length at
m = 2 and the most operands at n = 1 with every smaller cell at or above it (bench/paper-recipe/
summarize.py's metrics, imported from there).
"""
import argparse
import importlib.util
import os

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("summarize", os.path.join(_here, "..", "..", "paper-recipe", "summarize.py"))
summarize = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(summarize)


def row(grid, thr):
    m = summarize.metrics(grid, thr)
    ind = [a for (n, mm), a in grid.items() if n <= 10 and mm <= 10 and a is not None]
    allv = [a for a in grid.values() if a is not None]
    return [sum(ind) / len(ind), min(ind), sum(allv) / len(allv), m["cells_at_threshold"], m["cells"],
            m["longest_operand_at_m2"], m["most_operands_at_n1"]]


def fmt(r, pct):
    return "%.4f | %.2f | %.3f | %g/%g | %g | %g" % tuple(r)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("grids")
    p.add_argument("--threshold", type=float, default=0.9)
    a = p.parse_args()
    pct = int(round(100 * a.threshold))
    names = sorted(f[:-4] for f in os.listdir(a.grids) if f.endswith(".csv"))
    print("| model | in-distribution mean | worst in-distribution cell | mean of all cells | cells >= %d%% | "
          "longest n at m = 2 | most m at n = 1 |" % pct)
    print("|---|---|---|---|---|---|---|")
    groups = {}
    for n in names:
        r = row(summarize.read_grid(os.path.join(a.grids, n + ".csv")), a.threshold)
        groups.setdefault(n.rsplit("-s", 1)[0], []).append(r)
        print("| %s | %s |" % (n, fmt(r, pct)))
    for g, rs in sorted(groups.items()):
        med = [summarize.median([r[i] for r in rs]) for i in range(7)]
        print("| **%s, median of %d** | %s |" % (g, len(rs), fmt(med, pct)))


if __name__ == "__main__":
    main()
