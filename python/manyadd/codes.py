"""Position codes of a learned model, and whether they alias (learn/README.md, "Position codes").

A model reads which operand a token belongs to from its level-2 position table alone. If two IDs that
never occur in one training sequence (IDs more than ~m apart in SA(n, m)) get similar rows, nothing in
training separates them, and at test time a query attends to the wrong operand. Three views:

    code_similarity(model, level)       cosine of the table's rows (IDs 1..max_pos), (P, P), and by ID
                                        distance d the mean and max over the pairs (a, a + d)
    position_scores(model, level)       per head of layer 0, the part of the attention score made by the
                                        level's rows alone, (H, P, P): scale (Wq_h (g p_a / r)) . (Wk_h
                                        (g p_b / r)), g the attn_norm1 weight, r the typical RMS of the
                                        embedding (the mean over a reference instance's rows): the
                                        bilinear form the table presents to each head, first order
    attended_keys(model, problem, ...)  teacher-forced on one instance: the first wrong prediction (or a
                                        given row), and per layer and head the keys it attends most, with
                                        their tokens and position IDs, flagged where a key is the one the
                                        algorithm reads (Theorem 4.1's heads 1-2: level 1 = the query's + 1,
                                        level 2 = the query's - 1)

    python3 -m manyadd.codes MODEL [--cell N M | --problem P] [--seed 12345] [--s1 1] [--s2 1]
                                   [-o MODEL/codes.png] [--no-figure] [--dpi 120]

prints the similarity by distance for every level (a level is chosen only through the functions
above), the keys for the instance (default TA(10, 14) at offsets --s1, --s2 = 1, evaluate's first
sample of the cell), and draws the figure (cosine matrices, similarity by distance, the position
scores of each head, the attended keys; --no-figure prints only). Exit codes: 0 done, 2 bad input.
"""
import argparse
import os
import sys

import torch

from . import format as fmt
from .files import InputError, check_output_path
from .learned import load_learned

__all__ = ["code_similarity", "similarity_by_distance", "position_scores", "attended_keys", "plot_codes", "main"]


def _table(model, level):
    if not 1 <= level <= model.cfg.tables:
        raise InputError("level %d: the model has %d position table%s (pos_mode %s)"
                         % (level, model.cfg.tables, "" if model.cfg.tables == 1 else "s", model.cfg.pos_mode))
    return model.pos_emb[level - 1].weight.detach().to(torch.float64)[1:]  # IDs 1..max_pos (0: BOS, unused)


def code_similarity(model, level):
    """Cosine similarity (P, P) of the level's table rows, IDs 1..max_pos (row/column a - 1 = ID a)."""
    w = _table(model, level)
    u = w / w.norm(dim=1, keepdim=True).clamp_min(1e-30)
    return u @ u.t()


def similarity_by_distance(sim):
    """{d: (mean, max)} over the pairs (a, a + d) of a similarity matrix, d = 1..P - 1."""
    P = sim.shape[0]
    return {d: (float(torch.diagonal(sim, d).mean()), float(torch.diagonal(sim, d).max())) for d in range(1, P)}


def _typical_rms(model):
    ex = model.example("57+48+96")
    with torch.no_grad():
        _, cache = model.run_with_cache(ex.tokens, ex.pos, names_filter=lambda n: n == "blocks.0.hook_resid_pre")
    x = cache["blocks.0.hook_resid_pre"][0].to(torch.float64)
    return float(x.pow(2).mean(dim=1).sqrt().mean())


def position_scores(model, level):
    """(H, P, P): per head of layer 0, the score the level's rows alone give query ID a (row) and key ID
    b (column), the rows scaled by attn_norm1's weight over the embedding's typical RMS."""
    w = _table(model, level)
    blk = model.layers[0]
    g = blk.attn_norm1.weight.detach().to(torch.float64)
    x = w * g / _typical_rms(model)
    H, D = model.cfg.n_heads, model.cfg.d_head
    q = (x @ blk.attn.q.weight.detach().to(torch.float64).t()).view(-1, H, D)
    k = (x @ blk.attn.k.weight.detach().to(torch.float64).t()).view(-1, H, D)
    scale = {"inv_sqrt_dhead": 1.0 / D ** 0.5, "none": 1.0, "positional": 0.0}[model.cfg.attn_scale]
    return torch.einsum("ahd,bhd->hab", q, k) * scale


