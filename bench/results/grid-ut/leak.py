#!/usr/bin/env python3
"""Seq2Grid's leak read from a grid model's weights: where the soft grid stops working, without running it.

    leak.py MODEL [MODEL ...] [--lengths 100,602,1000,4000]   # the table below, one row per model
    leak.py MODEL --check PROBLEMS_CSV                         # against evaluate_grid's argmax_weight

MODEL is a model directory (model.safetensors) or a .safetensors file; COMMIT:PATH reads the file from
git history (the mid-phase checkpoints). Seq2Grid's actions are a function of the token alone
(softmax(FFN_2(x_t)) on the token's embedding, Eq. 2: no context), so the model has one action
distribution per vocabulary entry, and the soft grid's weight on the grid of the argmax actions is
prod_t max(a(token_t)) = exp(sum_t log(1 - leak(token_t))) (evaluate_grid's argmax_weight, the same
product in fp32): it falls exponentially with the input's length at a rate fixed by the 13-entry table.
The table: each token's argmax action (T = TLU, N = NLP, O = NOP; digits, '+', '='), the leak 1 - max a
of the digits (mean and largest), '+', '=' and PAD, the weight on 2 terms of L digits (the expectation of
log w over uniform digits, the first digit 1-9, then exp; PAD excluded: on 2 x L every problem has the
same length), and L at which that weight falls to 1/2.

--check recomputes each problem's weight from the problem's text; the PADs after it are not in the row,
so only rows whose problem is its instance's longest count (every row of a 2 x L instance)
and prints the largest difference from the CSV's argmax_weight; exit 1 if it exceeds --tol (1e-3:
evaluate_grid takes the log of each token's fp32 probability, a few ulps (6e-8) off float64's, which over
the 1,206 tokens of 2 x 602 add up to at most about 6e-4 of w if every error had the same sign, while
this script works in float64 from the same fp32 weights; measured: 2e-5 at most on 2 x 602).
Exit codes: 0 done, 1 a check failed, 2 bad input.
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
from manyadd import safetensors  # noqa: E402
from manyadd.files import InputError  # noqa: E402

VOCAB = "0123456789+=_"  # the grid model's tokens (config.json's format.vocabulary; '_' is PAD)
ACTIONS = "TNO"          # TLU, NLP, NOP: Seq2Grid's output order
NEED = ("embedding.weight", "s2g.fc1.weight", "s2g.fc1.bias", "s2g.fc2.weight", "s2g.fc2.bias")


def read_weights(spec):
    """The Seq2Grid tensors of MODEL (a directory, a .safetensors file, or COMMIT:PATH), as float64."""
    if ":" in spec and not os.path.exists(spec):
        commit, path = spec.split(":", 1)
        p = subprocess.run(["git", "-C", HERE, "show", "%s:%s" % (commit, path)], capture_output=True)
        if p.returncode != 0:
            raise InputError("%s: git show failed: %s" % (spec, p.stderr.decode(errors="replace").strip()))
        with tempfile.NamedTemporaryFile(suffix=".safetensors") as f:
            f.write(p.stdout)
            f.flush()
            tensors = safetensors.read(f.name)[0]
    else:
        path = os.path.join(spec, "model.safetensors") if os.path.isdir(spec) else spec
        tensors = safetensors.read(path)[0]
    missing = [k for k in NEED if k not in tensors]
    if missing:
        raise InputError("%s: not a grid model (no %s)" % (spec, ", ".join(missing)))
    w = {k: np.asarray(tensors[k], dtype=np.float64) for k in NEED}
    if w["embedding.weight"].shape[0] != len(VOCAB) or w["s2g.fc2.weight"].shape[0] != 3:
        raise InputError("%s: embedding %s / actions %s: expected %d tokens and 3 actions" % (
            spec, w["embedding.weight"].shape, w["s2g.fc2.weight"].shape, len(VOCAB)))
    return w


def action_table(w):
    """(13, 3): each token's action distribution, softmax(fc2(SiLU(fc1(embedding))))."""
    h = w["embedding.weight"] @ w["s2g.fc1.weight"].T + w["s2g.fc1.bias"]
    h = h / (1.0 + np.exp(-h))
    z = h @ w["s2g.fc2.weight"].T + w["s2g.fc2.bias"]
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def log_keep(table):
    """log max a per token: the log-weight each token contributes (log1p of -leak, exact for tiny leaks)."""
    top = table.argmax(axis=1)
    rest = table.sum(axis=1) - table.max(axis=1)  # 1 - max a without the cancellation
    return np.log1p(-rest), top, rest


