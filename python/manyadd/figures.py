"""Figures with matplotlib from the files the tools write (the C++ tools also draw quick-look PNGs with a
bitmap font; these are the figures to read and to publish).

    python3 -m manyadd.figures grid RUN/grid.csv -o grid.png [--train 10 10 | --model DIR] [--task T]
    python3 -m manyadd.figures lengths --curve LABEL RUN... [--curve LABEL RUN...] -o fig3.png [--table T.csv]
    python3 -m manyadd.figures alignment OUT/grid_alignment.csv -o alignment.png [--train 10 10]
    python3 -m manyadd.figures attention OUT/attention.safetensors -o attention.png [--rows response]
    python3 -m manyadd.figures compare OUT/compare_TA11x11 -o side_by_side.png [--rows response]
    python3 -m manyadd.figures loss RUN [RUN2 ...] -o loss.png [--label A --label B]
    python3 -m manyadd.figures halting EVAL.json -o halting.png

grid       an accuracy grid CSV of `evaluate` (n,m,samples,exact,accuracy; NA where the position IDs do
           not fit) in the paper's layout (Figures 1, 9): x = evaluate's m, y = its n (top to bottom), in
           the task's words (addition: number of operands, length of each operand, TA(n, m);
           multiplication: lengths of B and A, TM(i, j)), exact-match accuracy in % with a colour bar,
           ticks 2, 5, 10, ... / 1, 5, 10, ..., the training region boxed in red, NA cells grey. The task
           comes from --task, else the report or config.json below, else addition. A one-axis grid
           (parity: no m column) is drawn as `lengths` draws one run: accuracy against the query length.
           The training region comes from --train N M (parity: --train N), else --model DIR's
           config.json, else the `evaluate --json` report beside the CSV (same stem), else a config.json
           beside it; without any, no box (said on stderr).
lengths    Figure 3's layout for parity: accuracy (%) against the query length, one panel per metric (the
           answer token, Figure 3's, and the whole response), one line per --curve LABEL PATH... over its
           seeds (PATH: a one-axis grid CSV, a run directory holding grid.csv, or run_config.py's
           configuration directory: every run in it): the median and a band from the smallest to the
           largest seed (--band ci95: the mean and its 95% Student-t interval, Figure 3's band), the
           training lengths shaded grey (--train N, else the first run's config.json), chance (50%)
           dotted. --table writes the plotted numbers as CSV.
alignment  `compare_attention --grid`'s grid_alignment.csv: accuracy, the best matching's mean share, and
           for each constructed head the share of the learned head matched at the reference cell
           (--reference N M, default 11 11), same layout.
attention  `dump_attention`'s attention.safetensors (or its directory): one panel per layer and head, row =
           query, column = key, token tick labels (every token up to 48 tokens, else the separators
           '$ + = >'), a colour bar (square-root scale by default: --gamma 1 for linear). For a parity
           model (task parity) it also prints, per head, the attention from the rows that predict y_k on
           the intended keys x_k and y_(k-1) against chance (parity_intended_attention; --table CSV).
compare    a `compare_attention` output directory (compare.json, constructed/, learned/): one row per
           matched pair, constructed | learned, with the pair's share and JS divergence in the titles.
loss       train's log.csv (or run directories holding it): loss (log scale), learning rate, and, where an
           eval.csv sits beside the log, the in-distribution exact match, against the step.
halting    `evaluate_grid --json`'s report (the grid universal transformer, paper 003): per instance, in
           the report's order, the recurrent steps taken before halting (box: quartiles, whiskers: the
           5th and 95th percentiles, dot: the mean) and the character and sequence accuracy on a second
           axis (paper 003's Fig. 2).

Every command writes a PNG (-o, default beside the input) at --dpi (default 150). Exit codes: 0 done,
2 bad usage or input (a missing or malformed file), as the project's tools.
The functions (plot_grid, plot_lengths, plot_alignment, plot_attention, plot_compare, plot_loss,
plot_halting) return a
matplotlib Figure for notebooks; length_curve and parity_intended_attention return the numbers.
"""
import argparse
import csv
import json
import math
import os
import sys

from . import safetensors
from .files import InputError, check_output_path

__all__ = ["read_grid_csv", "read_lengths_csv", "read_attention", "grid_files", "length_curve", "length_table",
           "parity_intended_attention", "plot_grid", "plot_lengths", "plot_alignment", "plot_attention",
           "plot_compare", "plot_loss", "main"]

CMAP_ACCURACY = "Blues"   # the paper's heatmaps: generalization in blue
CMAP_SHARE = "viridis"
CMAP_ATTENTION = "magma"  # bright = attended, as the paper's Figure 7
NA_COLOUR = "#bdbdbd"

# The tasks of learn/ (learn/README.md, "Tasks") and what their grids' axes are: evaluate's n is the y
# axis (rows, top to bottom), its m the x axis (labels x, y, the cell's name); a training set's m starts
# at the last entry (addition: 2 operands).
TASKS = ("addition", "addition-noscratch", "addition-2op", "parity", "parity-noscratch", "multiplication",
         "multiplication-noscratch")
_TA = ("Number of Operands", "Length of Each Operand", "TA(n, m)", 2)
_TM = ("Length of the Second Operand B (j digits)", "Length of the First Operand A (i digits)", "TM(i, j)", 1)
GRID_AXES = {
    "addition": _TA,
    "addition-noscratch": _TA,
    "addition-2op": ("Digits of the Second Operand (m)", "Digits of the First Operand (n)", "(n, m)-digit sums", 1),
    "multiplication": _TM,             # Figure 9: "each axis represents the length of each operand"
    "multiplication-noscratch": _TM,
}
ONE_AXIS_TASKS = ("parity", "parity-noscratch")  # Figure 3: accuracy against the query length
LENGTH_AXIS = "Query Length (bits)"
METRIC_NAMES = {"answer_accuracy": "answer token, teacher-forced (Figure 3's metric)",
                "accuracy": "whole response (every scratchpad token and EOS), teacher-forced"}


def _plt():
    try:
        import matplotlib
    except ImportError:
        raise InputError("matplotlib is not installed (Debian: apt-get install python3-matplotlib)") from None
    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# ---- readers ---------------------------------------------------------------------------------------

