"""The learned models' counterexamples (verify_learned's reports) through the PyTorch twin.

    from manyadd import load_learned
    from manyadd.counterexamples import read_report, explain
    model = load_learned("models/cpu-sa1010-1l4h-d64-coupled-rel-far")
    for c in read_report("report.json"):          # verify_learned --json (one shape, or a grid)
        e = explain(model, c["problem"], c["n"], c["m"])
        print(e)                                   # the response, the failing position marked
        e.position, e.expected_token, e.got_token  # where greedy decoding goes wrong first
        e.margins                                  # teacher-forced margin at every response row
        e.logits                                   # (14,) logits at the failing row (teacher-forced)

A counterexample is an input of the shape TA(n, m): its operands padded to n digits (leading zeros kept),
so explain takes the shape explicitly (format.parse_problem drops leading zeros, and a problem whose
operands all start with 0 would otherwise be written in a smaller shape). Greedy decoding is the twin's
(a full forward per step); the first wrong token is the first response position where it differs from
the right sequence, as verify_learned and `evaluate --problem` report it.
"""
import json

from . import format as fmt
from .files import InputError, open_regular

__all__ = ["read_report", "explain", "Explanation"]

MAX_REPORT = 64 << 20


def read_report(path):
    """The counterexamples of a verify_learned JSON report: a list of dicts with problem, n, m, s1, s2 and
    source (samples, attack, certificate); a grid report gives one per refuted cell."""
    with open_regular(path) as f:
        text = f.read(MAX_REPORT + 1)
    if len(text) > MAX_REPORT:
        raise InputError("%s: larger than %d bytes, not a verify_learned report" % (path, MAX_REPORT))
    try:
        rep = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InputError("%s: not JSON (%s)" % (path, e)) from None
    if not isinstance(rep, dict) or rep.get("manyadd", {}).get("tool") != "verify_learned":
        raise InputError("%s: not a verify_learned report" % path)
    out = []
    if "cells" in rep:  # a grid
        for c in rep["cells"]:
            if "counterexample" in c:
                out.append({"problem": c["counterexample"], "n": c["n"], "m": c["m"], "s1": 1, "s2": 1,
                            "source": c.get("source")})
        return out
    cex = rep.get("counterexample")
    if cex:
        off = rep.get("offsets", {})
        out.append({"problem": cex["problem"], "n": rep["shape"]["n"], "m": rep["shape"]["m"],
                    "s1": off.get("s1", 1), "s2": off.get("s2", 1), "source": cex.get("source")})
    return out


class Explanation:
    """One input through the twin: expected and greedy responses, the first wrong response index and its
    sequence position, the teacher-forced margins per response row, the logits at the failing row."""

    def __init__(self, problem, shape, expected, greedy, first_wrong, margins, logits):
        self.problem, self.shape, self.expected, self.greedy = problem, shape, expected, greedy
        self.first_wrong = first_wrong          # response index (0 = the token after '='), None if exact
        self.position = None if first_wrong is None else shape.eq_index + 1 + first_wrong
        self.expected_token = None if first_wrong is None else expected[first_wrong]
        self.got_token = None if first_wrong is None or first_wrong >= len(greedy) else greedy[first_wrong]
        self.margins = margins                  # per response row: right logit minus the best other
        self.logits = logits                    # at the row whose query precedes the first wrong token

    @property
    def exact(self):
        return self.first_wrong is None

    def __str__(self):
        lines = ["problem  %s  (TA(%d, %d))" % (self.problem, self.shape.n, self.shape.m),
                 "expected %s" % self.expected, "greedy   %s" % self.greedy]
        if self.exact:
            lines.append("exact; smallest teacher-forced margin %.4f" % min(self.margins))
        else:
            lines.append("         %s^ response index %d (sequence position %d): expected %r, got %r; "
                         "teacher-forced margin there %.4f" % (" " * self.first_wrong, self.first_wrong, self.position,
                                                              self.expected_token, self.got_token,
                                                              self.margins[self.first_wrong]))
        return "\n".join(lines)


def explain(model, problem, n, m=None, s1=1, s2=1):
    """problem ('0000000000+99...', or a list of operands) of TA(n, m) (m: its operand count) through the
    twin `model` (load_learned) at offsets (s1, s2)."""
    import torch
    ops = fmt.parse_problem(problem)
    m = len(ops) if m is None else m
    if len(ops) != m:
        raise InputError("problem %r has %d operands, m is %d" % (problem, len(ops), m))
    if any(len(o) > n for o in ops):
        raise InputError("problem %r has an operand longer than n = %d digits" % (problem, n))
    shape = fmt.Shape.make(n, m, "minimal")
    tokens = fmt.build_sequence(ops, shape)
    pos = fmt.position_ids_for(shape, model.cfg.pos_mode, s1, s2)
    eq = shape.eq_index
    ex = fmt.Example(tokens, pos, [-1] * eq + tokens[eq + 1:] + [fmt.EOS], shape, s1, s2)
    dev = model._device()
    ex.tokens = torch.tensor([tokens], dtype=torch.long, device=dev)
    ex.pos = [torch.tensor([p], dtype=torch.long, device=dev) for p in pos]
    with torch.no_grad():
        logits = model(ex.tokens, ex.pos)[0].double()
    expected = fmt.decode(tokens[eq + 1:] + [fmt.EOS])
    targets = tokens[eq + 1:] + [fmt.EOS]
    margins = []
    for k, t in enumerate(targets):
        row = logits[eq + k].clone()
        right = float(row[t])
        row[t] = float("-inf")
        margins.append(right - float(row.max()))
    greedy = model._greedy(ex)
    first = next((k for k in range(len(expected)) if k >= len(greedy) or greedy[k] != expected[k]), None)
    padded = "+".join(o.rjust(n, "0") for o in ops)
    lg = None if first is None else [float(x) for x in logits[eq + first]]
    return Explanation(padded, shape, expected, greedy, first, margins, lg)
