#!/usr/bin/env python3
"""Is the parity model's lookup of x_k positional? Layer 0's attention from the row that predicts y_k
on x_k and on BOS, split by the values of x_k and y_(k-1), over random queries of one length (the
per-sample patterns of manyadd.load_learned's hooks, which test_python_models holds to dump_attention's
maps). Needs torch (Debian: python3-torch).

usage: by_bits.py MODEL_DIR [N] [SAMPLES]   (default N 40, SAMPLES 200; queries from random.Random(7))
"""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "python"))


def main():
    if not 2 <= len(sys.argv) <= 4:
        print(__doc__, file=sys.stderr)
        return 2
    import torch
    from manyadd import load_learned
    m = load_learned(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    samples = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    if m.cfg.task != "parity" or n < 1 or samples < 1:
        print("by_bits.py: a parity model (scratchpad), N >= 1 and SAMPLES >= 1", file=sys.stderr)
        return 2
    rng = random.Random(7)
    acc = {}  # (head, x_k, y_(k-1)) -> [weight on x_k, weight on BOS, rows]
    for _ in range(samples):
        q = "".join(rng.choice("01") for _ in range(n))
        ex = m.example(q)
        with torch.no_grad():
            _, cache = m.run_with_cache(ex.tokens, ex.pos)
        pat = cache["blocks.0.attn.hook_pattern"][0]
        y = [0]
        for b in q:
            y.append(y[-1] ^ int(b))
        for h in range(pat.shape[0]):
            for k in range(1, n + 1):
                r = n + k  # the row of y_(k-1) ('=' for k = 1) predicts y_k; x_k is token k
                e = acc.setdefault((h, q[k - 1], y[k - 1]), [0.0, 0.0, 0])
                e[0] += float(pat[h, r, k])
                e[1] += float(pat[h, r, 0])
                e[2] += 1
    print("head,x_k,y_(k-1),rows,attention_on_x_k,attention_on_bos")
    for (h, xb, yb), (sx, sb, c) in sorted(acc.items()):
        print("layers.0.head.%d,%s,%d,%d,%.3f,%.3f" % (h, xb, yb, c, sx / c, sb / c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