def _read_csv(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise InputError("cannot read %s: %s" % (path, e.strerror or e)) from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise InputError("%s is not a CSV file: %s" % (path, e)) from None
    if not rows:
        raise InputError("%s has no rows" % path)
    return rows


def _num(path, row, key, integer=False):
    v = row.get(key)
    if v is None:
        raise InputError("%s: no column %r" % (path, key))
    if v in ("NA", "nan", ""):
        return math.nan
    try:
        return int(v) if integer else float(v)
    except ValueError:
        raise InputError("%s: column %r holds %r, not a number" % (path, key, v)) from None


def read_grid_csv(path, column="accuracy"):
    """A grid CSV (columns n, m and `column`) -> (values[n][m] as a list of rows, n values, m values);
    missing cells and NA are NaN."""
    rows = _read_csv(path)
    cells = {}
    for r in rows:
        n, m = _num(path, r, "n", True), _num(path, r, "m", True)
        if isinstance(n, float) or isinstance(m, float):
            raise InputError("%s: a row without n or m" % path)
        cells[(n, m)] = _num(path, r, column)
    ns = list(range(min(k[0] for k in cells), max(k[0] for k in cells) + 1))
    ms = list(range(min(k[1] for k in cells), max(k[1] for k in cells) + 1))
    if len(ns) * len(ms) > 1_000_000:
        raise InputError("%s: grid of %d x %d cells is too large to draw" % (path, len(ns), len(ms)))
    return [[cells.get((n, m), math.nan) for m in ms] for n in ns], ns, ms


def _grid_has_m(path):
    rows = _read_csv(path)
    return "m" in rows[0]


def read_lengths_csv(path, column="accuracy"):
    """A one-axis grid CSV of `evaluate` (parity: columns n and `column`, no m) -> {n: value}; NA is NaN."""
    rows = _read_csv(path)
    if "m" in rows[0]:
        raise InputError("%s has an m column: a two-axis grid (draw it with `grid`)" % path)
    out = {}
    for r in rows:
        n = _num(path, r, "n", True)
        if isinstance(n, float):
            raise InputError("%s: a row without n" % path)
        if n in out:
            raise InputError("%s: length %d appears twice" % (path, n))
        out[n] = _num(path, r, column)
    return out


def read_attention(path):
    """dump_attention's attention.safetensors (or its directory) -> ({name: (T, T) array}, metadata)."""
    if os.path.isdir(path):
        path = os.path.join(path, "attention.safetensors")
    maps, meta = safetensors.read(path)
    for name, a in maps.items():
        if len(a.shape) != 2 or a.shape[0] != a.shape[1]:
            raise InputError("%s: tensor %s has shape %s, not (T, T)" % (path, name, tuple(a.shape)))
    return maps, meta


def _report(csv_path):
    """evaluate's --json report beside a grid CSV (same stem), or {}."""
    try:
        with open(os.path.splitext(csv_path)[0] + ".json") as f:
            j = json.load(f)
        return j if isinstance(j, dict) else {}
    except (OSError, ValueError):
        return {}


def _train_region(csv_path, train=None, model=None):
    if train:
        return tuple(train), "--train"
    cands = []
    if model:
        cands.append(os.path.join(model, "config.json"))
    stem = os.path.splitext(csv_path)[0]
    cands += [stem + ".json", os.path.join(os.path.dirname(csv_path) or ".", "config.json")]
    for c in cands:
        try:
            with open(c) as f:
                j = json.load(f)
        except (OSError, ValueError):
            if model and c == cands[0]:
                raise InputError("--model %s: cannot read its config.json" % model) from None
            continue
        t = j.get("train", j) if isinstance(j, dict) else {}
        if isinstance(t, dict) and isinstance(t.get("train_n"), int) and isinstance(t.get("train_m"), int) \
                and t["train_n"] > 0 and t["train_m"] > 0:
            return (t["train_n"], t["train_m"]), c
    return None, None


def _task(csv_path, model=None, task=None):
    """The task a grid CSV belongs to: --task, else the `evaluate --json` report beside it, else --model's or
    a neighbouring config.json's train.task (addition when a config.json has none: every model written
    before tasks existed); None when nothing says."""
    if task:
        if task not in TASKS:
            raise InputError("unknown task %r (one of %s)" % (task, ", ".join(TASKS)))
        return task
    t = _report(csv_path).get("task")
    if isinstance(t, str) and t in TASKS:
        return t
    for c in ([os.path.join(model, "config.json")] if model else []) + \
            [os.path.join(os.path.dirname(csv_path) or ".", "config.json")]:
        try:
            with open(c) as f:
                j = json.load(f)
        except (OSError, ValueError):
            continue
        tr = j.get("train") if isinstance(j, dict) else None
        t = tr.get("task", "addition") if isinstance(tr, dict) else None
        if isinstance(t, str) and t in TASKS:
            return t
    return None


# ---- drawing helpers -------------------------------------------------------------------------------

def _colormap(name):
    import matplotlib
    return (matplotlib.colormaps[name] if hasattr(matplotlib, "colormaps") else matplotlib.cm.get_cmap(name)).copy()


def _ticks(values, step=5):
    """The paper's ticks: the first value, then multiples of step."""
    t = [values[0]] + [v for v in values if v % step == 0 and v != values[0]]
    return t


def _heatmap(ax, values, ns, ms, cmap, vmin, vmax, train=None, title=None, task="addition"):
    import numpy as np
    from matplotlib.patches import Rectangle
    xlabel, ylabel, _, m_first = GRID_AXES[task]
    a = np.ma.masked_invalid(np.array(values, dtype=float))
    cm = _colormap(cmap)
    cm.set_bad(NA_COLOUR)
    im = ax.imshow(a, cmap=cm, vmin=vmin, vmax=vmax, origin="upper", aspect="equal", interpolation="nearest",
                   extent=(ms[0] - 0.5, ms[-1] + 0.5, ns[-1] + 0.5, ns[0] - 0.5))
    ax.set_xticks(_ticks(ms))
    ax.set_yticks(_ticks(ns))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.tick_params(top=False, labeltop=False)
    if train:
        tn, tm = train
        x0, x1 = max(ms[0], m_first) - 0.5, min(tm, ms[-1]) + 0.5
        y0, y1 = max(ns[0], 1) - 0.5, min(tn, ns[-1]) + 0.5
        if x1 > x0 and y1 > y0:
            ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor="red", linewidth=2))
    if title:
        ax.set_title(title)
    return im


