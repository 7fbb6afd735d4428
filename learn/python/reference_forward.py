#!/usr/bin/env python3
"""Independent forward pass of a model directory written by `train`, from config.json and
model.safetensors alone (Python standard library only, double precision; the file is read by
python/manyadd/safetensors.py in its standard-library mode), to show the exported files are
self-describing and to cross-check the C++ forward.

usage: reference_forward.py MODEL_DIR PROBLEM_JSON
  PROBLEM_JSON is what `evaluate --model MODEL_DIR --problem P --json FILE` writes for a problem P in
  the notation of the model's task (config.json's train.task; learn/README.md, Tasks), e.g.
      addition (and addition-noscratch)   --problem 57+48+96
      addition-2op                        --problem 573+82
      parity, parity-noscratch            --problem 0101
      multiplication(-noscratch)          --problem 37*925
  It holds the tokens, every position-ID level the task has (pos1, pos2, pos3; empty where unused) and
  the C++ logits from the first '=' on (the response: multiplication's second '=' is a response token).
  The task itself does not enter: the forward reads tokens and IDs as given. Exits 0 if every logit
  agrees within 1e-4 x the largest |logit| and the argmax predictions are equal, 1 otherwise, 2 on bad
  usage or input (a missing or malformed file).

The architecture (see config.json "architecture"): x = tok_emb[tok] + sum_lv pos_emb.lv[pos_lv] (up to
three levels: pos_mode coupled3, multiplication; abacus: one table at the IDs evaluate computed);
per layer x = attn_norm2(x + attn(attn_norm1(x))), x = ffn_norm2(x + ffn(ffn_norm1(x))); logits =
lm_head(final_norm(x)). RMSNorm w * x / sqrt(mean(x^2) + eps); attention causal, scores / sqrt(d_head);
GEGLU wi -> [gate | up], gelu_tanh(gate) * up, then wo. The model options of config.json (absent in
files written before they existed: the defaults): attn_scale "none" drops the 1/sqrt(d_head);
final_norm "layer" is LayerNorm w * (x - mean) / sqrt(var + eps) + b (biased variance); tie_readout
true reads out with the token table, logits = (final_norm(x) * d_model^-1/2) tok_emb^T.
Positions read in the attention (no IDs): pos_mode rope turns q and k of token index p, pair (2k, 2k+1),
by the angle p 10000^(-2k/d_head) (Su et al. 2021); pos_mode fire adds to every layer's scores
b_h(i, j) = W3 relu(W2 relu(W1 u)), u = log(|c| (i - j) + 1) / (log(|c| n_i + 1) + 1e-6),
n_i = max(i, L) (fire_threshold "max") or min(i, L) ("min"), L = L_sqrt^2 (Li et al. 2024, as the
paper-000 authors' code). input_injection true: layer l >= 1 reads x + x0, x0 the embedding.
"""
import json
import math
import os
import sys

# The project's safetensors reader, imported by path (nothing to install), in its standard-library mode.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from manyadd import safetensors  # noqa: E402

VOCAB = "0123456789+=>$*"  # '*' (14): multiplication's models (vocab 15)


def load_weights(path):
    """{name: nested lists of floats} (float32 values widened exactly to double)."""
    tensors, _ = safetensors.read(path, use_numpy=False)
    return {name: t.tolist() for name, t in tensors.items()}


def linear(x, w):  # x (T, C), w (OC, C) -> (T, OC)
    return [[sum(a * b for a, b in zip(row, wr)) for wr in w] for row in x]


def rmsnorm(x, w, eps):
    out = []
    for row in x:
        r = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
        out.append([wi * v * r for wi, v in zip(w, row)])
    return out


def layernorm(x, w, b, eps):
    out = []
    for row in x:
        m = sum(row) / len(row)
        var = sum((v - m) ** 2 for v in row) / len(row)
        r = 1.0 / math.sqrt(var + eps)
        out.append([wi * (v - m) * r + bi for wi, bi, v in zip(w, b, row)])
    return out


