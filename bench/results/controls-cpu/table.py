#!/usr/bin/env python3
"""The table of the controlled runs (README.md here): one row per model from its grid CSV
(evaluate's, 30 x 29 cells), then the median of each scale's seeds; standard library only.

usage: table.py GRID_DIR [--threshold 0.9]     (GRID_DIR: the grids/ folder of commands.sh or of
                                               `python3 -m manyadd.sweep local sweep.json --out OUT`, NAME.csv)

Columns: in-distribution mean and worst cell (TA(n, m), n <= 10, 2 <= m <= 10: the training region
SA(10, 10)); the mean over the 870 cells; cells at or above the threshold; the longest operand length at
m = 2 and the most operands at n = 1 with every smaller cell at or above it (manyadd.grids, the metrics
written once for every study; `sweep collect` writes the same table).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
from manyadd import grids  # noqa: E402

summarize = grids  # read_grid, median: the names position-codes/table.py reads through this module


def row(grid, thr):
    return grids.table_row(grid, thr, train=(10, 10))


def fmt(r, pct):  # the name position-codes/table.py calls
    return grids.format_row(r)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("grids")
    p.add_argument("--threshold", type=float, default=0.9)
    a = p.parse_args()
    pct = int(round(100 * a.threshold))
    names = sorted(f[:-4] for f in os.listdir(a.grids) if f.endswith(".csv"))
    print(grids.table_header(pct))
    groups = {}
    for n in names:
        r = row(grids.read_grid(os.path.join(a.grids, n + ".csv")), a.threshold)
        groups.setdefault(n.rsplit("-s", 1)[0], []).append(r)
        print("| %s | %s |" % (n, grids.format_row(r)))
    for g, rs in sorted(groups.items()):
        med = [grids.median([r[i] for r in rs]) for i in range(len(grids.TABLE_COLUMNS))]
        print("| **%s, median of %d** | %s |" % (g, len(rs), grids.format_row(med)))


if __name__ == "__main__":
    main()
