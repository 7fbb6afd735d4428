#!/usr/bin/env python3
"""Load the constructed Theorem 4.1 model written by `verify_construction --export DIR`
(model.safetensors + config.json) into PyTorch and run it on one addition problem. It needs the two
files, PyTorch, and the project's safetensors reader (python/manyadd, imported by path: standard
library, numpy when installed); the file is plain safetensors, which `safetensors.torch.load_file`
loads as well.

Tested torch version: not run here: no torch on the dev machine (no torch, no pip registry there).
The script uses only long-standing torch APIs (from_numpy, tensor, tril, softmax, masked_fill). What
was checked without torch: the sequence, width and position-ID builders against the C++ ones
(build_sequence, width_theorem/minimal, position_ids) on 32 shapes; and a whole run (reader,
teacher-forced pass, --greedy) on the exported worked example 57+48+96, s1=4, s2=2, with a stand-in
for the dozen torch calls used (not committed; it checks shapes and orientation, not torch itself),
giving 000>750>501>102$. The forward pass is the one tests/test_export.cpp runs in C++ on the
exported tensors and checks against dense_forward.

Usage:
  python3 bench/load_constructed.py DIR 57+48+96 [--s1 4 --s2 2] [--greedy]
  python3 bench/load_constructed.py DIR '$057+048+096=000>750>501>102' --s1 4 --s2 2
The input is a problem ("57+48+96") or a token sequence starting with '$' (then its operands are
read from the query and its width l from their zero padding). The script builds the correct
teacher-forced sequence, runs one forward pass, prints the prediction at every response position
beside the correct next token, and with --greedy also decodes greedily from the query. Exit code 0
when every prediction is right, 1 otherwise, 2 on bad input.
"""

import argparse
import json
import os
import sys

try:
    import torch
except ImportError:  # the pure-Python helpers below stay usable (and testable) without torch
    torch = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from manyadd import safetensors  # noqa: E402  (the project's reader, by path: nothing to install)

VOCAB_DEFAULT = list("0123456789+=>$")


# ---- weights -------------------------------------------------------------------------------------

def load_weights(model_dir):
    """{name: float64 torch tensor} from model.safetensors, read by python/manyadd's reader (every
    check, the checksum verified; numpy arrays when numpy is installed, else flat arrays)."""
    tensors, _ = safetensors.read(os.path.join(model_dir, "model.safetensors"))
    out = {}
    for name, a in tensors.items():
        if isinstance(a, safetensors.Tensor):  # no numpy: the flat values
            out[name] = torch.tensor(list(a.data), dtype=torch.float64).reshape(a.shape)
        else:
            out[name] = torch.from_numpy(a).to(torch.float64)
    return out


# ---- sequence and position IDs (config.json "sequence", "position_ids") ---------------------------

def width(rule, n, m):
    """Padding width l; floor(log10 m) as len(str(m)) - 1 to stay exact for any m."""
    if rule == "minimal":
        return len(str(m * (10 ** n - 1)))
    return n + 1 + len(str(m)) - 1


def parse_input(text):
    """Operands (as digit strings) and the padded width if the input was a '$...' sequence."""
    padded = text.startswith("$")
    query = text[1:] if padded else text
    query = query.split("=", 1)[0]
    operands = query.split("+")
    if len(operands) < 1 or any(not a.isdigit() for a in operands):
        raise ValueError(f"cannot read operands from {text!r}: expected digits separated by '+'")
    if padded:
        if len({len(a) for a in operands}) != 1:
            raise ValueError(f"operands of {text!r} are not all padded to one width")
        return operands, len(operands[0])
    return operands, None


def build_sequence(operands, l):
    """'$ A_1 + ... + A_m = B_0 > B_1 > ... > B_m' (A_i most significant first, B_j reversed)."""
    if any(len(a.lstrip("0")) > l for a in operands):
        raise ValueError(f"an operand has more than l = {l} digits")
    partial = [0]
    for a in operands:
        partial.append(partial[-1] + int(a))
    if len(str(partial[-1])) > l:
        raise ValueError(f"the sum {partial[-1]} does not fit in l = {l} digits")
    query = "$" + "+".join(a.lstrip("0").zfill(l) for a in operands)
    response = "=" + ">".join(str(b).zfill(l)[::-1] for b in partial)
    return query + response


def position_ids(m, l, s1, s2):
    """Bi-level coupled IDs for the whole sequence of N = (2m+1)(l+1) tokens (0-based index k)."""
    p1, p2 = [0], [0]  # BOS
    for i in range(m):  # A_{i+1}, then '+' (or '=' after the last operand)
        for q in range(l):
            p1.append(s1 + (l - q))  # most significant digit first: significance l - q
            p2.append(s2 + i)
        p1.append(s1)
        p2.append(s2 + i if i < m - 1 else s2)  # '+' after A_{i+1}: s2 + i; '=': s2
    for j in range(m + 1):  # B_j (reversed: significance q + 1), then '>' before B_{j+1}
        for q in range(l):
            p1.append(s1 + q + 1)
            p2.append(s2 + j)
        if j < m:
            p1.append(s1)
            p2.append(s2 + j + 1)
    return p1, p2