def two_term_weight(lk, digits):
    """exp E[log w] on 2 terms of `digits` digits: uniform digits, the leading one 1-9, then '+', '='."""
    d = lk[:10]
    per_term = lk[1:10].mean() + (digits - 1) * d.mean()
    return math.exp(2 * per_term + lk[10] + lk[11])


def problem_weight(lk, text):
    return math.exp(sum(lk[VOCAB.index(c)] for c in text))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", metavar="MODEL")
    ap.add_argument("--lengths", default="100,602,1000,4000", help="digits per term of the weight columns")
    ap.add_argument("--check", metavar="PROBLEMS_CSV", help="evaluate_grid --problems-csv of the (one) MODEL")
    ap.add_argument("--tol", type=float, default=1e-3, help="--check: largest |difference| of a weight")
    a = ap.parse_args(argv)
    try:
        lengths = [int(x) for x in a.lengths.split(",")]
        if not lengths or min(lengths) < 1:
            raise ValueError
    except ValueError:
        print("leak.py: --lengths %r: digits per term, e.g. 100,602,1000" % a.lengths, file=sys.stderr)
        return 2
    if a.check and len(a.models) != 1:
        print("leak.py: --check takes one MODEL (the one that wrote the CSV)", file=sys.stderr)
        return 2
    if not (a.tol > 0):
        print("leak.py: --tol must be > 0", file=sys.stderr)
        return 2
    try:
        rows = []
        for spec in a.models:
            lk, top, leak = log_keep(action_table(read_weights(spec)))
            rows.append((spec, lk, top, leak))
        if a.check:
            return check(rows[0][1], a.check, a.tol)
    except InputError as e:
        print("leak.py: %s" % e, file=sys.stderr)
        return 2
    print("| model | argmax action 0-9 + = | digit leak mean (max) | '+' | '=' | PAD | %s | L at weight 1/2 |"
          % " | ".join("w(2 x %d)" % n for n in lengths))
    print("|---|---|---|---|---|---|%s---|" % ("---|" * len(lengths)))
    for spec, lk, top, leak in rows:
        d = -lk[:10].mean()
        # 2 * lk[1:10].mean() + 2 * (L - 1) * lk[:10].mean() + lk[10] + lk[11] = log(1/2), solved for L
        half = 1 + (math.log(0.5) - 2 * lk[1:10].mean() - lk[10] - lk[11]) / (2 * lk[:10].mean())
        print("| %s | %s | %.2e (%.2e) | %.1e | %.1e | %.1e | %s | %d |" % (
            spec, "".join(ACTIONS[i] for i in top[:12]), d, leak[:10].max(), leak[10], leak[11], leak[12],
            " | ".join("%.3f" % two_term_weight(lk, n) for n in lengths), round(half)))
    return 0


def check(lk, path, tol):
    try:
        with open(path, newline="") as f:
            recs = list(csv.DictReader(f))
    except OSError as e:
        raise InputError("cannot read %s: %s" % (path, e.strerror or e)) from None
    if not recs or not {"instance", "problem", "argmax_weight"} <= set(recs[0]):
        raise InputError("%s: not evaluate_grid --problems-csv (instance, problem, argmax_weight)" % path)
    longest = {}  # per instance: the problem and its '='
    for r in recs:
        longest[r["instance"]] = max(longest.get(r["instance"], 0), len(r["problem"]) + 1)
    worst, n = 0.0, 0
    for r in recs:
        text = r["problem"] + "="
        if len(text) != longest[r["instance"]]:
            continue
        worst = max(worst, abs(problem_weight(lk, text) - float(r["argmax_weight"])))
        n += 1
    print("%s: %d problems, largest |weight - argmax_weight| %.2e (tolerance %.0e)" % (path, n, worst, tol))
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