def plot_grid(csv_path, train=None, model=None, title=None, column="accuracy", cmap=CMAP_ACCURACY, task=None):
    """Exact-match accuracy grid of `evaluate` (see the module doc). The axes are the task's (--task, else
    the report or config.json beside the CSV, else addition's); a one-axis grid (parity) is drawn as
    accuracy against the query length, both metrics (plot_lengths)."""
    if not _grid_has_m(csv_path):
        t = _task(csv_path, model, task)
        if t is not None and t not in ONE_AXIS_TASKS:
            raise InputError("%s has no m column, but task %s has a two-axis grid" % (csv_path, t))
        region, _ = _train_region(csv_path, (train[0], 1) if train else None, model)
        return plot_lengths([(t or "parity", [csv_path])], train_n=region[0] if region else None, title=title)
    t = _task(csv_path, model, task) or "addition"
    if t in ONE_AXIS_TASKS:
        raise InputError("%s has an m column, but task %s has one axis (query lengths)" % (csv_path, t))
    plt = _plt()
    values, ns, ms = read_grid_csv(csv_path, column)
    region, source = _train_region(csv_path, train, model)
    if region is None:
        print("figures: no training region known for %s (give --train N M or --model DIR): no box drawn" % csv_path,
              file=sys.stderr)
    if title is None and column == "accuracy":
        samples = {r.get("samples") for r in _read_csv(csv_path) if r.get("samples") not in (None, "0")}
        title = "exact match on %s%s" % (GRID_AXES[t][2], ", %s samples per cell" % samples.pop() if len(samples) == 1
                                          else "")
        name = model or _report(csv_path).get("model")
        if isinstance(name, str):
            title = "%s\n%s" % (os.path.basename(os.path.normpath(name)), title)
    pct = [[100.0 * v for v in row] for row in values]
    w = 1.6 + 0.19 * len(ms)
    fig, ax = plt.subplots(figsize=(min(max(w, 5.5), 12), min(max(0.19 * len(ns) + 1.6, 4.0), 10)),
                           constrained_layout=True)
    im = _heatmap(ax, pct, ns, ms, cmap, 0, 100, region, None, t)
    if title:
        ax.set_title(title, fontsize=10)
    if len(ns) * len(ms) <= 150:  # small grids: the value in every cell
        for i, n in enumerate(ns):
            for j, m in enumerate(ms):
                v = pct[i][j]
                if v == v:
                    t = "%.0f" % v if v in (0, 100) else "%.1f" % v
                    t = {"100.0": ">99.9", "0.0": "<0.1"}.get(t, t)  # never round a miss to 100 or a hit to 0
                    ax.text(m, n, t, ha="center", va="center",
                            fontsize=6, color="white" if v > 60 else "black")
    cb = fig.colorbar(im, ax=ax, shrink=0.9)
    cb.set_label("exact-match accuracy (%)")
    cb.set_ticks([0, 20, 40, 60, 80, 100])
    return fig


# ---- accuracy against the query length (parity, Figure 3) -----------------------------------------

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; beyond, the normal's 1.96.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
BANDS = ("range", "ci95")


