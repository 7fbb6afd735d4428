"""The side-by-side table (README.md here): per instance, the paper's grid model (Tables III and IV,
base model after overtraining, best of 10 seeds), ours (evaluate_grid's CSV of a run), the decoders
(evaluate --instance/--table CSVs in side-by-side/) and the construction (proven for every input by
the whole-claim runs in side-by-side/). Each cell: sequence accuracy / character accuracy; '*' where
every problem of the instance lies inside that model's training ranges.

    python3 bench/results/grid-ut/table.py [GRID_CSV ...]   (from the repository root)

Without arguments the grid columns are each variant's median over the seeds runs.sh evaluated here;
GRID_CSV: evaluate_grid --csv outputs of one model instead (their instances are looked up by name).

    python3 bench/results/grid-ut/table.py --seeds

The over-seeds tables (README.md here, "Over seeds"): for each variant (base, noGroups), every seed's
run evaluated by runs.sh (RUN-tableiii.csv, -tableiv-terms.csv, -beyond.csv, -tableiv-digits.csv), the
median over the seeds and the maximum (per instance, as Table VI's M), beside the paper's best of 10
(Tables III and IV); then the models before the overtraining phase (RUN-step5100-tableiii.csv) on Table
VI's three instances as mean +- sd (max) over the seeds, beside Table VI's over 10 seeds.

    python3 bench/results/grid-ut/table.py --interventions bench/results/grid-ut/interventions

interventions.sh's runs side by side (README.md here, "Why the extrapolation stops").

    python3 bench/results/grid-ut/table.py --interventions bench/results/grid-ut/interventions --png FILE

The same runs' 2-term instances as a figure: sequence accuracy against the operands' length, one line
per model and variant (soft actions: the paper's test; hard: Seq2Grid's argmax actions; hardfixed8:
hard actions and 8 recurrent steps)."""
import csv
import math
import os
import re
import statistics
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


def acc(v):
    """An accuracy to 3 decimals, except that one in [0.9995, 1) is not shown as 1.000: it gets 4 decimals,
    rounded down (the paper's rule: only a perfect score is 1.0)."""
    v = float(v)
    return "%.4f" % (math.floor(v * 1e4) / 1e4) if 0.9995 <= v < 1.0 else "%.3f" % v


def fmt(seq, char, star=False):
    return "%s / %s%s" % (acc(seq), acc(char), " *" if star else "")


def main(grid_cols):
    """grid_cols: [(column label, {instance: row})] of the grid models, each beside the paper's."""
    dec = []
    for name, label, bounds in DECODERS:
        d = {}
        for part in ("iii", "iv-terms", "beyond"):
            p = os.path.join(SBS, "%s-%s.csv" % (name, part))
            if os.path.exists(p):
                d.update(rows(p))
        dec.append((label, d, bounds))
    head = (["instance", "paper base, best of 10", "paper noGroups, best of 10"] + [l for l, _ in grid_cols]
            + [l for l, _, _ in dec] + ["construction"])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for inst in ORDER:
        cells = [inst]
        for paper in (PAPER, PAPER_NOGROUPS):
            p = paper.get(inst)
            cells.append(fmt(p[1], p[0]) if p else "-")
        for _, grid in grid_cols:
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


def median_columns():
    """The side-by-side's grid columns: per variant, the median over its evaluated seeds (seq and char apart)."""
    cols = []
    for variant, label, _ in VARIANTS:
        runs = seed_runs(variant)
        med = {}
        for inst in ORDER:
            got = [runs[s][inst] for s in sorted(runs) if inst in runs[s]]
            if got:
                med[inst] = {k: statistics.median(float(r[k]) for r in got) for k in ("seq_acc", "char_acc")}
        n = len(runs)
        cols.append(("grid UT %s, ours: median of %d seed%s" % (label, n, "" if n == 1 else "s"), med))
    return cols


# the noGroups variant's rows: Table III (char, seq) and Table IV left (2 terms of many digits)
PAPER_NOGROUPS = {"2x15": (1.0, 1.0), "2x100": (0.99, 0.99), "2x602": (0.99, 0.99), "1-4x1-10": (0.99, 0.99),
                  "1-5x1-5": (0.99, 0.99), "5-6x1-10": (0.98, 0.86), "7-10x1-10": (0.54, 0.1),
                  "2x1-1000": (0.99, 0.99), "2x1000": (0.99, 0.99), "2x1-2000": (0.99, 0.99), "2x2000": (0.99, 0.81),
                  "2x1-4000": (0.99, 0.58), "2x4000": (0.86, 0.0)}
