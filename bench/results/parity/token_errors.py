#!/usr/bin/env python3
"""Where a parity model's teacher-forced response goes wrong: for random queries of given lengths,
`evaluate --problem Q --json` (the tool's own teacher-forced predictions) against the expected
response y_1 .. y_n EOS, counted per kind of token: a scratchpad bit y_k (k < n), the answer y_n, EOS.
It explains the gap between the two metrics of bench/results/parity/README.md (Figure 3's answer
token against the whole response). Standard library only.

usage: token_errors.py --model RUN --evaluate build/learn/evaluate [--lengths 30 60 100] [--samples 100]
                       [--seed 1]
Prints one line per length: instances wrong (whole response), wrong only at EOS, with a wrong scratchpad
bit, with a wrong answer, the mean number of wrong tokens of a wrong instance, and the response
positions wrong most often (k: y_k, n + 1: EOS; with their counts). Every call is one process
(the model is loaded each time): ~0.1 s of CPU per instance for a small model.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--evaluate", required=True)
    p.add_argument("--lengths", type=int, nargs="+", default=[30, 60, 100])
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.samples < 1 or min(a.lengths) < 1 or not os.access(a.evaluate, os.X_OK):
        print("token_errors.py: need --samples >= 1, lengths >= 1 and an executable --evaluate", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    print("length,samples,wrong,wrong_only_eos,wrong_scratchpad_bit,wrong_answer,mean_wrong_tokens_of_a_wrong,"
          "most_wrong_positions")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "p.json")
        for n in a.lengths:
            wrong = only_eos = bit = ans = tokens = 0
            where = {}
            for _ in range(a.samples):
                q = "".join(rng.choice("01") for _ in range(n))
                r = subprocess.run([a.evaluate, "--model", a.model, "--problem", q, "--json", out],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if r.returncode not in (0, 1):
                    print("token_errors.py: evaluate failed: %s" % r.stderr.strip(), file=sys.stderr)
                    return 2
                with open(out) as f:
                    j = json.load(f)
                exp, got = j["expected"], j["teacher"]  # y_1 .. y_n '$', teacher-forced argmax per position
                bad = [i for i in range(len(exp)) if got[i] != exp[i]]
                if not bad:
                    continue
                wrong += 1
                tokens += len(bad)
                for i in bad:
                    where[i + 1] = where.get(i + 1, 0) + 1
                only_eos += bad == [n]
                bit += any(i < n - 1 for i in bad)
                ans += (n - 1) in bad
            top = sorted(where.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
            print("%d,%d,%d,%d,%d,%d,%s,%s" % (n, a.samples, wrong, only_eos, bit, ans,
                                               "%.2f" % (tokens / wrong) if wrong else "NA",
                                               " ".join("%d:%d" % kv for kv in top)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