def grid_files(path):
    """The grid CSVs a path stands for: a CSV; a run directory (its grid.csv); or a directory of run
    directories (run_config.py's ROOT/<config name>: every */grid.csv, sorted)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise InputError("cannot read %s: no such file or directory" % path)
    if os.path.isfile(os.path.join(path, "grid.csv")):
        return [os.path.join(path, "grid.csv")]
    runs = sorted(os.path.join(path, d, "grid.csv") for d in os.listdir(path)
                  if os.path.isfile(os.path.join(path, d, "grid.csv")))
    if not runs:
        raise InputError("%s holds no grid.csv, nor run directories with one" % path)
    return runs


def length_curve(paths, column="answer_accuracy", band="range"):
    """One curve over seeds: [(n, runs, center, lo, hi)] per query length, from one-axis grid CSVs (one per
    seed). band "range": center the median, [lo, hi] the smallest and largest seed; "ci95": center the mean,
    [lo, hi] its 95% Student-t interval over the seeds (Figure 3's "95% confidence intervals"), clipped to
    [0, 1]. Lengths must be the same in every file; NaN (NA) cells are left out of their length's statistics."""
    if band not in BANDS:
        raise InputError("band %r: one of %s" % (band, ", ".join(BANDS)))
    grids = [(p, read_lengths_csv(p, column)) for p in paths]
    if not grids:
        raise InputError("a curve without grid files")
    ns = sorted(grids[0][1])
    for p, g in grids[1:]:
        if sorted(g) != ns:
            raise InputError("%s has other query lengths than %s" % (p, grids[0][0]))
    out = []
    for n in ns:
        v = sorted(g[n] for _, g in grids if g[n] == g[n])
        k = len(v)
        if not k:
            out.append((n, 0, math.nan, math.nan, math.nan))
        elif band == "range":
            med = v[k // 2] if k % 2 else 0.5 * (v[k // 2 - 1] + v[k // 2])
            out.append((n, k, med, v[0], v[-1]))
        else:
            mean = sum(v) / k
            half = 0.0 if k == 1 else (_T975[k - 2] if k - 1 <= len(_T975) else 1.96) * math.sqrt(
                sum((x - mean) ** 2 for x in v) / (k - 1) / k)
            out.append((n, k, mean, max(0.0, mean - half), min(1.0, mean + half)))
    return out


def plot_lengths(curves, metrics=("answer_accuracy", "accuracy"), train_n=None, band="range", title=None):
    """Figure 3's layout: accuracy (%) against the query length, one panel per metric, one line per curve
    (label, [grid CSVs or run directories: one per seed]) with its band over the seeds (length_curve), the
    training lengths 1..train_n shaded grey, chance (a fair coin, 50%) dotted on the answer-token panel."""
    plt = _plt()
    if not curves:
        raise InputError("no curve to draw")
    for m in metrics:
        if m not in METRIC_NAMES:
            raise InputError("metric %r: one of %s" % (m, ", ".join(METRIC_NAMES)))
    data = [(label, [length_curve([f for p in paths for f in grid_files(p)], m, band) for m in metrics])
            for label, paths in curves]
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.0 * len(metrics), 4.4), squeeze=False,
                             constrained_layout=True)
    centre = "median" if band == "range" else "mean"
    spread = "band: smallest to largest seed" if band == "range" else "band: 95% t-interval of the mean over seeds"
    for j, (ax, m) in enumerate(zip(axes[0], metrics)):
        ns_all = [r[0] for _, cs in data for r in cs[j]]
        if train_n:
            ax.axvspan(min(ns_all + [0]) - 2.5, train_n + 0.5, color="#e0e0e0", zorder=0,
                       label="training lengths 1-%d" % train_n)
        if m == "answer_accuracy":
            ax.axhline(50, color="grey", ls=":", lw=1, label="chance (a fair coin)")
        for label, cs in data:
            rows = [r for r in cs[j] if r[1] > 0]
            k = max((r[1] for r in rows), default=0)
            x = [r[0] for r in rows]
            line, = ax.plot(x, [100 * r[2] for r in rows], marker="o", ms=3,
                            label="%s (%s of %d)" % (label, centre, k) if k > 1 else label)
            if k > 1:
                ax.fill_between(x, [100 * r[3] for r in rows], [100 * r[4] for r in rows], color=line.get_color(),
                                alpha=0.2, lw=0)
        ax.set_xlabel(LENGTH_AXIS)
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(-2, 102)
        ax.set_xlim(0, max(ns_all) + 3)
        ax.set_xticks([t for t in range(0, max(ns_all) + 1, 10 if max(ns_all) > 40 else 5)])
        ax.set_title(METRIC_NAMES[m], fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    samples = set()
    for _, paths in curves:
        for p in paths:
            for f in grid_files(p):
                samples |= {r.get("samples") for r in _read_csv(f) if r.get("samples") not in (None, "", "0")}
    fig.suptitle(title or "accuracy against the query length%s; %s" % (
        ", %s samples per length" % samples.pop() if len(samples) == 1 else "", spread), fontsize=10)
    return fig


def length_table(curves, metrics=("answer_accuracy", "accuracy"), band="range"):
    """plot_lengths' numbers as CSV text: curve,n,runs, then per metric its centre, lo and hi."""
    head = ["curve", "n", "runs"] + ["%s_%s" % (m, w) for m in metrics for w in
                                     (("median" if band == "range" else "mean"), "lo", "hi")]
    lines = [",".join(head)]
    for label, paths in curves:
        files = [f for p in paths for f in grid_files(p)]
        cs = [length_curve(files, m, band) for m in metrics]
        for i, r in enumerate(cs[0]):
            vals = []
            for c in cs:
                vals += ["NA" if v != v else "%.4f" % v for v in c[i][2:]]
            lines.append(",".join(['"%s"' % label.replace('"', "'"), str(r[0]), str(r[1])] + vals))
    return "\n".join(lines) + "\n"


_HEADS = ("digit_sum", "carry", "arrow", "eos")


def plot_alignment(csv_path, train=None, model=None, reference=(11, 11), title=None):
    """compare_attention --grid's grid_alignment.csv as six panels (see the module doc)."""
    plt = _plt()
    rows = _read_csv(csv_path)
    region, _ = _train_region(csv_path, train, model)
    fixed = {}  # the learned head matched to each constructed head at the reference cell
    for r in rows:
        if (r.get("n"), r.get("m")) == (str(reference[0]), str(reference[1])):
            for h in _HEADS:
                if r.get(h + "_share") == r.get(h + "_fixed_share"):
                    fixed[h] = r.get(h + "_learned")
    panels = [("accuracy", "exact match (same instances)", True),
              ("mean_matched_share", "best matching per cell: mean share", False)]
    panels += [(h + "_fixed_share", "%s <- %s" % (h, fixed.get(h, "head matched at TA(%d, %d)" % reference)), False)
               for h in _HEADS]
    fig, axes = plt.subplots(2, 3, figsize=(15, 9.5), constrained_layout=True)
    ims = []
    for ax, (col, t, is_acc) in zip(axes.flat, panels):
        values, ns, ms = read_grid_csv(csv_path, col)
        if is_acc:
            values = [[100.0 * v for v in row] for row in values]
        ims.append((_heatmap(ax, values, ns, ms, CMAP_ACCURACY if is_acc else CMAP_SHARE, 0, 100 if is_acc else 1,
                             region, t), is_acc, ax))
    for im, is_acc, ax in ims[:2]:
        cb = fig.colorbar(im, ax=ax, shrink=0.85)
        cb.set_label("exact-match accuracy (%)" if is_acc else "share")
    cb = fig.colorbar(ims[2][0], ax=[a for _, _, a in ims[2:]], shrink=0.85)
    cb.set_label("share of the learned head's non-BOS attention on the construction's keys")
    samples = rows[0].get("samples", "?")
    who = os.path.basename(os.path.normpath(model)) + ": " if model else ""
    fig.suptitle(title or "%slearned vs constructed attention per TA cell (%s samples per cell)\nbottom: the share of "
                 "the learned head matched to each constructed head at TA(%d, %d)" % (who, samples, reference[0],
                                                                                       reference[1]))
    return fig


def _token_ticks(ax, tokens, lo_row=0, hi_row=None, lo_col=0, hi_col=None, fontsize=None):
    T = len(tokens)
    hi_row = T if hi_row is None else hi_row
    hi_col = T if hi_col is None else hi_col

    def pick(lo, hi):
        if hi - lo <= 48:
            return list(range(lo, hi))
        return [k for k in range(lo, hi) if tokens[k] in "$+=>"]
    for axis, (lo, hi), setter, lab in ((ax.xaxis, (lo_col, hi_col), ax.set_xticks, ax.set_xticklabels),
                                         (ax.yaxis, (lo_row, hi_row), ax.set_yticks, ax.set_yticklabels)):
        ks = pick(lo, hi)
        setter(ks)
        fs = fontsize or (6 if hi - lo <= 48 else 7)
        lab([tokens[k] for k in ks], fontsize=fs, fontfamily="monospace")
    ax.tick_params(length=2, pad=1)


def _attention_panel(ax, a, tokens, rows, gamma, title):
    from matplotlib import colors
    import numpy as np
    T = a.shape[0]
    r0 = tokens.index("=") if rows == "response" and "=" in tokens else 0
    norm = colors.PowerNorm(gamma=gamma, vmin=0.0, vmax=1.0)
    im = ax.imshow(np.asarray(a)[r0:], cmap=CMAP_ATTENTION, norm=norm, interpolation="nearest", aspect="auto",
                   extent=(-0.5, T - 0.5, T - 0.5, r0 - 0.5))
    _token_ticks(ax, tokens, r0, T)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title, fontsize=10)
    return im