# Table VI (10 seeds, before the overtraining phase): instance -> ((char mean, sd, max), (seq mean, sd, max))
TABLE_VI = {"base": {"2x602": ((0.23, 0.27, 0.98), (0.00, 0.00, 0.00)),
                     "5-6x1-10": ((0.93, 0.09, 0.98), (0.72, 0.24, 0.90)),
                     "7-10x1-10": ((0.51, 0.14, 0.66), (0.09, 0.05, 0.16))},
            "nogroups": {"2x602": ((0.99, 0.00, 0.99), (0.63, 0.34, 0.93)),
                         "5-6x1-10": ((0.74, 0.26, 0.96), (0.40, 0.27, 0.75)),
                         "7-10x1-10": ((0.29, 0.13, 0.51), (0.02, 0.02, 0.06))}}
VARIANTS = [("base", "base (g 8)", PAPER), ("nogroups", "noGroups (g 1)", PAPER_NOGROUPS)]
DIGITS_ORDER = ["2x1-1000", "2x1000", "2x1-2000", "2x2000", "2x1-4000", "2x4000"]


def seed_runs(variant):
    """{seed: {instance: row}} of the variant's runs evaluated here (every evaluate_grid CSV runs.sh wrote)."""
    out = {}
    own = re.compile(r"^%s-seed(\d+)-(tableiii|tableiv-terms|tableiv-digits|beyond)\.csv$" % re.escape(variant))
    for name in sorted(os.listdir(HERE)):
        m = own.match(name)  # runs.sh's names only: not the step-5,100 models, not other experiments' files
        if m:
            out.setdefault(int(m.group(1)), {}).update(rows(os.path.join(HERE, name)))
    return out


def spread(values):
    """mean +- sd (max), the format of Table VI (the sample sd over the seeds, n - 1)."""
    if len(values) == 1:
        return "%.2f (one seed)" % values[0]
    return "%.2f +- %.2f (%.2f)" % (statistics.mean(values), statistics.stdev(values), max(values))


def seeds_tables():
    for variant, label, paper in VARIANTS:
        runs = seed_runs(variant)
        seeds = sorted(runs)
        print("**%s**, overtrained (step 8100), seeds %s: seq / char per seed, the median and the maximum over"
              " the seeds, and the paper's best of 10\n" % (label, ", ".join(map(str, seeds)) or "none"))
        head = ["instance"] + ["seed %d" % s for s in seeds] + ["median", "max", "paper, best of 10"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for inst in ORDER + DIGITS_ORDER:
            got = [runs[s][inst] for s in seeds if inst in runs[s]]
            if not got:
                continue
            cells = [inst] + [fmt(runs[s][inst]["seq_acc"], runs[s][inst]["char_acc"]) if inst in runs[s] else "not run"
                              for s in seeds]
            seq = [float(r["seq_acc"]) for r in got]
            char = [float(r["char_acc"]) for r in got]
            cells.append(fmt(statistics.median(seq), statistics.median(char)) + ("" if len(got) == len(seeds) else
                                                                                  " (%d seeds)" % len(got)))
            cells.append(fmt(max(seq), max(char)))
            p = paper.get(inst)
            cells.append(fmt(p[1], p[0]) if p else "-")
            print("| " + " | ".join(cells) + " |")
        print()
        before = {}  # every run's step-5100 model evaluated so far (a run still in its overtraining too)
        pre, post = variant + "-seed", "-step5100-tableiii.csv"
        for name in os.listdir(HERE):
            if name.startswith(pre) and name.endswith(post) and name[len(pre):-len(post)].isdigit():
                before[int(name[len(pre):-len(post)])] = rows(os.path.join(HERE, name))
        print("**%s** at step 5100 (before the overtraining phase), seeds %s, against Table VI (10 seeds):"
              " mean +- sd (max)\n" % (label, ", ".join(map(str, sorted(before))) or "none"))
        print("| instance | ours: char | seq | Table VI: char | seq |")
        print("|---|---|---|---|---|")
        for inst, (pc, ps) in TABLE_VI[variant].items():
            got = [before[s][inst] for s in sorted(before) if inst in before[s]]
            oc = spread([float(r["char_acc"]) for r in got]) if got else "not run"
            os_ = spread([float(r["seq_acc"]) for r in got]) if got else "not run"
            print("| %s | %s | %s | %.2f +- %.2f (%.2f) | %.2f +- %.2f (%.2f) |" % ((inst, oc, os_) + pc + ps))
        print()


def interventions_table(d):
    """interventions.sh's runs (DIR/NAME.csv) side by side: one row per (model, instance), one column per
    variant of the run (soft / hard actions, or fixed step counts beside the halting)."""
    runs = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".csv"):
            runs[name[:-4]] = rows(os.path.join(d, name))
    groups = {}  # (model, experiment) -> {variant: rows}
    for name, r in runs.items():
        model, exp, variant = name.split("-", 2) if name.count("-") >= 2 else (name, "", "")
        if variant.startswith("fixed") or variant == "halting":
            exp += ", fixed steps against the halting"
        groups.setdefault((model, exp), {})[variant] = r
    for (model, exp), variants in groups.items():
        names = sorted(variants, key=lambda v: (0 if v in ("soft", "halting") else 1 if v == "hard" else 2,
                                                int(v[5:]) if v[5:].isdigit() else 0))
        print("**%s, %s** (seq / char, mean steps)\n" % (model, exp))
        print("| instance | " + " | ".join(names) + " |")
        print("|" + "---|" * (len(names) + 1))
        insts = []
        for v in names:
            insts += [i for i in variants[v] if i not in insts]
        for inst in insts:
            cells = [fmt(variants[v][inst]["seq_acc"], variants[v][inst]["char_acc"]) + " (%.2f)" %
                     float(variants[v][inst]["mean_steps"]) if inst in variants[v] else "-" for v in names]
            print("| %s | %s |" % (inst, " | ".join(cells)))
        print()