def attended_keys(model, problem, s1=1, s2=1, row=None, top=4):
    """Teacher-forced on `problem` at offsets (s1, s2): (query, heads). query = dict(row, token, ids,
    target, predicted); row = the first wrong prediction of the response (None if none and no row given).
    heads = [(layer, head, [(weight, key row, token, ids, intended)])], the top keys by weight."""
    ex = model.example(problem, s1, s2)
    with torch.no_grad():
        logits, cache = model.run_with_cache(ex.tokens, ex.pos, names_filter=lambda n: n.endswith("hook_pattern"))
    pred = logits[0].argmax(-1).tolist()
    toks = fmt.decode(ex.tokens[0])
    ids = [p[0].tolist() for p in ex.pos]
    if row is None:
        wrong = [i for i, t in enumerate(ex.targets) if t >= 0 and pred[i] != t]
        if not wrong:
            return None, []
        row = wrong[0]
    if not 0 <= row < len(toks):
        raise InputError("row %d outside the sequence (N = %d)" % (row, len(toks)))
    target = ex.targets[row]
    q = dict(row=row, token=toks[row], ids=tuple(i[row] for i in ids),
             target=fmt.decode([target]) if target >= 0 else None, predicted=fmt.decode([pred[row]]))
    heads = []
    for l in range(model.cfg.n_layers):
        pat = cache["blocks.%d.attn.hook_pattern" % l][0]
        for h in range(model.cfg.n_heads):
            wts = pat[h, row, :row + 1]
            order = torch.argsort(wts, descending=True)[:top].tolist()
            keys = []
            for j in order:
                kid = tuple(i[j] for i in ids)
                intended = (len(kid) >= 2 and q["ids"][0] != 0 and kid[0] == q["ids"][0] + 1
                            and kid[1] == q["ids"][1] - 1 and toks[j].isdigit())
                keys.append((float(wts[j]), j, toks[j], kid, intended))
            heads.append((l, h, keys))
    return q, heads


def _instance(args, model):
    if args.problem:
        return args.problem
    n, m = args.cell
    if n < 1 or m < 2 or n > 1000 or m > 1000:
        raise InputError("--cell N M needs 1 <= N <= 1000 and 2 <= M <= 1000")
    return "+".join(fmt.sample_TA(fmt.Rng(fmt.cell_seed(args.seed, n, m)), n, m))


def keys_text(q, heads):
    if q is None:
        return "no wrong prediction on this instance (teacher-forced)\n"
    out = ["query row %d '%s' IDs %s: target '%s', predicted '%s'" % (q["row"], q["token"], q["ids"], q["target"],
                                                                     q["predicted"])]
    for l, h, keys in heads:
        out.append("  layer %d head %d: " % (l, h) + "  ".join(
            "%.2f %s'%s'%s" % (w, "*" if ok else "", t, kid) for w, _, t, kid, ok in keys))
    out.append("  (* = a digit with level-1 ID + 1 and level-2 ID - 1 of the query's: what Theorem 4.1's "
               "heads 1-2 read)")
    return "\n".join(out) + "\n"


def gains_text(model):
    """pos_mode coupled_rel: its only position parameters, the gains per layer, head and level by ID
    difference d = key - query (rel_bias.weight)."""
    g, W = model.rel_bias.weight.detach(), model.cfg.rel_window
    out = ["pos_mode coupled_rel: no position table; score gains by ID difference d = key - query, d = %d..%d"
           % (-W, W)]
    for l in range(g.shape[0]):
        for h in range(g.shape[1]):
            out.append("layer %d head %d  " % (l, h) + "   ".join(
                "level %d: " % (lv + 1) + " ".join("%+6.2f" % float(x) for x in g[l, h, lv]) for lv in range(2)))
    return "\n".join(out) + "\n"


def distance_text(model, distances=(1, 2, 3, 5, 8, 10, 11, 12, 14, 16, 20, 24, 30)):
    if model.cfg.pos_mode == "coupled_rel":
        return gains_text(model)
    out = []
    for lv in range(1, model.cfg.tables + 1):
        by = similarity_by_distance(code_similarity(model, lv))
        out.append("level %d (%s) cosine by ID distance, mean/max: " % (lv, model.cfg.pos_codes[lv - 1]) + "  ".join(
            "d%d %.2f/%.2f" % (d, *by[d]) for d in distances if d in by))
    return "\n".join(out) + "\n"