def _colorbar(fig, im, axes, gamma):
    cb = fig.colorbar(im, ax=axes, shrink=0.8 if len(axes) == 1 else 0.35)
    cb.set_label("attention" + (" (square-root colour scale)" if gamma == 0.5 else
                                "" if gamma == 1 else " (colour scale x^%g)" % gamma))
    cb.set_ticks([0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0] if gamma < 1 else [0, 0.25, 0.5, 0.75, 1.0])
    return cb


def _sorted_heads(names):
    def key(n):
        parts = n.split(".")
        return tuple(int(p) if p.isdigit() else p for p in parts)
    return sorted(names, key=key)


def _cell_name(meta):
    """dump_attention's cell in its task's words."""
    task = meta.get("task", "addition")
    n, m = meta.get("n", "?"), meta.get("m", "?")
    if task in ONE_AXIS_TASKS:
        return "%s queries of %s bits" % (task, n)
    name = GRID_AXES.get(task, _TA)[2]
    return name.replace("(n, m)", "(%s, %s)" % (n, m)).replace("(i, j)", "(%s, %s)" % (n, m))


def parity_intended_attention(maps, meta):
    """What the parity method intends (paper, Sec. 3.1): y_k = x_k XOR y_(k-1), so the row that predicts y_k
    should read the query bit x_k (coupled to y_k: the same position ID) and the previous scratchpad bit
    y_(k-1), the row itself. For dump_attention's maps of a `parity` model on a cell of n bits (sequence
    $ x_1..x_n = y_1..y_n, T = 2n + 2; row n + k predicts y_k, '=' for k = 1), per head, over those n rows:
    the mean attention on x_k, on the row itself and on BOS; the share of rows whose most attended key is
    x_k / the row itself; and chance, the mean weight of one key under uniform attention over the causal
    prefix (1 / (r + 1) for row r). Returns [dict] in head order, then per layer a row "layers.L.best_head":
    per row the largest weight any of the layer's heads puts on x_k (and on the row itself), averaged,
    and the share of rows where some head's most attended key is x_k (heads may share the rows out)."""
    if meta.get("task") != "parity":
        raise InputError("the intended keys are defined for task parity (the maps are of task %s)"
                         % meta.get("task", "addition"))
    try:
        n = int(meta.get("n"))
    except (TypeError, ValueError):
        raise InputError("the maps' metadata has no query length n") from None
    out = []
    rows = [(n + k, k) for k in range(1, n + 1)]  # (row predicting y_k, its coupled key x_k)
    for name in _sorted_heads(list(maps)):
        a = maps[name]
        if a.shape[0] != 2 * n + 2:
            raise InputError("head %s: %d rows, a parity cell of %d bits has %d" % (name, a.shape[0], n, 2 * n + 2))
        x_k = sum(float(a[r][k]) for r, k in rows) / n
        own = sum(float(a[r][r]) for r, _ in rows) / n
        bos = sum(float(a[r][0]) for r, _ in rows) / n

        def top(r):
            v = [float(a[r][j]) for j in range(r + 1)]
            return v.index(max(v))
        out.append({"head": name, "x_k": x_k, "self": own, "bos": bos, "intended": x_k + own,
                    "top_is_x_k": sum(top(r) == k for r, k in rows) / n,
                    "top_is_self": sum(top(r) == r for r, _ in rows) / n,
                    "chance_one_key": sum(1.0 / (r + 1) for r, _ in rows) / n,
                    "_tops": [top(r) for r, _ in rows]})
    layers = []
    for name in _sorted_heads(list(maps)):
        layer = name.split(".head.")[0]
        if layer not in layers:
            layers.append(layer)
    best = []
    for layer in layers:
        names = [h for h in _sorted_heads(list(maps)) if h.split(".head.")[0] == layer]
        tops = [o["_tops"] for o in out if o["head"] in names]
        bx = sum(max(float(maps[h][r][k]) for h in names) for r, k in rows) / n
        bs = sum(max(float(maps[h][r][r]) for h in names) for r, _ in rows) / n
        best.append({"head": layer + ".best_head", "x_k": bx, "self": bs,
                     "bos": sum(max(float(maps[h][r][0]) for h in names) for r, _ in rows) / n,
                     "intended": sum(max(float(maps[h][r][k]) + float(maps[h][r][r]) for h in names)
                                     for r, k in rows) / n,
                     "top_is_x_k": sum(any(t[i] == k for t in tops) for i, (r, k) in enumerate(rows)) / n,
                     "top_is_self": sum(any(t[i] == r for t in tops) for i, (r, _) in enumerate(rows)) / n,
                     "chance_one_key": out[0]["chance_one_key"]})
    for o in out:
        del o["_tops"]
    return out + best


def intended_table(rows, meta):
    """parity_intended_attention's rows as CSV text (the cell and samples in every row)."""
    cols = ("x_k", "self", "bos", "intended", "top_is_x_k", "top_is_self", "chance_one_key")
    lines = ["head,n,samples," + ",".join(cols)]
    for r in rows:
        lines.append("%s,%s,%s,%s" % (r["head"], meta.get("n", "?"), meta.get("samples", "?"),
                                     ",".join("%.4f" % r[c] for c in cols)))
    return "\n".join(lines) + "\n"


