#!/usr/bin/env python3
"""The length-wall study's table (README.md here): controls-cpu/table.py's columns per run, from the grid
CSVs of any number of directories (the baseline's in bench/results/position-codes/grids, NAME-sSEED.csv),
and the median of each arm's seeds.

usage: table.py GRID_DIR [GRID_DIR ...] [--only PREFIX ...] [--threshold 0.9]
"""
import argparse
import importlib.util
import os

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("controls_table", os.path.join(_here, "..", "controls-cpu", "table.py"))
controls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(controls)
summarize = controls.summarize


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("grids", nargs="+")
    p.add_argument("--only", nargs="*", default=None, help="the arms (run names before -sSEED) to show")
    p.add_argument("--threshold", type=float, default=0.9)
    a = p.parse_args()
    pct = int(round(100 * a.threshold))
    runs = []
    for d in a.grids:
        if not os.path.isdir(d):
            p.error("%s is not a directory" % d)
        runs += [(f[:-4], os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".csv")]
    if a.only is not None:
        runs = [(n, f) for n, f in runs if n.rsplit("-s", 1)[0] in a.only]
    print("| run | in-distribution mean | worst in-distribution cell | mean of all cells | cells >= %d%% | "
          "longest n at m = 2 | most m at n = 1 |" % pct)
    print("|---|---|---|---|---|---|---|")
    groups = {}
    for n, f in sorted(runs):
        r = controls.row(summarize.read_grid(f), a.threshold)
        groups.setdefault(n.rsplit("-s", 1)[0], []).append(r)
        print("| %s | %s |" % (n, controls.fmt(r, pct)))
    for g, rs in sorted(groups.items()):
        med = [summarize.median([r[i] for r in rs]) for i in range(7)]
        print("| **%s, median of %d** | %s |" % (g, len(rs), controls.fmt(med, pct)))


if __name__ == "__main__":
    main()