# ---- the forward pass (config.json "architecture") ------------------------------------------------

def forward(W, tokens, p1, p2):
    """Logits (N, 14) for token ids `tokens`; rows of every activation are tokens."""
    idx = lambda v: torch.tensor(v, dtype=torch.long)
    X = W["embed.token"][idx(tokens)] + W["embed.pos1"][idx(p1)] + W["embed.pos2"][idx(p2)]  # (N, d)
    N = X.shape[0]
    causal = torch.tril(torch.ones(N, N)).bool()  # query j sees keys i <= j (tril of float: any torch)
    Y = X.clone()
    for h in range(1, 5):
        Q, K, V, U = (W[f"heads.{h}.{t}"] for t in "QKVU")  # (dqk,d) (dqk,d) (1,d) (d,1)
        S = (X @ Q.T) @ (X @ K.T).T  # S[j, i] = (Q x_j).(K x_i); lambda is folded into Q and K
        A = torch.softmax(S.masked_fill(~causal, float("-inf")), dim=-1)  # (N, N)
        Y = Y + (A @ (X @ V.T)) @ U.T  # Y = X + sum_h U V X A^T, in row form
    Hid = torch.relu(Y @ W["ffn.W1"].T + W["ffn.b1"])  # (N, 82)
    X1 = Y + Hid @ W["ffn.W2"].T + W["ffn.b2"]
    return X1 @ W["readout.Wout"].T  # (N, 14)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", help="directory holding model.safetensors and config.json")
    ap.add_argument("input", help="a problem like 57+48+96, or a sequence like '$057+048+096=...'")
    ap.add_argument("--s1", type=int, default=1, help="level-1 position offset (default 1)")
    ap.add_argument("--s2", type=int, default=1, help="level-2 position offset (default 1)")
    ap.add_argument("--width", type=int, default=None, help="padding width l (default: from the input/config)")
    ap.add_argument("--greedy", action="store_true", help="also decode greedily from the query")
    args = ap.parse_args(argv)
    if torch is None:
        print("load_constructed.py: PyTorch is not installed (pip install torch)", file=sys.stderr)
        return 2

    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    vocab = cfg.get("vocab", VOCAB_DEFAULT)
    W = load_weights(args.model_dir)

    try:
        operands, l = parse_input(args.input)
        m = len(operands)
        n = max(len(a.lstrip("0")) or 1 for a in operands)
        if args.width is not None:
            l = args.width
        elif l is None:
            shape = cfg.get("shape")
            if shape and shape["m"] == m and n <= shape["n"]:
                l = shape["l"]
            else:
                l = width((cfg.get("padding") or {}).get("rule") or "theorem", n, m)
        seq = build_sequence(operands, l)
    except ValueError as e:
        print(f"load_constructed.py: {e}", file=sys.stderr)
        return 2
    pos = cfg["position_ids"]
    if not (1 <= args.s1 <= pos["max_pos1"] - l and 1 <= args.s2 <= pos["max_pos2"] - m):
        print(f"load_constructed.py: offsets need s1 in [1, {pos['max_pos1'] - l}] and s2 in "
              f"[1, {pos['max_pos2'] - m}] for l = {l}, m = {m}", file=sys.stderr)
        return 2

    if args.input.startswith("$") and not seq.startswith(args.input):
        print("note: the given response is not the correct one; running on the correct sequence")
    tokens = [vocab.index(c) for c in seq]
    p1, p2 = position_ids(m, l, args.s1, args.s2)
    assert len(p1) == len(tokens) == (2 * m + 1) * (l + 1)
    eq = m * (l + 1)  # index of '=': predictions from here on are the response
    target = tokens[1:] + [cfg["eos_token_id"]]

    with torch.no_grad():
        pred = forward(W, tokens, p1, p2).argmax(dim=-1).tolist()
    print(f"sequence  {seq}   (m = {m}, l = {l}, N = {len(tokens)}, s1 = {args.s1}, s2 = {args.s2})")
    print("pos  token  p1  p2  predicted  correct")
    wrong = 0
    for k in range(eq, len(tokens)):
        ok = pred[k] == target[k]
        wrong += not ok
        print(f"{k:4d}  {vocab[tokens[k]]:>4}  {p1[k]:3d} {p2[k]:3d}  {vocab[pred[k]]:>8}  {vocab[target[k]]:>6}"
              + ("" if ok else "   <-- wrong"))
    print(f"teacher-forced response: {''.join(vocab[t] for t in pred[eq:])} "
          f"({'exact' if wrong == 0 else f'{wrong} wrong'})")

    if args.greedy:
        # From the query and '=', one token per step; the last step (k = N) predicts EOS after B_m.
        # The IDs of every position are known in advance: they depend on (m, l, s1, s2) only.
        out = tokens[: eq + 1]
        with torch.no_grad():
            while len(out) <= len(tokens):
                k = len(out)
                out.append(int(forward(W, out, p1[:k], p2[:k])[-1].argmax()))
        got = "".join(vocab[t] for t in out[eq + 1:])
        want = seq[eq + 1:] + vocab[cfg["eos_token_id"]]
        print(f"greedy: {got}   ({'exact' if got == want else 'expected ' + want})")
        wrong += got != want
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