def plot_attention(path, rows="all", gamma=0.5, heads=None, title=None):
    """dump_attention's maps, one panel per head (see the module doc); for a parity model, each panel's
    title carries its attention on the intended keys (parity_intended_attention)."""
    plt = _plt()
    maps, meta = read_attention(path)
    intended = {}
    if meta.get("task") == "parity":
        intended = {r["head"]: r for r in parity_intended_attention(maps, meta)}
    tokens = meta.get("example_tokens", "")
    names = _sorted_heads(heads or list(maps))
    for n in names:
        if n not in maps:
            raise InputError("%s has no head %r (it has %s)" % (path, n, ", ".join(maps)))
    T = maps[names[0]].shape[0]
    if len(tokens) != T:
        raise InputError("%s: metadata example_tokens has %d tokens, the maps %d" % (path, len(tokens), T))
    layers = sorted({n.split(".head.")[0] for n in names})
    per_layer = max(sum(1 for n in names if n.startswith(l + ".head.")) for l in layers)
    side = 4.2 if T <= 64 else 5.5
    fig, axes = plt.subplots(len(layers), per_layer, figsize=(side * per_layer + 1.2, side * len(layers) + 0.8),
                             squeeze=False, constrained_layout=True)
    constructed = meta.get("model") == "constructed"
    im = None
    for li, l in enumerate(layers):
        row = [n for n in names if n.startswith(l + ".head.")]
        for hi in range(per_layer):
            ax = axes[li][hi]
            if hi >= len(row):
                ax.axis("off")
                continue
            n = row[hi]
            t = n
            if constructed:
                k = int(n.rsplit(".", 1)[1])
                t = "constructed head %d (%s)" % (k + 1, _HEADS[k] if k < 4 else "?")
            if n in intended:
                r = intended[n]
                t = "%s: x_k %.2f, self %.2f\n(y_k's rows; one key by chance %.3f)" % (
                    n, r["x_k"], r["self"], r["chance_one_key"])
            im = _attention_panel(ax, maps[n], tokens, rows, gamma, t)
    _colorbar(fig, im, axes, gamma)
    what = "constructed model" if constructed else meta.get("model", "")
    levels = {"addition": 2, "multiplication": 3}.get(meta.get("task", "addition"), 1)  # the task's ID levels
    offsets = ", ".join(meta.get(k, "?") for k in ("s1", "s2", "s3")[:levels])
    fig.suptitle(title or "attention of %s on %s, mean over %s samples, offsets (%s)\ntick labels: the first sample's "
                 "tokens" % (what, _cell_name(meta), meta.get("samples", "?"), offsets))
    return fig


def plot_compare(out_dir, rows="all", gamma=0.5, title=None):
    """compare_attention's side-by-side maps of the matched pairs (see the module doc)."""
    plt = _plt()
    try:
        with open(os.path.join(out_dir, "compare.json")) as f:
            rep = json.load(f)
    except OSError as e:
        raise InputError("cannot read %s/compare.json: %s" % (out_dir, e.strerror or e)) from None
    except ValueError as e:
        raise InputError("%s/compare.json is not valid JSON: %s" % (out_dir, e)) from None
    cmaps, cmeta = read_attention(os.path.join(out_dir, "constructed"))
    lmaps, lmeta = read_attention(os.path.join(out_dir, "learned"))
    tokens = cmeta.get("example_tokens", "")
    heads = {h["name"]: h["head"] for h in rep["constructed"]["heads"]}
    pairs = rep.get("matching") or []
    if not pairs:
        raise InputError("%s/compare.json has no matching" % out_dir)
    T = next(iter(cmaps.values())).shape[0]
    side = 4.2 if T <= 64 else 5.2
    fig, axes = plt.subplots(len(pairs), 2, figsize=(2 * side + 1.4, side * len(pairs) + 0.6), squeeze=False,
                             constrained_layout=True)
    im = None
    for i, p in enumerate(pairs):
        k = heads[p["constructed"]]
        cname = "layers.0.head.%d" % (k - 1)
        if cname not in cmaps or p["learned"] not in lmaps:
            raise InputError("%s: the maps of pair %s / %s are missing" % (out_dir, p["constructed"], p["learned"]))
        _attention_panel(axes[i][0], cmaps[cname], tokens, rows, gamma,
                         "constructed head %d (%s)" % (k, p["constructed"]))
        im = _attention_panel(axes[i][1], lmaps[p["learned"]], lmeta.get("example_tokens", tokens), rows, gamma,
                              "learned %s: share %.3f, JS %.3f bits" % (p["learned"], p["share"], p["js_bits"]))
    _colorbar(fig, im, axes, gamma)
    fig.suptitle(title or "constructed | learned (%s), TA(%s, %s), mean over %s samples\npairs by smallest summed JS; "
                 "tick labels: the first sample's tokens" % (rep.get("learned", ""), rep.get("n"), rep.get("m"),
                                                             rep.get("samples")))
    return fig


def _read_log(path):
    if os.path.isdir(path):
        path = os.path.join(path, "log.csv")
    rows = _read_csv(path)
    cols = {k: [_num(path, r, k) for r in rows] for k in ("step", "loss", "lr")}
    ev = os.path.join(os.path.dirname(path) or ".", "eval.csv")
    stem = os.path.basename(path)
    if stem.endswith("log.csv") and stem != "log.csv":  # e.g. coupled_log.csv beside coupled_eval.csv
        ev = os.path.join(os.path.dirname(path) or ".", stem[:-len("log.csv")] + "eval.csv")
    evals = None
    if os.path.exists(ev):
        er = _read_csv(ev)
        evals = {k: [_num(ev, r, k) for r in er] for k in ("step", "mean_exact_match", "min_exact_match")}
    return path, cols, evals