def interventions_plot(d, out):
    """Sequence accuracy on 2 terms of D digits against D, per model and variant, from interventions.sh's
    CSVs in d (a model's runs of one variant merged across experiments)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    curves = {}  # (model, variant) -> {digits: (seq, problems)}
    for name in sorted(os.listdir(d)):
        if not name.endswith(".csv") or name.count("-") < 2:
            continue
        model, _, variant = name[:-4].split("-", 2)
        if variant not in ("soft", "hard", "hardfixed8"):  # the step counts: the tables above
            continue
        step = re.fullmatch(r"\w+?at(\d+)", model)
        if step and step.group(1) != "5100":  # the mid-phase checkpoints (one instance each): README's table
            continue
        for inst, r in rows(os.path.join(d, name)).items():
            t, digits = inst.split("x")
            if t == "2" and digits.isdigit():
                curves.setdefault((model, variant), {})[int(digits)] = (float(r["seq_acc"]), int(r["samples"]))
    if not curves:
        sys.exit("table.py: no 2-term instances in %s" % d)
    def label(model):  # interventions.sh's names: base, nogroups (seed 1), base2, base1at5100 (step 5100), ...
        m = re.fullmatch(r"(base|nogroups)(\d*)(?:at(\d+))?", model)
        if not m:
            return model
        return "%s seed %s%s" % ({"base": "base", "nogroups": "noGroups"}[m.group(1)], m.group(2) or "1",
                                 ", step %s" % (m.group(3) or "8100"))
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    colors = {}
    for (model, variant), pts in sorted(curves.items()):
        xs = sorted(pts)
        c = colors.setdefault(model, "C%d" % len(colors))
        style, marker = {"soft": ("-", "o"), "hard": ("--", "s")}.get(variant, (":", "^"))
        ax.plot(xs, [pts[x][0] for x in xs], style, color=c, marker=marker, ms=4 if variant == "soft" else 6,
                mfc="none" if variant != "soft" else c,
                label="%s: %s (%s problems)" % (label(model), variant, "/".join(sorted({str(pts[x][1]) for x in xs}))))
    ax.set_xscale("log")
    ticks = sorted({x for pts in curves.values() for x in pts})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("digits per operand (2 terms; trained on [1, 4] terms x [1, 10] digits)")
    ax.set_ylabel("sequence accuracy")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("grid UT at test: Seq2Grid's soft actions (the paper's test) against their argmax (hard)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print("wrote %s: %s" % (out, ", ".join("%s %s" % k for k in sorted(curves))))


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--seeds"]:
        seeds_tables()
    elif len(args) == 2 and args[0] == "--interventions":
        interventions_table(args[1])
    elif len(args) == 4 and args[0] == "--interventions" and args[2] == "--png":
        interventions_plot(args[1], args[3])
    elif any(a.startswith("-") for a in args):
        sys.exit("usage: table.py [GRID_CSV ...] | table.py --seeds | table.py --interventions DIR [--png FILE]")
    elif args:  # one model's CSVs
        one = {}
        for a in args:
            one.update(rows(a))
        main([("grid UT, ours", one)])
    else:
        main(median_columns())
