#!/usr/bin/env python3
"""Where a learned head looks, against what decides the answer (README.md here, "Why the certificate stops"):
the mean attention mass of each head outside the keys that decide the prediction of a partial-sum digit
B_k[t] (A_k[t], A_k[t-1], B_{k-1}[t], B_{k-1}[t-1] and the query itself), over every such row of random
TA(n, m) instances (evaluate's draw), through the PyTorch twin; then how much of it lies on other digit keys
(what the certificate must split on; BOS and the symbols are fixed tokens) and the weights' mean entropy.

    python3 bench/results/learned-worst-case/mass.py models/cpu-sa1010-1l4h-d64-coupled-rel-far [N M SAMPLES]
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "python"))


def main(argv):
    import torch
    from manyadd import format as fmt
    from manyadd.learned import load_learned
    model_dir = argv[1]
    n, m, samples = (int(x) for x in (argv[2:5] if len(argv) >= 5 else (10, 10, 20)))
    model = load_learned(model_dir, dtype=torch.float64)
    shape = fmt.Shape.make(n, m, "minimal")
    l, eq = shape.l, shape.eq_index
    # sequence positions: A_i's digit t at (i - 1)(l + 1) + (l + 1 - t); B_j's digit t at eq + j (l + 1) + t
    A = lambda i, t: (i - 1) * (l + 1) + (l + 1 - t)  # noqa: E731
    B = lambda j, t: eq + j * (l + 1) + t  # noqa: E731
    rng = fmt.Rng(fmt.cell_seed(12345, n, m))
    H = model.cfg.n_heads
    total, rows = [0.0] * H, 0
    digits, entropy = [0.0] * H, [0.0] * H  # the outside mass on other digit keys; the weights' entropy
    for _ in range(samples):
        ex = model.example("+".join(fmt.sample_TA(rng, n, m)))
        toks = [int(x) for x in ex.tokens.reshape(-1).tolist()]
        with torch.no_grad():
            _, cache = model.run_with_cache(ex.tokens, ex.pos, names_filter="hook_pattern")
        pat = cache["blocks.0.attn.hook_pattern"][0]  # (H, N, N)
        for k in range(1, m + 1):
            for t in range(2, l + 1):
                i = B(k, t) - 1  # the query predicting B_k[t]
                keys = {i, B(k - 1, t), B(k - 1, t - 1)} | {A(k, u) for u in (t, t - 1) if u <= l}
                for h in range(H):
                    total[h] += 1.0 - float(sum(pat[h, i, j] for j in keys))
                    for j in range(i + 1):
                        w = float(pat[h, i, j])
                        if w > 0:
                            entropy[h] -= w * math.log(w)
                            if j not in keys and j > 0 and toks[j] <= 9:
                                digits[h] += w
                rows += 1
    name = os.path.basename(model_dir.rstrip("/"))
    per_head = lambda v: " ".join("%.3f" % (x / rows) for x in v)  # noqa: E731
    print("%s TA(%d, %d), %d samples, %d rows: mean attention mass outside the deciding digits, per head: %s" % (
        name, n, m, samples, rows, per_head(total)))
    print("%s: of it on other digit keys (BOS and symbols the rest): %s; the weights' entropy (nats): %s" % (
        name, per_head(digits), per_head(entropy)))


if __name__ == "__main__":
    main(sys.argv)