def gelu_tanh(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def rope(x, NH, HS):
    """Each head's pair (2k, 2k+1) of row p turned by p 10000^(-2k/HS)."""
    out = []
    for p, row in enumerate(x):
        r = list(row)
        for h in range(NH):
            for kk in range(HS // 2):
                a = p * 10000.0 ** (-2.0 * kk / HS)
                i = h * HS + 2 * kk
                r[i], r[i + 1] = row[i] * math.cos(a) - row[i + 1] * math.sin(a), row[i] * math.sin(a) + row[i + 1] * math.cos(a)
        out.append(r)
    return out


def fire_bias(cfg, W, T):
    """b[h][i][j] for j <= i: the MLP of each pair's normalized distance, computed pair by pair."""
    c, L = abs(W["fire.c"][0]), W["fire.L_sqrt"][0] ** 2
    w1, w2, w3 = W["fire.mlp.0.weight"], W["fire.mlp.2.weight"], W["fire.mlp.4.weight"]
    pick = max if cfg.get("fire_threshold", "max") == "max" else min
    b = [[[0.0] * T for _ in range(T)] for _ in range(cfg["n_heads"])]
    for i in range(T):
        n = pick(float(i), L)
        for j in range(i + 1):
            u = math.log(c * (i - j) + 1) / (math.log(c * n + 1) + 1e-6)
            h1 = [max(0.0, r[0] * u) for r in w1]
            h2 = [max(0.0, sum(a * z for a, z in zip(r, h1))) for r in w2]
            for h, r in enumerate(w3):
                b[h][i][j] = sum(a * z for a, z in zip(r, h2))
    return b


def forward(cfg, W, tokens, pos):
    C, NH, HS, F = cfg["d_model"], cfg["n_heads"], cfg["d_head"], cfg["d_ff"]
    eps = cfg["norm_eps"]
    scale = 1.0 / math.sqrt(HS) if cfg.get("attn_scale", "inv_sqrt_dhead") == "inv_sqrt_dhead" else 1.0
    mode = cfg["pos_mode"]
    levels = {"coupled": 2, "coupled3": 3, "digits": 1, "absolute": 1, "none": 0, "abacus": 1, "fire": 0,
              "rope": 0}[mode]
    T = len(tokens)
    x = []
    for t in range(T):
        row = list(W["tok_emb.weight"][tokens[t]])
        for lv in range(levels):
            pe = W["pos_emb.%d.weight" % lv][pos[lv][t]]
            row = [a + b for a, b in zip(row, pe)]
        x.append(row)
    bias = fire_bias(cfg, W, T) if mode == "fire" else None
    x0 = x
    for l in range(cfg["n_layers"]):
        p = "layers.%d." % l
        if cfg.get("input_injection", False) and l > 0:
            x = [[a + b for a, b in zip(r1, r2)] for r1, r2 in zip(x, x0)]
        n1 = rmsnorm(x, W[p + "attn_norm1.weight"], eps)
        q, k, v = (linear(n1, W[p + "attn.%s.weight" % z]) for z in "qkv")
        if mode == "rope":
            q, k = rope(q, NH, HS), rope(k, NH, HS)
        ao = [[0.0] * (NH * HS) for _ in range(T)]
        for h in range(NH):
            sl = slice(h * HS, (h + 1) * HS)
            for i in range(T):
                sc = [sum(a * b for a, b in zip(q[i][sl], k[j][sl])) * scale + (bias[h][i][j] if bias else 0.0)
                      for j in range(i + 1)]
                mx = max(sc)
                e = [math.exp(s - mx) for s in sc]
                z = sum(e)
                for d in range(HS):
                    ao[i][h * HS + d] = sum(e[j] / z * v[j][h * HS + d] for j in range(i + 1))
        proj = linear(ao, W[p + "attn.o.weight"])
        x = rmsnorm([[a + b for a, b in zip(r1, r2)] for r1, r2 in zip(x, proj)], W[p + "attn_norm2.weight"], eps)
        n3 = rmsnorm(x, W[p + "ffn_norm1.weight"], eps)
        hdn = linear(n3, W[p + "ffn.wi.weight"])
        g = [[gelu_tanh(row[f]) * row[F + f] for f in range(F)] for row in hdn]
        fo = linear(g, W[p + "ffn.wo.weight"])
        x = rmsnorm([[a + b for a, b in zip(r1, r2)] for r1, r2 in zip(x, fo)], W[p + "ffn_norm2.weight"], eps)
    if cfg.get("final_norm", "rms") == "layer":
        xf = layernorm(x, W["final_norm.weight"], W["final_norm.bias"], eps)
    else:
        xf = rmsnorm(x, W["final_norm.weight"], eps)
    if cfg.get("tie_readout", False):
        if "lm_head.weight" in W:
            raise ValueError("tie_readout is true but the file has an lm_head.weight")
        s = 1.0 / math.sqrt(C)
        return linear([[v * s for v in row] for row in xf], W["tok_emb.weight"])
    return linear(xf, W["lm_head.weight"])


def read_inputs(model_dir, pj):
    """config.json's model section, the weights and the problem JSON; ValueError naming what is wrong."""
    def load(path):
        try:
            with open(path) as f:
                return json.load(f)
        except OSError as e:
            raise ValueError("cannot read %s: %s" % (path, e.strerror or e)) from None
        except ValueError as e:
            raise ValueError("%s is not valid JSON: %s" % (path, e)) from None
    cfg = load(os.path.join(model_dir, "config.json"))
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model"), dict):
        raise ValueError("%s/config.json has no model section (not a `train` output)" % model_dir)
    W = load_weights(os.path.join(model_dir, "model.safetensors"))  # InputError (a ValueError) names the problem
    prob = load(pj)
    missing = [k for k in ("tokens", "pos1", "logits_from_eq") if not isinstance(prob, dict) or k not in prob]
    if missing:
        raise ValueError("%s lacks %s: write it with `evaluate --model MODEL_DIR --problem P --json FILE`"
                         % (pj, ", ".join(missing)))
    bad = sorted(set(prob["tokens"]) - set(VOCAB))
    if bad or "=" not in prob["tokens"]:
        raise ValueError("%s: tokens %r are not a sequence of the vocabulary %s with a '='" % (pj, prob["tokens"], VOCAB))
    return cfg["model"], W, prob


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        cfg, W, prob = read_inputs(sys.argv[1], sys.argv[2])
    except ValueError as e:
        print("reference_forward.py: %s" % e, file=sys.stderr)
        return 2
    tokens = [VOCAB.index(c) for c in prob["tokens"]]
    logits = forward(cfg, W, tokens, [prob["pos1"], prob.get("pos2", []), prob.get("pos3", [])])
    eq = tokens.index(VOCAB.index("="))
    ref = prob["logits_from_eq"]
    # fp32 (C++) against double (here): each logit comes out of ~10 chained fp32 reductions of length
    # <= max(d_model, d_ff, T), each adding a relative error of ~1e-6 (measured: ~1e-5 of the largest
    # logit). We bound the difference by 1e-4 x max(1, largest |logit|): 10x above that, and far below
    # the O(1) change of any architectural mismatch (a missing norm, a wrong scale, a swapped half).
    scale = max(1.0, max(abs(v) for r in ref for v in r))
    worst = max(abs(a - b) for r1, r2 in zip(logits[eq:], ref) for a, b in zip(r1, r2)) / scale
    pred = "".join(VOCAB[max(range(len(r)), key=r.__getitem__)] for r in logits[eq:])
    print("python reference (%s %s): predictions %s, max |logit diff| / max |logit| vs C++ %.2e" % (
        prob.get("task", "addition"), prob.get("problem", "?"), pred, worst))
    # Argmax must agree wherever the top two logits are clearly apart (a near-tie may flip between fp32
    # and double legitimately).
    def clear(r):
        top = sorted(r, reverse=True)
        return top[0] - top[1] > 1e-3 * scale
    same = all(p == t or not clear(r) for p, t, r in zip(pred, prob["teacher"], logits[eq:]))
    ok = worst <= 1e-4 and same
    print("agree" if ok else "DISAGREE (C++ teacher-forced: %s)" % prob["teacher"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
