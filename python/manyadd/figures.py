"""Figures with matplotlib from the files the tools write (the C++ tools also draw quick-look PNGs with a
bitmap font; these are the figures to read and to publish).

    python3 -m manyadd.figures grid RUN/grid.csv -o grid.png [--train 10 10 | --model DIR]
    python3 -m manyadd.figures alignment OUT/grid_alignment.csv -o alignment.png [--train 10 10]
    python3 -m manyadd.figures attention OUT/attention.safetensors -o attention.png [--rows response]
    python3 -m manyadd.figures compare OUT/compare_TA11x11 -o side_by_side.png [--rows response]
    python3 -m manyadd.figures loss RUN [RUN2 ...] -o loss.png [--label A --label B]

grid       an accuracy grid CSV of `evaluate` (n,m,samples,exact,accuracy; NA where the position IDs do
           not fit) in the paper's layout (Figure 1): x = number of operands, y = length of each operand
           (top to bottom), exact-match accuracy in % with a colour bar, ticks 2, 5, 10, ... / 1, 5, 10, ...,
           the training region boxed in red, NA cells grey. The training region comes from --train N M,
           else --model DIR's config.json, else the `evaluate --json` report beside the CSV (same stem),
           else a config.json beside it; without any, no box (said on stderr).
alignment  `compare_attention --grid`'s grid_alignment.csv: accuracy, the best matching's mean share, and
           for each constructed head the share of the learned head matched at the reference cell
           (--reference N M, default 11 11), same layout.
attention  `dump_attention`'s attention.safetensors (or its directory): one panel per layer and head, row =
           query, column = key, token tick labels (every token up to 48 tokens, else the separators
           '$ + = >'), a colour bar (square-root scale by default: --gamma 1 for linear).
compare    a `compare_attention` output directory (compare.json, constructed/, learned/): one row per
           matched pair, constructed | learned, with the pair's share and JS divergence in the titles.
loss       train's log.csv (or run directories holding it): loss (log scale), learning rate, and, where an
           eval.csv sits beside the log, the in-distribution exact match, against the step.

Every command writes a PNG (-o, default beside the input) at --dpi (default 150). Exit codes: 0 done,
2 bad usage or input (a missing or malformed file), as the project's tools.
The functions (plot_grid, plot_alignment, plot_attention, plot_compare, plot_loss) return a matplotlib
Figure for notebooks.
"""
import argparse
import csv
import json
import math
import os
import sys

from . import safetensors
from .files import InputError, check_output_path

__all__ = ["read_grid_csv", "read_attention", "plot_grid", "plot_alignment", "plot_attention", "plot_compare",
           "plot_loss", "main"]

CMAP_ACCURACY = "Blues"   # the paper's heatmaps: generalization in blue
CMAP_SHARE = "viridis"
CMAP_ATTENTION = "magma"  # bright = attended, as the paper's Figure 7
NA_COLOUR = "#bdbdbd"


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


# ---- drawing helpers -------------------------------------------------------------------------------

def _colormap(name):
    import matplotlib
    return (matplotlib.colormaps[name] if hasattr(matplotlib, "colormaps") else matplotlib.cm.get_cmap(name)).copy()


def _ticks(values, step=5):
    """The paper's ticks: the first value, then multiples of step."""
    t = [values[0]] + [v for v in values if v % step == 0 and v != values[0]]
    return t


def _heatmap(ax, values, ns, ms, cmap, vmin, vmax, train=None, title=None):
    import numpy as np
    from matplotlib.patches import Rectangle
    a = np.ma.masked_invalid(np.array(values, dtype=float))
    cm = _colormap(cmap)
    cm.set_bad(NA_COLOUR)
    im = ax.imshow(a, cmap=cm, vmin=vmin, vmax=vmax, origin="upper", aspect="equal", interpolation="nearest",
                   extent=(ms[0] - 0.5, ms[-1] + 0.5, ns[-1] + 0.5, ns[0] - 0.5))
    ax.set_xticks(_ticks(ms))
    ax.set_yticks(_ticks(ns))
    ax.set_xlabel("Number of Operands")
    ax.set_ylabel("Length of Each Operand")
    ax.tick_params(top=False, labeltop=False)
    if train:
        tn, tm = train
        x0, x1 = max(ms[0], 2) - 0.5, min(tm, ms[-1]) + 0.5
        y0, y1 = max(ns[0], 1) - 0.5, min(tn, ns[-1]) + 0.5
        if x1 > x0 and y1 > y0:
            ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor="red", linewidth=2))
    if title:
        ax.set_title(title)
    return im


