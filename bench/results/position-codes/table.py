#!/usr/bin/env python3
"""The position-code study's table (README.md here): controls-cpu/table.py's columns per model (from its
grid CSV) and the median of each arm's seeds, plus, where the run directory is given (--runs), the
level-2 table's cosine at ID distances 10 and 14 (mean/max over the pairs; manyadd.codes).

usage: table.py GRID_DIR [--runs RUN_DIR] [--threshold 0.9]
"""
import argparse
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("controls_table", os.path.join(_here, "..", "controls-cpu", "table.py"))
controls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(controls)
summarize = controls.summarize


def level2(run):
    """'d10 mean/max, d14 mean/max' of the run's level-2 table, or '' (no run, no torch)."""
    if not run or not os.path.isfile(os.path.join(run, "model.safetensors")):
        return ""
    try:
        sys.path.insert(0, os.path.join(_here, "..", "..", "..", "python"))
        from manyadd import codes, load_learned
    except ImportError:
        return ""
    by = codes.similarity_by_distance(codes.code_similarity(load_learned(run), 2))
    return "%.2f/%.2f, %.2f/%.2f" % (by[10] + by[14])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("grids")
    p.add_argument("--runs", help="the run directories (NAME beside grids/NAME.csv)")
    p.add_argument("--threshold", type=float, default=0.9)
    a = p.parse_args()
    pct = int(round(100 * a.threshold))
    names = sorted(f[:-4] for f in os.listdir(a.grids) if f.endswith(".csv"))
    print("| model | in-distribution mean | worst in-distribution cell | mean of all cells | cells >= %d%% | "
          "longest n at m = 2 | most m at n = 1 | level-2 cosine d10, d14 (mean/max) |" % pct)
    print("|---|---|---|---|---|---|---|---|")
    groups = {}
    for n in names:
        r = controls.row(summarize.read_grid(os.path.join(a.grids, n + ".csv")), a.threshold)
        groups.setdefault(n.rsplit("-s", 1)[0], []).append(r)
        print("| %s | %s | %s |" % (n, controls.fmt(r, pct), level2(a.runs and os.path.join(a.runs, n))))
    for g, rs in sorted(groups.items()):
        med = [summarize.median([r[i] for r in rs]) for i in range(7)]
        print("| **%s, median of %d** | %s | |" % (g, len(rs), controls.fmt(med, pct)))


if __name__ == "__main__":
    main()