def plot_loss(paths, labels=None, title=None):
    """train's log.csv (and eval.csv beside it) for one or more runs (see the module doc)."""
    plt = _plt()
    runs = [_read_log(p) for p in paths]
    if labels and len(labels) != len(runs):
        raise InputError("%d --label for %d runs" % (len(labels), len(runs)))
    has_eval = any(e is not None for _, _, e in runs)
    n = 3 if has_eval else 2
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 4.2), constrained_layout=True)
    for i, (path, cols, evals) in enumerate(runs):
        lab = labels[i] if labels else (os.path.basename(os.path.dirname(os.path.abspath(path))) if len(runs) > 1 else None)
        # log.csv prints the loss with 6 decimals: a window mean below 5e-7 reads 0.000000, which a log
        # axis cannot show; such points are drawn at the resolution floor, on a dotted line.
        floor = 5e-7
        loss = [v if v > floor else floor for v in cols["loss"]]
        mk = dict(marker="o", ms=3) if len(loss) < 50 else {}
        line, = axes[0].plot(cols["step"], loss, label=lab, **mk)
        if any(v <= floor for v in cols["loss"]):
            axes[0].axhline(floor, color="grey", ls=":", lw=1)
            axes[0].annotate("printed as 0 in log.csv (resolution 1e-6)", (0.02, floor), xycoords=("axes fraction",
                             "data"), xytext=(0, 3), textcoords="offset points", fontsize=7, color="grey")
        axes[1].plot(cols["step"], cols["lr"], color=line.get_color(), label=lab)
        if evals:
            axes[2].plot(evals["step"], [100 * v for v in evals["mean_exact_match"]], color=line.get_color(),
                         marker="o", ms=3, label=(lab + ": " if lab else "") + "mean over cells")
            axes[2].plot(evals["step"], [100 * v for v in evals["min_exact_match"]], color=line.get_color(),
                         marker="v", ms=3, ls="--", label=(lab + ": " if lab else "") + "worst cell")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("training loss (cross-entropy per response token, nats)")
    axes[0].set_title("loss (mean over each logging window)")
    axes[1].set_ylabel("learning rate")
    axes[1].set_title("schedule")
    axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(True, which="both", alpha=0.3)
    if has_eval:
        axes[2].set_ylabel("in-distribution exact match (%)")
        axes[2].set_ylim(-2, 102)
        axes[2].set_title("periodic evaluation (eval.csv)")
        axes[2].legend(fontsize=8)
    if len(runs) > 1 or labels:
        axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def read_grid_eval(path):
    """evaluate_grid's --json report: [(instance, char_acc, seq_acc, steps_hist)], steps_hist[k] = the
    samples that halted after k recurrent steps."""
    try:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError("cannot read %s: %s" % (path, e))
    rows = j.get("instances") if isinstance(j, dict) else None
    if not isinstance(rows, list) or not rows:
        raise InputError("%s: no \"instances\" list (not an evaluate_grid --json report)" % path)
    out = []
    for i, r in enumerate(rows):
        try:
            name, char, seq = str(r["instance"]), float(r["char_acc"]), float(r["seq_acc"])
            hist = [int(c) for c in r["steps_hist"]]
        except (KeyError, TypeError, ValueError) as e:
            raise InputError("%s: instance %d: missing or malformed field (%s)" % (path, i, e))
        if not hist or min(hist) < 0 or sum(hist) == 0:
            raise InputError("%s: instance %s: steps_hist must be counts with a positive sum" % (path, name))
        if not (0 <= char <= 1 and 0 <= seq <= 1):
            raise InputError("%s: instance %s: accuracies must be in [0, 1]" % (path, name))
        out.append((name, char, seq, hist))
    return out


def _hist_quantile(hist, q):
    """The q-quantile of the steps a histogram counts (the lowest k whose cumulative share reaches q)."""
    total, acc = sum(hist), 0
    for k, c in enumerate(hist):
        acc += c
        if acc >= q * total:
            return k
    return len(hist) - 1


