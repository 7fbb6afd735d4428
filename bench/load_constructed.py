#!/usr/bin/env python3
"""Run the constructed Theorem 4.1 model written by `verify_construction --export DIR` (model.safetensors
+ config.json) in PyTorch on one addition problem: a command line over python/manyadd's
load_constructed (the module, its hooks and the format are there; see python/README.md). Needs PyTorch
(Debian: apt-get install python3-torch; tested with Debian's 1.13) and the package (imported by path).
tests/test_python_models.py runs it on the paper's worked example.

Usage:
  python3 bench/load_constructed.py DIR 57+48+96 [--s1 4 --s2 2] [--greedy]
  python3 bench/load_constructed.py DIR '$057+048+096=000>750>501>102' --s1 4 --s2 2
The input is a problem ("57+48+96") or a token sequence starting with '$' (then its operands are read
from the query and its width l from their zero padding). The script builds the correct teacher-forced
sequence, runs one forward pass, prints the prediction at every response position beside the correct
next token, and with --greedy also decodes greedily from the query. Exit code 0 when every prediction
is right, 1 otherwise, 2 on bad input.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from manyadd import format as fmt  # noqa: E402  (the project's package, by path: nothing to install)
from manyadd.files import InputError  # noqa: E402


def parse_input(text):
    """Operands and the padded width l if the input was a '$...' sequence (else None)."""
    padded = text.startswith("$")
    query = (text[1:] if padded else text).split("=", 1)[0]
    operands = fmt.parse_problem(query)
    if padded:
        widths = {len(a) for a in query.split("+")}
        if len(widths) != 1:
            raise InputError("operands of %r are not all padded to one width" % text)
        return operands, widths.pop()
    return operands, None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", help="directory holding model.safetensors and config.json")
    ap.add_argument("input", help="a problem like 57+48+96, or a sequence like '$057+048+096=...'")
    ap.add_argument("--s1", type=int, default=1, help="level-1 position offset (default 1)")
    ap.add_argument("--s2", type=int, default=1, help="level-2 position offset (default 1)")
    ap.add_argument("--width", type=int, default=None, help="padding width l (default: from the input/config)")
    ap.add_argument("--greedy", action="store_true", help="also decode greedily from the query")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("load_constructed.py: PyTorch is not installed (Debian: apt-get install python3-torch)", file=sys.stderr)
        return 2
    from manyadd.constructed import load_constructed

    try:
        model = load_constructed(args.model_dir)
        operands, l = parse_input(args.input)
        ex = model.example(operands, args.s1, args.s2, args.width if args.width is not None else l)
    except InputError as e:
        print("load_constructed.py: %s" % e, file=sys.stderr)
        return 2
    seq = fmt.decode(ex.tokens[0])
    if args.input.startswith("$") and not seq.startswith(args.input):
        print("note: the given response is not the correct one; running on the correct sequence")
    shape, eq = ex.shape, ex.shape.eq_index
    with torch.no_grad():
        pred = model(ex.tokens, ex.pos)[0].argmax(dim=-1).tolist()
    p1, p2 = (p[0].tolist() for p in ex.pos)
    print("sequence  %s   (m = %d, l = %d, N = %d, s1 = %d, s2 = %d)" % (seq, shape.m, shape.l, shape.N, args.s1,
                                                                      args.s2))
    print("pos  token  p1  p2  predicted  correct")
    wrong = 0
    for k in range(eq, shape.N):
        ok = pred[k] == ex.targets[k]
        wrong += not ok
        print("%4d  %4s  %3d %3d  %8s  %6s%s" % (k, seq[k], p1[k], p2[k], fmt.VOCAB[pred[k]], fmt.VOCAB[ex.targets[k]],
                                                "" if ok else "   <-- wrong"))
    print("teacher-forced response: %s (%s)" % (fmt.decode(pred[eq:]), "exact" if wrong == 0 else "%d wrong" % wrong))
    if args.greedy:
        got = model.generate(operands, args.s1, args.s2, ex.shape.l)
        want = seq[eq + 1:] + fmt.VOCAB[fmt.EOS]
        print("greedy: %s   (%s)" % (got, "exact" if got == want else "expected " + want))
        wrong += got != want
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
