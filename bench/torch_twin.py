#!/usr/bin/env python3
"""The PyTorch twin of the learned transformer (python/manyadd/learned.py, `load_learned`) against our
trainer: one training step checked against the C++ CPU trainer, and the training throughput compared
with our CUDA trainer (bench only: not part of the project's build). The same architecture and initial
weights (a run's safetensors), the same batches (the binary file `dump_batches` writes), the same AdamW
with global-norm clipping and the same warm-up + cosine schedule.

  torch_twin.py check RUN_PREV RUN_NEXT BATCHES REFERENCE
      Correctness on the CPU. RUN_PREV: a run stopped at step k-1 (`train --stop-after k-1`);
      RUN_NEXT: the same run continued to step k (`train --resume --stop-after k`); BATCHES and
      REFERENCE: `dump_batches --run RUN_PREV --from k --steps 1 --out BATCHES --reference REFERENCE`.
      Checks the twin's forward (logits, loss) on step k's batch against the C++ CPU forward, then one
      twin AdamW step from RUN_PREV's checkpoint (weights + moments) against RUN_NEXT's checkpoint.
      Exit 0 when both agree within the tolerances printed (justified below), 1 otherwise.
      (tests/test_python_models.py runs it on a tiny run.)

  torch_twin.py bench RUN BATCHES [--device cuda] [--steps N] [--warmup W] [--json FILE] [--ours FILE]
      Training throughput (tokens/s: real tokens of every sequence, padding excluded, as our trainer
      counts; the twin computes the padded (B, T) batch, as the authors' trainer does, ours the real
      tokens only: varlen) from RUN's model.safetensors over the batches in BATCHES (cycled: the first W warm up, the
      next N are timed), in four variants: eager and torch.compile (skipped with a message where torch
      has no torch.compile, e.g. Debian's 1.13), each in fp32 and under bf16 autocast (the authors'
      setting: torch.autocast(dtype=torch.bfloat16) around forward and loss, fp32 master weights), with
      torch's fused attention where it has one and the input checks off. The optimizer is the one the
      authors' trainer uses, torch.optim.AdamW (fused where torch has it, else foreach) after
      torch.nn.utils.clip_grad_norm_, with this project's schedule set per step: nothing reads a value
      back to the host inside a step (the `check` AdamW below reads the norm: exactness, not speed).
      --ours FILE: bench_cuda_train's Google Benchmark JSON (--benchmark_out=FILE
      --benchmark_out_format=json, on the same run: `bench_cuda_train --run RUN`); prints ours / torch
      for each precision against the fastest torch variant of that precision.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from manyadd import files, safetensors  # noqa: E402  (the project's package, by path: nothing to install)
from manyadd.learned import load_learned  # noqa: E402


def read_safetensors(path):
    """{name: torch tensor}, metadata: python/manyadd's reader (every check, the checksum verified)."""
    arrays, meta = safetensors.read(path, use_numpy=True)
    return {name: torch.from_numpy(a) for name, a in arrays.items()}, meta