def plot_halting(path, title=None):
    """evaluate_grid's report: halting steps and accuracy per instance (see the module doc)."""
    plt = _plt()
    rows = read_grid_eval(path)
    xs = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 * len(rows) + 2.5), 4.5), constrained_layout=True)
    stats = []
    for name, _, _, hist in rows:
        mean = sum(k * c for k, c in enumerate(hist)) / sum(hist)
        stats.append({"label": name, "mean": mean, "med": _hist_quantile(hist, 0.5),
                      "q1": _hist_quantile(hist, 0.25), "q3": _hist_quantile(hist, 0.75),
                      "whislo": _hist_quantile(hist, 0.05), "whishi": _hist_quantile(hist, 0.95), "fliers": []})
    ax.bxp(stats, positions=xs, widths=0.5, showmeans=True, showfliers=False,
           meanprops=dict(marker="o", markerfacecolor="C0", markeredgecolor="C0", markersize=5))
    ax.set_ylabel("recurrent steps before halting\n(box: quartiles, whiskers: 5-95%, dot: mean)")
    ax.set_xlabel("problem instance (terms x digits)")
    ax.grid(True, axis="y", alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(xs, [r[1] for r in rows], "s--", color="C1", label="character accuracy")
    ax2.plot(xs, [r[2] for r in rows], "^--", color="C2", label="sequence accuracy")
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_ylabel("accuracy")
    ax2.legend(fontsize=8, loc="upper right")
    ax.set_xticks(xs)
    ax.set_xticklabels([r[0] for r in rows], rotation=30, ha="right")
    ax.set_title(title or "halting steps and accuracy per instance")
    return fig


# ---- command line ----------------------------------------------------------------------------------

def _save(fig, out, dpi):
    import io
    check_output_path(out)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    from .files import atomic_write
    atomic_write(out, buf.getvalue())
    _plt().close(fig)
    print("figures: wrote %s" % out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m manyadd.figures", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="exit codes: 0 done, 2 bad usage or input")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, default_out):
        p.add_argument("-o", "--out", help="PNG to write (default: %s)" % default_out)
        p.add_argument("--dpi", type=int, default=150)
        p.add_argument("--title")
    g = sub.add_parser("grid", help="accuracy grid CSV of evaluate")
    g.add_argument("csv")
    g.add_argument("--train", type=int, nargs="+", metavar="N",
                   help="training region: N M (operand length and count; multiplication: digits of A and B), or "
                        "parity's longest training query N")
    g.add_argument("--model", help="model directory whose config.json gives the training region (and the task)")
    g.add_argument("--task", choices=TASKS, help="the grid's task, for its axes (default: the report or config.json "
                                                 "beside the CSV, else addition)")
    common(g, "the CSV with .png")
    ln = sub.add_parser("lengths", help="accuracy against the query length over seeds (parity, Figure 3)")
    ln.add_argument("--curve", nargs="+", action="append", required=True, metavar=("LABEL", "PATH"),
                    help="a label, then one-axis grid CSVs, run directories or run_config.py's configuration "
                         "directories (every run in it); repeat for each curve")
    ln.add_argument("--metric", choices=("both",) + tuple(METRIC_NAMES), default="both")
    ln.add_argument("--band", choices=BANDS, default="range",
                    help="range: median and smallest..largest seed (default); ci95: mean and its 95%% t-interval")
    ln.add_argument("--train", type=int, metavar="N", help="longest training query (default: a run's config.json)")
    ln.add_argument("--table", help="also write the curves' numbers (CSV) here")
    common(ln, "lengths.png beside the first path")
    a = sub.add_parser("alignment", help="grid_alignment.csv of compare_attention --grid")
    a.add_argument("csv")
    a.add_argument("--train", type=int, nargs=2, metavar=("N", "M"))
    a.add_argument("--model")
    a.add_argument("--reference", type=int, nargs=2, metavar=("N", "M"), default=(11, 11))
    common(a, "the CSV with .png")
    t = sub.add_parser("attention", help="attention.safetensors of dump_attention")
    t.add_argument("path")
    t.add_argument("--rows", choices=("all", "response"), default="all")
    t.add_argument("--gamma", type=float, default=0.5, help="colour scale exponent (1 = linear)")
    t.add_argument("--heads", nargs="+", help="heads to draw (default all), e.g. layers.0.head.1")
    t.add_argument("--table", help="parity: also write each head's attention on the intended keys (CSV) here")
    common(t, "attention.png beside the file")
    c = sub.add_parser("compare", help="a compare_attention output directory")
    c.add_argument("dir")
    c.add_argument("--rows", choices=("all", "response"), default="all")
    c.add_argument("--gamma", type=float, default=0.5)
    common(c, "DIR/side_by_side_mpl.png")
    lo = sub.add_parser("loss", help="train's log.csv (files or run directories)")
    lo.add_argument("runs", nargs="+")
    lo.add_argument("--label", action="append")
    common(lo, "loss_curve_mpl.png beside the first log")
    ha = sub.add_parser("halting", help="evaluate_grid's --json report (paper 003's Fig. 2)")
    ha.add_argument("json")
    common(ha, "the JSON with .png")
    args = ap.parse_args(argv)
    try:
        if args.dpi < 10 or args.dpi > 1200:
            raise InputError("--dpi must be in [10, 1200]")
        if getattr(args, "gamma", 1.0) is not None and not 0 < getattr(args, "gamma", 1.0) <= 4:
            raise InputError("--gamma must be in (0, 4]")
        if args.cmd == "grid":
            out = args.out or os.path.splitext(args.csv)[0] + ".png"
            check_output_path(out)
            if args.train is not None and len(args.train) not in (1, 2):
                raise InputError("--train takes N M (a two-axis grid) or N (parity's query lengths)")
            if args.train is not None and min(args.train) < 1:
                raise InputError("--train values must be >= 1")
            if args.train is not None and len(args.train) == 1 and _grid_has_m(args.csv):
                raise InputError("--train N alone is for a one-axis grid (parity); this grid needs N M")
            train = args.train if args.train is None or len(args.train) == 2 else [args.train[0], 1]
            fig = plot_grid(args.csv, train, args.model, args.title, task=args.task)
        elif args.cmd == "lengths":
            curves = []
            for c in args.curve:
                if len(c) < 2:
                    raise InputError("--curve %s: a label and at least one path" % c[0])
                curves.append((c[0], c[1:]))
            first = curves[0][1][0]
            out = args.out or os.path.join(first if os.path.isdir(first) else os.path.dirname(first) or ".",
                                           "lengths.png")
            check_output_path(out)
            if args.table:
                check_output_path(args.table)
            if args.train is not None and args.train < 1:
                raise InputError("--train must be >= 1")
            train_n = args.train
            if train_n is None:
                region, _ = _train_region(grid_files(first)[0])
                train_n = region[0] if region else None
            metrics = ("answer_accuracy", "accuracy") if args.metric == "both" else (args.metric,)
            fig = plot_lengths(curves, metrics, train_n, args.band, args.title)
            if args.table:
                from .files import atomic_write
                atomic_write(args.table, length_table(curves, metrics, args.band))
                print("figures: wrote %s" % args.table)
        elif args.cmd == "alignment":
            out = args.out or os.path.splitext(args.csv)[0] + ".png"
            check_output_path(out)
            fig = plot_alignment(args.csv, args.train, args.model, tuple(args.reference), args.title)
        elif args.cmd == "attention":
            base = args.path if os.path.isdir(args.path) else os.path.dirname(args.path) or "."
            out = args.out or os.path.join(base, "attention.png")
            check_output_path(out)
            maps, meta = read_attention(args.path)
            text = None
            if meta.get("task") == "parity":
                text = intended_table(parity_intended_attention(maps, meta), meta)
            elif args.table:
                raise InputError("--table: the intended keys are defined for task parity (these maps: %s)"
                                 % meta.get("task", "addition"))
            if args.table:
                check_output_path(args.table)
            fig = plot_attention(args.path, args.rows, args.gamma, args.heads, args.title)
            if text is not None:
                print(text, end="")
                if args.table:
                    from .files import atomic_write
                    atomic_write(args.table, text)
                    print("figures: wrote %s" % args.table)
        elif args.cmd == "compare":
            out = args.out or os.path.join(args.dir, "side_by_side_mpl.png")
            check_output_path(out)
            fig = plot_compare(args.dir, args.rows, args.gamma, args.title)
        elif args.cmd == "halting":
            out = args.out or os.path.splitext(args.json)[0] + ".png"
            check_output_path(out)
            fig = plot_halting(args.json, args.title)
        else:
            first = args.runs[0] if os.path.isdir(args.runs[0]) else os.path.dirname(args.runs[0]) or "."
            out = args.out or os.path.join(first, "loss_curve_mpl.png")
            check_output_path(out)
            fig = plot_loss(args.runs, args.label, args.title)
        _save(fig, out, args.dpi)
    except InputError as e:
        print("figures: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
