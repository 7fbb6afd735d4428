#!/usr/bin/env python3
"""The loss curves of bench/cpu_train.sh (part curves) against their bound, as bench/results/cpu-train/
README.md shows them:

    cpu_train_curves.py CURVES_CSV [--png OUT]

CURVES_CSV: recipe,precision,step,ref_t2,ref_t1,fast_t2 (the mean loss of each 50 steps of three runs of
one configuration: the reference trainer with 2 threads and with 1, the fast device with 2). The
reference's two thread counts sum the gradient in two orders, the runs drift apart as two fp32 (or bf16)
trajectories do; the fast device is one more order. Bound (test_learn_fast's
FastTrain.LossCurveWithinTheReferencesOwnSpread): at every row |fast - ref_t2| <= 3 max over the rows of
|ref_t1 - ref_t2| + 1e-5 ref_t2. Prints a markdown table per configuration and the verdict; --png draws
the curves. Exit 0 when every configuration is within its bound, 1 otherwise.
"""
import argparse
import csv
import sys
from collections import OrderedDict


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--png")
    args = ap.parse_args()
    runs = OrderedDict()
    with open(args.csv) as f:
        for r in csv.DictReader(f):
            runs.setdefault((r["recipe"], r["precision"]), []).append(
                (int(r["step"]), float(r["ref_t2"]), float(r["ref_t1"]), float(r["fast_t2"])))
    ok = True
    for (recipe, prec), rows in runs.items():
        spread = max(abs(t1 - t2) for _, t2, t1, _ in rows)
        worst = max(abs(f - t2) for _, t2, _, f in rows)
        bound = 3 * spread + 1e-5 * max(t2 for _, t2, _, _ in rows)
        inside = all(abs(f - t2) <= 3 * spread + 1e-5 * t2 for _, t2, _, f in rows)
        ok = ok and inside
        print("%s %s: reference %.4f -> %.4f over %d steps; the reference's own spread (1 vs 2 threads) %.2e; "
              "fast vs reference at most %.2e (bound %.2e): %s" % (recipe, prec, rows[0][1], rows[-1][1], rows[-1][0],
                                                                  spread, worst, bound, "within" if inside else "OUTSIDE"))
        print("\n| step | reference, 2 threads | reference, 1 thread | fast, 2 threads | fast - ref |")
        print("|---|---|---|---|---|")
        for s, t2, t1, f in rows:
            print("| %d | %.5f | %.5f | %.5f | %+.2e |" % (s, t2, t1, f, f - t2))
        print()
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(runs), figsize=(4.5 * len(runs), 3.6), squeeze=False)
        for ax, ((recipe, prec), rows) in zip(axes[0], runs.items()):
            steps = [r[0] for r in rows]
            for i, (label, style) in enumerate([("reference, 2 threads", "-"), ("reference, 1 thread", ":"),
                                                ("cpu-fast, 2 threads", "--")]):
                ax.plot(steps, [r[1 + i] for r in rows], style, label=label)
            ax.set_title("%s %s" % (recipe, prec))
            ax.set_xlabel("step")
            ax.set_ylabel("mean loss of 50 steps")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.png, dpi=90)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
