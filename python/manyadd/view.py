"""The attention page from Python: one addition problem through one or more of the project's torch models
(load_learned, load_constructed), written as the self-contained HTML page of `compare_attention --html`
(the same template, learn/src/analysis/attention_page.html, and the same data, field for field: the
twin of learn/src/analysis/attention_page.cpp, checked against it by tests/test_python_view.py).

    from manyadd import load_learned, load_constructed
    from manyadd.view import write_page
    write_page("page.html", "57+48+96", [("learned", load_learned("models/cpu-sa1010-1l4h-d64")),
                                         ("constructed", load_constructed("OUT/export"))])

    python3 -m manyadd.view --learned DIR [--learned DIR2] [--constructed EXPORT] --problem 57+48+96 \\
        [--compare compare.json] --out page.html

Every model must write the problem as the same sequence (the learned models: the problem's own shape,
minimal padding; a constructed model exported for that shape with `verify_construction --export DIR --n N
--m M --padding minimal`). --compare takes compare_attention's compare.json: its matching is shown, and
names the learned heads' roles. Exit codes: 0 written, 2 bad input (one line on stderr)."""
import argparse
import json
import math
import os
import sys

from . import format as fmt
from .files import InputError, atomic_write

__all__ = ["sequence_layout", "page_data", "page_html", "write_page", "TEMPLATE"]

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "learn", "src", "analysis",
                        "attention_page.html")
CONSTRUCTED_ROLES = ("digit_sum", "carry", "arrow", "eos")  # the constructed model's heads, in order
_MARKER = "/*MANYADD_PAGE_DATA*/null"


def sequence_layout(shape):
    """(row, column, label) of every token of a TA sequence: attention_page.hpp's sequence_layout."""
    m, l = shape.m, shape.l
    cells = [(0, l, "BOS '$'")]
    for i in range(1, m + 1):
        cells += [(i, j, "A_%d[t=%d]" % (i, l - j)) for j in range(l)]
        cells.append((i, l, ("'+' after A_%d" % i) if i < m else ("'=' after A_%d" % m)))
    for b in range(m + 1):
        if b > 0:
            cells.append((m + 1 + b, l, "'>' before B_%d" % b))
        cells += [(m + 1 + b, l - t, "B_%d[t=%d]" % (b, t)) for t in range(1, l + 1)]
    return cells


def _f32(x):
    """A number as the C++ page writes a float: rounded to 1e-4, then to float32, printed shortest."""
    import struct
    return struct.unpack("f", struct.pack("f", round(x / 1e-4) * 1e-4))[0]


def _model_side(name, heads, logits, tokens, eq, top_k, min_weight, roles):
    """One model's entry: heads [(name, (T, T) rows)], logits (T, V) rows; attention_page.cpp's page_model."""
    T = len(tokens)
    out_heads = []
    for h, (hname, A) in enumerate(heads):
        keys, weights, rest = [], [], []
        for q in range(T):
            row = [float(v) for v in A[q][:q + 1]]
            order = sorted(range(q + 1), key=lambda k: (-row[k], k))[:top_k]
            kq, wq, listed = [], [], 0.0
            for k in order:
                if row[k] < min_weight:
                    break
                kq.append(k)
                wq.append(_f32(row[k]))
                listed += row[k]
            keys.append(kq)
            weights.append(wq)
            rest.append(_f32(max(0.0, sum(row) - listed)))
        out_heads.append({"name": hname, "role": roles.get(hname, ""), "keys": keys, "weights": weights, "rest": rest})
    preds = []
    for j in range(eq, T):
        want = tokens[j + 1] if j + 1 < T else fmt.EOS
        z = [float(v) for v in logits[j]]
        best = max(range(len(z)), key=lambda v: (z[v], -v))
        other = max(z[v] for v in range(len(z)) if v != want)
        preds.append({"index": j, "expected": fmt.decode([want]), "predicted": fmt.decode([best]),
                      "margin": z[want] - other})
    return {"name": name, "heads": out_heads, "predictions": preds}


def _run(model, problem, s1, s2):
    """tokens, position IDs (two levels, [] where the model reads none), shape, per-head maps, logits."""
    import torch
    ex = model.example(problem, s1, s2)
    with torch.no_grad():
        logits, cache = model.run_with_cache(ex.tokens, ex.pos, names_filter="hook_pattern")
    heads = []
    layer = 0
    while "blocks.%d.attn.hook_pattern" % layer in cache:
        P = cache["blocks.%d.attn.hook_pattern" % layer][0].double().tolist()  # (H, T, T)
        heads += [("layers.%d.head.%d" % (layer, h), P[h]) for h in range(len(P))]
        layer += 1
    tokens = ex.tokens[0].tolist()
    return tokens, ex.shape, heads, logits[0].double().tolist()