def read_batches(path):
    """The file of learn/tools/dump_batches.cpp: a list of dicts of numpy arrays."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"MABATCH1", "not a dump_batches file"
    n_steps, levels = struct.unpack_from("<ii", b, 8)
    off = 16
    out = []
    for _ in range(n_steps):
        step, B, T, counted = struct.unpack_from("<qiiq", b, off)
        off += 24
        def take(dtype, count):
            nonlocal off
            a = np.frombuffer(b, dtype=dtype, count=count, offset=off)
            off += a.nbytes
            return a
        lengths = take("<i4", B)
        tokens = take("u1", B * T).reshape(B, T)
        pos = [take("<i4", B * T).reshape(B, T) for _ in range(levels)]
        targets = take("<i4", B * T).reshape(B, T)
        out.append(dict(step=step, B=B, T=T, counted=counted, lengths=lengths, tokens=tokens, pos=pos, targets=targets))
    return out


def load_twin(run, device, checkpoint=False):
    """(config.json as a dict, the package's module on `device`, the checkpoint's other tensors (Adam
    moments) as torch tensors, metadata) for a run directory."""
    model = load_learned(run, device=device, checkpoint=checkpoint).train()
    with open(run + "/config.json") as f:
        cfg = json.load(f)
    W = {k: torch.from_numpy(v) for k, v in model.tensors.items()}
    return cfg, model, W, model.metadata


def lr_at(tc, t):  # learn/src/runs/train.cpp lr_at
    warm = max(1, round(tc["warmup_frac"] * tc["steps"]))
    if tc.get("warmup_from_zero", False):  # the schedule at t - 1: the first step at lr 0 (LambdaLR)
        t = t - 1
    if t <= warm:
        return tc["lr"] * t / warm
    prog = (t - warm) / (tc["steps"] - warm) if tc["steps"] > warm else 1.0
    cosv = 0.5 * (1.0 + math.cos(math.pi * min(1.0, prog)))
    return tc["lr"] * (tc["min_lr_frac"] + (1.0 - tc["min_lr_frac"]) * cosv)


def to_tensors(bt, device):
    tok = torch.from_numpy(bt["tokens"].astype(np.int64)).to(device)
    pos = [torch.from_numpy(p.astype(np.int64)).to(device) for p in bt["pos"]]
    tgt = torch.from_numpy(bt["targets"].astype(np.int64)).to(device)
    return tok, pos, tgt


def loss_sum(model, tok, pos, tgt):
    logits = model(tok, pos)
    mask = tgt >= 0
    return F.cross_entropy(logits[mask], tgt[mask], reduction="sum"), logits


class AdamW:
    """learn::adamw_update with learn's clipping, on the twin's parameters (state: m, v per tensor)."""

    def __init__(self, params, tc, m=None, v=None):
        self.params, self.tc = list(params), tc
        self.m = m if m is not None else [torch.zeros_like(p) for p in self.params]
        self.v = v if v is not None else [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self, t):
        tc = self.tc
        norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in self.params))
        clip = tc["grad_clip"] / norm if tc["grad_clip"] > 0 and norm > tc["grad_clip"] else 1.0
        lr = lr_at(tc, t)
        bc1, bc2 = 1.0 - tc["beta1"] ** t, 1.0 - tc["beta2"] ** t
        f = lambda x: torch.tensor(x, dtype=torch.float32).item()  # the C++ float(...) roundings
        b1, b2, eps = f(tc["beta1"]), f(tc["beta2"]), f(tc["adam_eps"])
        step_size, inv, wd = f(lr / bc1), f(1.0 / math.sqrt(bc2)), f(lr * tc["weight_decay"])
        for p, m, v in zip(self.params, self.m, self.v):
            g = (p.grad.double() * clip).float()
            m.mul_(b1).add_((1.0 - b1) * g)
            v.mul_(b2).add_((1.0 - b2) * g * g)
            p.sub_(step_size * m / (v.sqrt() * inv + eps) + wd * p)
        return norm


def check(args):
    cfg, model, W, meta = load_twin(args.run_prev, "cpu", checkpoint=True)
    bt = read_batches(args.batches)[0]
    ref, rmeta = read_safetensors(args.reference)
    k = int(meta["step"]) + 1
    assert bt["step"] == k and int(rmeta["step"]) == k, "batch / reference / checkpoint steps disagree"
    tok, pos, tgt = to_tensors(bt, "cpu")
    loss, logits = loss_sum(model, tok, pos, tgt)
    # Forward: fp32 against fp32 (our Eigen products and loops vs torch's kernels: other summation
    # orders), so each is within its own rounding error of the exact value and neither is closer. The
    # exact value is the twin in float64; e = the twin's own fp32 error on this batch, and the C++ must be
    # within 4 e + 8 u max(1, max |logit|) of it (u = 2^-24; the argument and the measured ratios are
    # in tests/test_python_models.py, which holds the C++ to the same rule on evaluate's logits). Only
    # real rows are compared (padding rows are computed by both but carry no loss). The loss sum: each
    # target's cross-entropy moves by at most 2 max |logit change| (its gradient has l1 norm <= 2), so
    # |loss sum difference| <= 2 tol counted (+ the sum's own rounding, 8 u |loss sum|).
    model64 = load_learned(args.run_prev, dtype=torch.float64, checkpoint=True)
    with torch.no_grad():
        loss64, logits64 = loss_sum(model64, tok, pos, tgt)
    real = torch.from_numpy(np.arange(bt["T"])[None, :] < bt["lengths"][:, None])
    z, zr = logits.detach()[real].double(), ref["logits"].view(bt["B"], bt["T"], -1)[real].double()
    z64 = logits64[real]
    e = float((z - z64).abs().max())
    tol = 4 * e + 8 * 2.0 ** -24 * max(1.0, float(zr.abs().max()))
    fwd_err = float((zr - z64).abs().max())
    loss_ref = float(ref["loss_sum"][0])
    loss_err = abs(float(loss64) - loss_ref)
    loss_tol = 2 * tol * float(ref["counted_targets"][0]) + 8 * 2.0 ** -24 * abs(loss_ref)
    print("forward: max |C++ logit - twin float64| %.2e (tol %.2e = 4 x twin fp32 error %.2e + 8 ulp); loss sum "
          "|diff| %.2e (tol %.2e)" % (fwd_err, tol, e, loss_err, loss_tol))
    # One AdamW step from RUN_PREV's moments with the step-k batch, vs RUN_NEXT's checkpoint.
    names = [n for n, _ in model.named_parameters()]
    opt = AdamW(model.parameters(), cfg["train"], [W["adam.m." + n].clone() for n in names],
                [W["adam.v." + n].clone() for n in names])
    (loss / bt["counted"]).backward()
    norm = opt.step(k)
    nxt, nmeta = read_safetensors(args.run_next + "/checkpoint.safetensors")
    assert int(nmeta["step"]) == k, "RUN_NEXT's checkpoint is not at step %d" % k
    lr = lr_at(cfg["train"], k)
    worst = max(float((p.detach() - nxt[n]).abs().max()) for n, p in model.named_parameters())
    # Gradients agree to fp32 summation order (~1e-7 relative); Adam turns a relative gradient error
    # into at most about the same relative error of the update (with moments from k-1 steps), so the
    # weights must agree far inside one update: 1% of lr_at(k). A wrong gradient, schedule, clipping or
    # bias correction moves them by O(lr).
    print("adamw step %d: grad norm %.4f, lr %.3e, max |weight diff| %.2e (tol %.2e = 0.01 lr)" % (k, norm, lr, worst, 0.01 * lr))
    ok = fwd_err <= tol and loss_err <= loss_tol and worst <= 0.01 * lr
    print("agree" if ok else "DISAGREE")
    return 0 if ok else 1


def torch_adamw(params, tc, dev):
    """torch.optim.AdamW with the run's betas, eps and weight decay, fused where torch has it."""
    kw = dict(lr=tc["lr"], betas=(tc["beta1"], tc["beta2"]), eps=tc["adam_eps"], weight_decay=tc["weight_decay"])
    for extra in ([dict(fused=True)] if dev == "cuda" else []) + [dict(foreach=True), {}]:
        try:
            return torch.optim.AdamW(params, **kw, **extra)
        except (TypeError, RuntimeError):
            continue
    raise RuntimeError("no usable torch.optim.AdamW")


