#!/usr/bin/env python3
"""What decides the end of the scratchpad (README.md here, arm 11): at the query after the response's
10th number (B_9: it predicts '>' with ten operands or more, '$' with nine), each head's attention weight on
the keys that share the query's operand ID (A_10's digits when it exists, B_9's own otherwise) and on the
query itself, through the PyTorch twin's attention patterns, for each problem given.

    python3 bench/results/length-wall/eos.py MODEL PROBLEM [PROBLEM ...]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "python"))


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    import torch
    from manyadd import format as fmt
    from manyadd.files import InputError
    from manyadd.learned import load_learned
    try:
        model = load_learned(argv[1], dtype=torch.float64)
        for prob in argv[2:]:
            if len(prob.split("+")) < 9:
                raise InputError("%s: the end after B_9 needs nine operands or more" % prob)
            ex = model.example(prob)
            toks = fmt.decode(ex.tokens[0])
            ids = list(zip(ex.pos[0][0].tolist(), ex.pos[1][0].tolist()))
            eq = ex.shape.eq_index
            seps = [k for k in range(eq + 1, len(toks)) if toks[k] == ">"]
            i = seps[9] - 1 if len(seps) > 9 else len(toks) - 1  # B_9's last digit (the EOS is not a token)
            with torch.no_grad():
                _, cache = model.run_with_cache(ex.tokens, ex.pos, names_filter=lambda n: n.endswith("hook_pattern"))
            pat = cache["blocks.0.attn.hook_pattern"][0]
            q = ids[i]
            same = [j for j in range(i) if ids[j][1] == q[1]]
            print("%s (m = %d): row %d, token %r, IDs %s, next %r" % (
                prob, len(prob.split("+")), i, toks[i], q, toks[i + 1] if i + 1 < len(toks) else "$"))
            for h in range(pat.shape[0]):
                print("  head %d: %.2e on the other keys of operand ID %d, %.2e on the query" % (
                    h, sum(float(pat[h, i, j]) for j in same), q[1], float(pat[h, i, i])))
    except InputError as e:
        sys.stderr.write("eos.py: %s\n" % e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