def page_data(problem, models, s1=1, s2=1, matching=None, top_k=24, min_weight=1e-3):
    """The page's data for `problem` through `models` [(name, model)]: attention_page_data's twin.
    matching: compare_attention's matching entries (shown; their learned heads get the roles)."""
    if not models:
        raise InputError("page_data: no model")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 4096:
        raise InputError("top_k must be in [1, 4096] (got %r)" % (top_k,))
    if not (isinstance(min_weight, (int, float)) and 0 <= min_weight < 1):
        raise InputError("min_weight must be in [0, 1) (got %r)" % (min_weight,))
    matching = list(matching or [])
    roles = {x["learned"]: x["constructed"] for x in matching}
    sides, seq = [], None
    for name, model in models:
        tokens, shape, heads, logits = _run(model, problem, s1, s2)
        if seq is None:
            seq = (tokens, shape)
        elif tokens != seq[0]:
            raise InputError("model '%s' writes %s as another sequence than '%s' (a constructed model must be "
                             "exported for the problem's shape with --padding minimal)" % (name, problem, models[0][0]))
        r = roles if type(model).__name__ != "ConstructedTransformer" else {
            "layers.0.head.%d" % h: CONSTRUCTED_ROLES[h] for h in range(len(CONSTRUCTED_ROLES))}
        sides.append(_model_side(name, heads, logits, tokens, shape.eq_index, top_k, min_weight, r))
    tokens, shape = seq
    if shape.m < 2 or len(tokens) != (2 * shape.m + 1) * (shape.l + 1):
        raise InputError("the page lays out addition problems of at least two operands (got %s)" % problem)
    p1, p2 = fmt.position_ids(shape, s1, s2)
    ops = fmt.parse_problem(problem)
    return {"format": "manyadd attention page 1", "problem": "+".join(o.lstrip("0") or "0" for o in ops),
            "n": shape.n, "m": shape.m, "l": shape.l, "N": len(tokens), "eq_index": shape.eq_index,
            "s1": s1, "s2": s2, "tokens": [fmt.decode([t]) for t in tokens], "pos1": p1, "pos2": p2,
            "layout": [list(c) for c in sequence_layout(shape)],
            "kept": {"top_k": top_k, "min_weight": min_weight}, "models": sides, "matching": matching}


def page_html(data, template=None):
    """The page: the template with the data inlined ('</' written '<\\/')."""
    path = template or TEMPLATE
    try:
        with open(path, encoding="utf-8") as f:
            page = f.read()
    except OSError as e:
        raise InputError("the page template %s cannot be read (%s): manyadd.view runs from the repository's "
                         "python/ (pip install -e python/)" % (path, e.strerror))
    if _MARKER not in page:
        raise InputError("%s is not the page template (no data marker)" % path)
    js = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return page.replace(_MARKER, js, 1)


def write_page(path, problem, models, s1=1, s2=1, matching=None, top_k=24):
    """Writes the page of `problem` through `models` [(name, model)] to `path` (atomically)."""
    atomic_write(path, page_html(page_data(problem, models, s1, s2, matching, top_k)))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m manyadd.view", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--learned", action="append", default=[], metavar="DIR", help="a learned model directory (repeatable)")
    ap.add_argument("--constructed", action="append", default=[], metavar="DIR",
                    help="a constructed model exported by verify_construction --export (repeatable)")
    ap.add_argument("--problem", help="the problem, 57+48+96")
    ap.add_argument("--counterexample", metavar="REPORT",
                    help="instead of --problem: a verify_learned JSON report's counterexample (a grid report: its "
                         "first refuted cell), its operands padded to the shape's n, at its offsets")
    ap.add_argument("--compare", help="compare_attention's compare.json: its matching is shown")
    ap.add_argument("--s1", type=int, default=1)
    ap.add_argument("--s2", type=int, default=1)
    ap.add_argument("--top-k", type=int, default=24, help="keys kept per query row (default 24)")
    ap.add_argument("--out", required=True, help="the HTML file to write")
    a = ap.parse_args(argv)
    try:
        if not a.learned and not a.constructed:
            raise InputError("give at least one --learned or --constructed model")
        if (a.problem is None) == (a.counterexample is None):
            raise InputError("give one of --problem and --counterexample")
        if a.counterexample is not None:
            from .counterexamples import read_report
            found = read_report(a.counterexample)
            if not found:
                raise InputError("--counterexample %s: the report has no counterexample" % a.counterexample)
            c = found[0]
            a.problem = "+".join(o.zfill(c["n"]) for o in fmt.parse_problem(c["problem"]))
            a.s1, a.s2 = c["s1"], c["s2"]
        from .constructed import load_constructed
        from .learned import load_learned
        models = [("learned: " + d, load_learned(d)) for d in a.learned]
        models += [("constructed: " + d, load_constructed(d)) for d in a.constructed]
        matching = None
        if a.compare:
            try:
                with open(a.compare, encoding="utf-8") as f:
                    rep = json.load(f)
            except (OSError, ValueError) as e:
                raise InputError("--compare %s: %s" % (a.compare, e))
            body = rep if isinstance(rep, dict) else None
            if not isinstance(body, dict) or not isinstance(body.get("matching"), list):
                raise InputError("--compare %s is not compare_attention's compare.json (no matching)" % a.compare)
            matching = body["matching"]
        write_page(a.out, a.problem, models, a.s1, a.s2, matching, a.top_k)
    except InputError as e:
        print("manyadd.view: %s" % e, file=sys.stderr)
        return 2
    print("wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