def plot_codes(model, problem, s1=1, s2=1, title=None):
    from .figures import _plt, CMAP_ATTENTION
    plt = _plt()
    L, H = model.cfg.tables, model.cfg.n_heads
    fig, axes = plt.subplots(L, 2 + H, figsize=(3.2 * (2 + H), 3.0 * L + 1.4), squeeze=False)
    for lv in range(1, L + 1):
        sim = code_similarity(model, lv)
        ax = axes[lv - 1][0]
        im = ax.imshow(sim.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, extent=(0.5, sim.shape[0] + 0.5,
                                                                         sim.shape[0] + 0.5, 0.5))
        ax.set_title("level %d (%s): cosine of rows" % (lv, model.cfg.pos_codes[lv - 1]), fontsize=9)
        ax.set_xlabel("ID")
        ax.set_ylabel("ID")
        fig.colorbar(im, ax=ax, fraction=0.046)
        by = similarity_by_distance(sim)
        ax = axes[lv - 1][1]
        d = sorted(by)
        ax.plot(d, [by[x][0] for x in d], label="mean")
        ax.plot(d, [by[x][1] for x in d], label="max")
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_ylim(-1, 1)
        ax.set_xlabel("ID distance d")
        ax.set_title("level %d: cosine of (a, a + d)" % lv, fontsize=9)
        ax.legend(fontsize=8)
        sc = position_scores(model, lv)
        for h in range(H):
            ax = axes[lv - 1][2 + h]
            s = sc[h] - sc[h].max(dim=1, keepdim=True).values  # each query row relative to its best key
            im = ax.imshow(s.numpy(), cmap=CMAP_ATTENTION, vmin=-10, vmax=0,
                           extent=(0.5, s.shape[0] + 0.5, s.shape[0] + 0.5, 0.5))
            ax.set_title("level %d, head %d: score(query a, key b)\n- row max" % (lv, h), fontsize=9)
            ax.set_xlabel("key ID b")
            ax.set_ylabel("query ID a")
    q, heads = attended_keys(model, problem, s1, s2)
    sub = "no wrong prediction on the instance" if q is None else (
        "first wrong prediction: row %d, IDs %s, target '%s', predicted '%s'; top keys " % (
            q["row"], q["ids"], q["target"], q["predicted"]) + "; ".join(
            "h%d: " % h + ", ".join("%.2f%s%s" % (w, "*" if ok else "", kid) for w, _, _, kid, ok in keys[:3])
            for _, h, keys in heads[:H]))
    fig.suptitle((title or "position codes") + "\n" + sub, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m manyadd.codes", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="exit codes: 0 done, 2 bad usage or input")
    ap.add_argument("model", help="a train output directory")
    ap.add_argument("--cell", type=int, nargs=2, metavar=("N", "M"), default=(10, 14),
                    help="the instance: evaluate's first sample of TA(N, M) (default 10 14)")
    ap.add_argument("--problem", help="the instance as '57+48+96' (instead of --cell)")
    ap.add_argument("--seed", type=int, default=12345, help="evaluate's test seed (default 12345)")
    ap.add_argument("--s1", type=int, default=1)
    ap.add_argument("--s2", type=int, default=1)
    ap.add_argument("-o", "--out", help="PNG to write (default MODEL/codes.png)")
    ap.add_argument("--no-figure", action="store_true", help="print the numbers only")
    ap.add_argument("--dpi", type=int, default=120)
    args = ap.parse_args(argv)
    try:
        if not 10 <= args.dpi <= 1200:
            raise InputError("--dpi must be in [10, 1200]")
        out = args.out or os.path.join(args.model, "codes.png")
        if not args.no_figure:
            check_output_path(out)
        model = load_learned(args.model)
        if model.cfg.levels < 1:
            raise InputError("pos_mode %s has no position IDs" % model.cfg.pos_mode)
        if model.cfg.tables < 1 and not args.no_figure:  # coupled_rel: the gains and the keys are printed
            raise InputError("pos_mode %s has no position table to draw: add --no-figure" % model.cfg.pos_mode)
        problem = _instance(args, model)
        print(distance_text(model), end="")
        q, heads = attended_keys(model, problem, args.s1, args.s2)
        print("instance: %s operands of up to %d digits, offsets (%d, %d)" % (
            problem.count("+") + 1, max(len(a) for a in problem.split("+")), args.s1, args.s2))
        print(keys_text(q, heads), end="")
        if not args.no_figure:
            from .figures import _save
            _save(plot_codes(model, problem, args.s1, args.s2, os.path.basename(os.path.normpath(args.model))), out,
                  args.dpi)
    except InputError as e:
        print("codes: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