def ours_tokens_per_s(path):
    """{precision: tokens/s} from bench_cuda_train's Google Benchmark JSON (one shape: --run)."""
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for b in doc.get("benchmarks", []):
        name = b.get("name", "")
        if not name.startswith("cuda_train/") or "tokens/s" not in b:
            continue
        # cuda_train/<run>/<precision>[/min_time:5.000][/real_time]: the run is a path (slashes of its own)
        # and Google Benchmark appends its options, so the precision is the last part that is neither.
        parts = [p for p in name.split("/") if p and ":" not in p and p != "real_time"]
        if parts[-1] in ("fp32", "bf16"):
            out[parts[-1]] = float(b["tokens/s"])
    if not out:
        raise SystemExit("torch_twin: %s holds no cuda_train/... benchmark with a tokens/s counter" % path)
    return out


def bench(args):
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("torch_twin: no CUDA device visible to torch", file=sys.stderr)
        return 2
    batches = read_batches(args.batches)
    data = [(to_tensors(b, dev), int(b["counted"]), int(b["lengths"].sum()), int(b["step"])) for b in batches]
    results = {"torch": torch.__version__, "device": dev, "batches": len(batches), "steps": args.steps,
               "warmup": args.warmup}
    if dev == "cuda":
        results["gpu"] = torch.cuda.get_device_name(0)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for variant in ("eager", "compile", "eager-bf16", "compile-bf16"):
        if variant.startswith("compile") and not hasattr(torch, "compile"):
            print("torch_twin: torch %s has no torch.compile: %s skipped" % (torch.__version__, variant))
            results[variant] = "skipped: torch %s has no torch.compile" % torch.__version__
            continue
        cfg, model, _, _ = load_twin(args.run, dev)
        tc = cfg["train"]
        model.check_inputs = False  # the checks read values back from the device every step
        model.set_fused_attention(True)
        fwd = torch.compile(model) if variant.startswith("compile") else model
        opt = torch_adamw(model.parameters(), tc, dev)
        bf16 = variant.endswith("bf16")

        def one(i):
            (tok, pos, tgt), counted, ntok, step = data[i % len(data)]
            for g in opt.param_groups:
                g["lr"] = lr_at(tc, step)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=bf16):
                loss, _ = loss_sum(fwd, tok, pos, tgt)
            (loss.float() / counted).backward()
            if tc["grad_clip"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), tc["grad_clip"])
            opt.step()
            return ntok

        for i in range(args.warmup):
            one(i)
        sync()
        t0, tokens = time.perf_counter(), 0
        for i in range(args.steps):
            tokens += one(args.warmup + i)
        sync()
        dt = time.perf_counter() - t0
        results[variant] = {"tokens_per_s": tokens / dt, "seconds": dt, "tokens": tokens}
        print("%-13s %d steps, %.0f tokens/s (%.2f s)" % (variant, args.steps, tokens / dt, dt))
    if args.ours:
        ours = ours_tokens_per_s(args.ours)
        results["ours"] = ours
        for prec, suffix in (("fp32", ""), ("bf16", "-bf16")):
            runs = [(results[v]["tokens_per_s"], v) for v in ("eager" + suffix, "compile" + suffix)
                    if isinstance(results.get(v), dict)]
            if prec not in ours or not runs:
                continue
            best, which = max(runs)
            results["ratio_" + prec] = ours[prec] / best
            print("ratio %s: ours %.0f tokens/s / torch %s %.0f tokens/s = %.2f" % (prec, ours[prec], which, best,
                                                                                 ours[prec] / best))
    if args.json:
        files.atomic_write(args.json, json.dumps(results, indent=2) + "\n")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("run_prev"), c.add_argument("run_next"), c.add_argument("batches"), c.add_argument("reference")
    b = sub.add_parser("bench")
    b.add_argument("run"), b.add_argument("batches")
    b.add_argument("--device", default="cuda")
    b.add_argument("--steps", type=int, default=50)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--json")
    b.add_argument("--ours", help="bench_cuda_train's JSON (--benchmark_out) on the same run: print the ratio")
    args = ap.parse_args()
    return check(args) if args.cmd == "check" else bench(args)


if __name__ == "__main__":
    sys.exit(main())
