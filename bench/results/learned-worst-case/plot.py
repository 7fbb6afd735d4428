#!/usr/bin/env python3
"""The learned-worst-case study's figure and table (README.md here): per TA(n, m) cell of the paper's grid,
random accuracy at 1000 samples (the committed bench/results/position-codes/grid1000/ CSV, the same model),
the attack's verdict (grid-sa1010-rel-far.csv, verify_learned --n-range/--m-range) and the certificate's
(small-*.csv), side by side; printed: the cells random sampling scores >= 0.9 and 1.0 that the attack refutes.

    python3 bench/results/learned-worst-case/plot.py          # writes grids.png beside this file
"""
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "python"))


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    import numpy as np
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    N, M = range(1, 31), range(2, 31)
    acc = np.full((30, 29), np.nan)
    for r in rows(os.path.join(ROOT, "bench/results/position-codes/grid1000/coupled-rel-far-s2.csv")):
        acc[int(r["n"]) - 1, int(r["m"]) - 2] = float(r["accuracy"])
    att = np.full((30, 29), np.nan)  # 1 refuted, 0 no counterexample found, nan not run / does not fit
    for r in rows(os.path.join(HERE, "grid-sa1010-rel-far.csv")):
        if r["fits"] == "1":
            att[int(r["n"]) - 1, int(r["m"]) - 2] = 1.0 if r["counterexample"] else 0.0
    cert = np.full((30, 29), np.nan)  # 1 proven, 0 not proven
    for r in rows(os.path.join(HERE, "small-cpu-sa1010-1l4h-d64-coupled-rel-far-fp32.csv")):
        if r["fits"] == "1" and int(r["m"]) >= 2:
            cert[int(r["n"]) - 1, int(r["m"]) - 2] = 1.0 if r["certificate"] == "proven" else 0.0
    both = (att == 1) & (acc >= 0.9)
    perfect = (att == 1) & (acc == 1.0)
    print("cells: %d; random accuracy >= 0.9: %d; the attack refutes %d of them; random 1000/1000: %d, refuted %d; "
          "refuted anywhere: %d; no counterexample found: %d" % (
              np.sum(~np.isnan(acc)), np.sum(acc >= 0.9), both.sum(), np.sum(acc == 1.0), perfect.sum(),
              np.nansum(att == 1), np.sum(att == 0)))
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.6), constrained_layout=True)
    ext = (1.5, 30.5, 30.5, 0.5)
    im = axes[0].imshow(acc, cmap="viridis", vmin=0, vmax=1, extent=ext, aspect="auto")
    axes[0].set_title("random accuracy, 1000 samples per cell")
    fig.colorbar(im, ax=axes[0], fraction=0.04)
    axes[1].imshow(att, cmap=ListedColormap(["#4caf50", "#d32f2f"]), vmin=0, vmax=1, extent=ext, aspect="auto")
    ys, xs = np.nonzero(perfect)
    axes[1].scatter(xs + 2, ys + 1, s=6, c="white", marker="o", label="refuted where 1000/1000 random are right")
    axes[1].legend(loc="lower left", fontsize=7)
    axes[1].set_title("attack (1 s per cell): red = confirmed counterexample")
    axes[2].imshow(cert, cmap=ListedColormap(["#bdbdbd", "#1565c0"]), vmin=0, vmax=1, extent=ext, aspect="auto")
    axes[2].set_title("certificate (fp32): blue = proven for every input")
    for ax in axes:
        ax.set_xlabel("operands m")
        ax.set_ylabel("digits n")
        ax.plot([1.5, 10.5, 10.5], [10.5, 10.5, 0.5], color="white", lw=1)  # the training region SA(10, 10)
    fig.suptitle("models/cpu-sa1010-1l4h-d64-coupled-rel-far on TA(n, m): random accuracy, the attack, the certificate")
    out = os.path.join(HERE, "grids.png")
    fig.savefig(out, dpi=90)
    print(out)


if __name__ == "__main__":
    main()
