"""The side-by-side table (README.md here): per instance, the paper's grid model (Tables III and IV,
base model after overtraining, best of 10 seeds), ours (evaluate_grid's CSV of a run), the decoders
(evaluate --instance/--table CSVs in side-by-side/) and the construction (proven for every input by
the whole-claim runs in side-by-side/). Each cell: sequence accuracy / character accuracy; '*' where
every problem of the instance lies inside that model's training ranges.

    python3 bench/results/grid-ut/table.py GRID_CSV [GRID_CSV ...]   (from the repository root)

GRID_CSV: evaluate_grid --csv outputs of one model (their instances are looked up by name)."""
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SBS = os.path.join(HERE, "side-by-side")
# shared/papers/003: Table III (base model, overtrained: char, seq) and Table IV right (base model);
# Table IV left is the noGroups variant (marked).
PAPER = {"2x15": (1.0, 1.0), "2x100": (0.99, 0.99), "2x602": (0.98, 0.0), "1-4x1-10": (1.0, 1.0),
         "1-5x1-5": (1.0, 1.0), "5-6x1-10": (0.99, 0.93), "7-10x1-10": (0.72, 0.25),
         "5x5": (1.0, 1.0), "6x5": (0.99, 0.98), "7x5": (0.98, 0.86), "8x5": (0.84, 0.40), "9x5": (0.66, 0.09),
         "10x5": (0.48, 0.03)}
ORDER = ["2x15", "2x100", "2x602", "1-4x1-10", "1-5x1-5", "5-6x1-10", "7-10x1-10",
         "5x5", "6x5", "7x5", "8x5", "9x5", "10x5", "2x20", "2x30", "11-20x1-10", "21-40x1-10"]
# (directory, column, the training set's (terms, digits) bounds: SA(n, m) has 2..m operands of 1..n digits)
DECODERS = [("cpu-sa1010-1l4h-d64-coupled-rel-far", "decoder SA(10,10) rel", (2, 10, 10)),
            ("cpu-sa1020-1l4h-d64-coupled-rel-far", "decoder SA(10,20) rel", (2, 20, 10)),
            ("cpu-sa1010-1l4h-d64", "decoder SA(10,10) table", (2, 10, 10))]
GRID_TRAIN = (1, 4, 10)  # Pi([1, 4], [1, 10])


def inside(inst, bounds):
    """Whether every problem of the instance lies in the training set's ranges ('*' in the table)."""
    t, d = inst.split("x")
    tl, th = (int(v) for v in (t.split("-") * 2)[:2])
    dh = int(d.split("-")[-1])
    return tl >= bounds[0] and th <= bounds[1] and dh <= bounds[2]


def rows(path):
    with open(path) as f:
        return {r["instance"]: r for r in csv.DictReader(f)}


def fmt(seq, char, star=False):
    return "%.3f / %.3f%s" % (float(seq), float(char), " *" if star else "")


def main(grid_csvs):
    grid = {}
    for p in grid_csvs:
        grid.update(rows(p))
    dec = []
    for name, label, bounds in DECODERS:
        d = {}
        for part in ("iii", "iv-terms", "beyond"):
            p = os.path.join(SBS, "%s-%s.csv" % (name, part))
            if os.path.exists(p):
                d.update(rows(p))
        dec.append((label, d, bounds))
    head = ["instance", "paper (base, best of 10)", "grid UT, ours"] + [l for l, _, _ in dec] + ["construction"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for inst in ORDER:
        cells = [inst]
        p = PAPER.get(inst)
        cells.append(fmt(p[1], p[0]) if p else "-")
        g = grid.get(inst)
        cells.append(fmt(g["seq_acc"], g["char_acc"], inside(inst, GRID_TRAIN)) if g else "not run")
        for _, d, bounds in dec:
            r = d.get(inst)
            if r is None:
                cells.append("not run")
            elif r["samples"] == "0":
                cells.append("NA (max_pos)")
            else:
                cells.append(fmt(r["answer_accuracy"], r["char_accuracy"], inside(inst, bounds)))
        cells.append("1 / 1 (proven)")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