def plot_grid(csv_path, train=None, model=None, title=None, column="accuracy", cmap=CMAP_ACCURACY):
    """Exact-match accuracy grid of `evaluate` (see the module doc)."""
    plt = _plt()
    values, ns, ms = read_grid_csv(csv_path, column)
    region, source = _train_region(csv_path, train, model)
    if region is None:
        print("figures: no training region known for %s (give --train N M or --model DIR): no box drawn" % csv_path,
              file=sys.stderr)
    if title is None and column == "accuracy":
        samples = {r.get("samples") for r in _read_csv(csv_path) if r.get("samples") not in (None, "0")}
        title = "exact match on TA(n, m)" + (", %s samples per cell" % samples.pop() if len(samples) == 1 else "")
        name = model or _report(csv_path).get("model")
        if isinstance(name, str):
            title = "%s\n%s" % (os.path.basename(os.path.normpath(name)), title)
    pct = [[100.0 * v for v in row] for row in values]
    w = 1.6 + 0.19 * len(ms)
    fig, ax = plt.subplots(figsize=(min(max(w, 5.5), 12), min(max(0.19 * len(ns) + 1.6, 4.0), 10)),
                           constrained_layout=True)
    im = _heatmap(ax, pct, ns, ms, cmap, 0, 100, region, None)
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


def plot_attention(path, rows="all", gamma=0.5, heads=None, title=None):
    """dump_attention's maps, one panel per head (see the module doc)."""
    plt = _plt()
    maps, meta = read_attention(path)
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
            im = _attention_panel(ax, maps[n], tokens, rows, gamma, t)
    _colorbar(fig, im, axes, gamma)
    what = "constructed model" if constructed else meta.get("model", "")
    fig.suptitle(title or "attention of %s on TA(%s, %s), mean over %s samples, offsets (%s, %s)\ntick labels: the "
                 "first sample's tokens" % (what, meta.get("n", "?"), meta.get("m", "?"), meta.get("samples", "?"),
                                      meta.get("s1", "?"), meta.get("s2", "?")))
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
    g.add_argument("--train", type=int, nargs=2, metavar=("N", "M"), help="training region: operand length, count")
    g.add_argument("--model", help="model directory whose config.json gives the training region")
    common(g, "the CSV with .png")
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
    args = ap.parse_args(argv)
    try:
        if args.dpi < 10 or args.dpi > 1200:
            raise InputError("--dpi must be in [10, 1200]")
        if getattr(args, "gamma", 1.0) is not None and not 0 < getattr(args, "gamma", 1.0) <= 4:
            raise InputError("--gamma must be in (0, 4]")
        if args.cmd == "grid":
            out = args.out or os.path.splitext(args.csv)[0] + ".png"
            check_output_path(out)
            fig = plot_grid(args.csv, args.train, args.model, args.title)
        elif args.cmd == "alignment":
            out = args.out or os.path.splitext(args.csv)[0] + ".png"
            check_output_path(out)
            fig = plot_alignment(args.csv, args.train, args.model, tuple(args.reference), args.title)
        elif args.cmd == "attention":
            base = args.path if os.path.isdir(args.path) else os.path.dirname(args.path) or "."
            out = args.out or os.path.join(base, "attention.png")
            check_output_path(out)
            fig = plot_attention(args.path, args.rows, args.gamma, args.heads, args.title)
        elif args.cmd == "compare":
            out = args.out or os.path.join(args.dir, "side_by_side_mpl.png")
            check_output_path(out)
            fig = plot_compare(args.dir, args.rows, args.gamma, args.title)
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
