#!/usr/bin/env python3
"""The peer comparison in one run on one device: PyTorch's scaled_dot_product_attention (is_causal) in
float32 (the efficient backend, at the largest prefix of the sequence where it runs) and in bfloat16
(its time and how wrong it is against the structured engine), and ours (bench_cuda: the tensor-core
kernel), as ratios at equal N and per causal score of the rows each computes.

usage:
  build/construct/export_qkv --n 1000 --m 1000 --out /tmp/qkv
  python3 bench/sdpa_compare.py /tmp/qkv [--bench build/bench/bench_cuda] [--device auto|cuda|cpu]
                                [--reps 3] [--json FILE]

Input: qkv.safetensors from export_qkv (q{h}, k{h}, v{h} per head, and ref{h}, the structured engine's
head outputs at the response rows first..N-1). q, k, v of every head are zero-padded to one width D, a
multiple of 8 (zero columns add nothing to q.k; the value's one real column stays column 0): a value
width of 1 is not served by the fused kernels, and the math kernel would materialise the N x N score
matrix (3.7 TB at N = 2M). On the GPU the math kernel is disabled, so a shape no fused kernel takes
fails with PyTorch's message instead of allocating it; the float32 run then halves the prefix until it
runs. bench_cuda's timings are read from Google Benchmark's JSON file (--benchmark_out), never from its
console. Rows: SDPA computes all N rows, ours the response rows first..N-1; the per-score ratio divides
each time by its causal score count (N (N + 1) / 2 against that minus first (first + 1) / 2).
On the CPU (--device cpu, or auto without a GPU) it runs SDPA at toy N (the math kernel allowed) and
prints that ours is skipped: a check of this script, not a measurement.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from manyadd import files, safetensors  # noqa: E402  (the project's reader, by path: nothing to install)

CPU_MAX_N = 4096  # the math kernel's N x N scores on the CPU: 64 MiB per head at this N


def fused_kernels_only(efficient_only):
    """A context in which SDPA may not fall back to its math kernel (API of torch >= 2.3, else 2.0)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=not efficient_only, enable_mem_efficient=True,
                                              enable_math=False)
    backends = [SDPBackend.EFFICIENT_ATTENTION]
    if not efficient_only:
        backends.append(SDPBackend.FLASH_ATTENTION)
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            backends.append(SDPBackend.CUDNN_ATTENTION)
    return sdpa_kernel(backends)


def run_bench_cuda(exe, n, m):
    """bench_cuda's tensor-core row at the exported shape, from its --benchmark_out JSON file; None
    (with bench_cuda's message) when it ran no benchmark (no device)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        r = subprocess.run([exe, f"--shape={n},{m}", "--benchmark_filter=^BM_cuda_shape/",
                            f"--benchmark_out={out}", "--benchmark_out_format=json"], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"sdpa_compare: {exe} failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
        if not os.path.exists(out):
            return None, (r.stdout + r.stderr).strip()
        with open(out) as f:
            rows = [b for b in json.load(f).get("benchmarks", []) if b.get("run_type", "iteration") == "iteration"]
    if not rows:
        raise SystemExit(f"sdpa_compare: {exe} wrote no row BM_cuda_shape/{n}x{m}")
    return rows[0], ""


def math_attention(q, k, v, is_causal, scale):
    """SDPA's math kernel written out (torch < 2.1 on the CPU): softmax(scale q k^T, causal) v."""
    s = scale * q @ k.transpose(-1, -2)
    n = s.shape[-1]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")) if is_causal else s
    return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v


def causal_scores(N, first=0):
    return N * (N + 1) // 2 - first * (first + 1) // 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("qkv_dir", help="directory holding qkv.safetensors (export_qkv --out)")
    ap.add_argument("--bench", default="build/bench/bench_cuda")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="also write the numbers to this file")
    a = ap.parse_args()
    if a.reps < 1:
        print("sdpa_compare: --reps must be >= 1", file=sys.stderr)
        return 2
    dev = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if dev == "cuda" and not torch.cuda.is_available():
        print("sdpa_compare: --device cuda: no CUDA device visible to torch", file=sys.stderr)
        return 2
    try:
        T, meta = safetensors.read(os.path.join(a.qkv_dir, "qkv.safetensors"), use_numpy=True)
        N, first, n, m = (int(meta[k]) for k in ("N", "first", "n", "m"))
        refs = [T[f"ref{h}"][:, 0] for h in range(1, 5)]
        D = -(-max(T[f"q{h}"].shape[1] for h in range(1, 5)) // 8) * 8
    except (safetensors.InputError, KeyError, OSError) as e:
        print(f"sdpa_compare: {a.qkv_dir}: {e} (export it with this build's export_qkv)", file=sys.stderr)
        return 2
    if dev == "cpu" and N > CPU_MAX_N:
        print(f"sdpa_compare: N = {N} is above the CPU toy limit {CPU_MAX_N}; run on a GPU", file=sys.stderr)
        return 2

    def heads(kind, dt, rows=N):  # (1, 4 heads, rows, D), zero-padded columns
        x = torch.stack([torch.nn.functional.pad(torch.from_numpy(T[f"{kind}{h}"][:rows]),
                                                 (0, D - T[f"{kind}{h}"].shape[1])) for h in range(1, 5)])
        return x[None].to(dev, dt)

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if sdpa is None or torch.__version__ < "2.1":
        if dev == "cuda":
            print(f"sdpa_compare: torch {torch.__version__} has no SDPA with a scale argument (>= 2.1)", file=sys.stderr)
            return 2
        sdpa = math_attention  # the CPU check of this script with an older torch

    def timed(rows, dt, efficient_only):
        q, k, v = heads("q", dt, rows), heads("k", dt, rows), heads("v", dt, rows)
        ctx = fused_kernels_only(efficient_only) if dev == "cuda" else torch.no_grad()
        with ctx:
            o = sdpa(q, k, v, is_causal=True, scale=1.0)  # warm-up (lambda is folded into q and k)
            sync()
            times = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                o = sdpa(q, k, v, is_causal=True, scale=1.0)
                sync()
                times.append(time.perf_counter() - t0)
        return min(times), o

    def error(o):  # largest |sdpa - structured| over the response rows, per head
        out = o[0, :, first:, 0].float().cpu().numpy()
        return [float(abs(out[h] - refs[h]).max()) for h in range(4)]

    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
           "N": N, "n": n, "m": m, "first": first, "D": D, "lambda": float(meta["lambda"]), "reps": a.reps}
    # SDPA float32: the largest prefix (halving) where the efficient backend runs.
    rows32, t32, err32 = N, None, None
    while rows32 >= 1024 or dev == "cpu":
        try:
            t32, o32 = timed(rows32, torch.float32, True)
            err32 = error(o32) if rows32 == N else None
            break
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            print(f"sdpa float32 at N = {rows32}: {str(e).splitlines()[0]}")
            rows32 //= 2
            if dev == "cuda":
                torch.cuda.empty_cache()
    # SDPA bfloat16 at the full N (any fused backend).
    t16, o16 = timed(N, torch.bfloat16, False)
    err16 = error(o16)
    res.update({"sdpa_fp32": {"N": rows32 if t32 else None, "seconds": t32, "max_error_per_head": err32},
                "sdpa_bf16": {"N": N, "seconds": t16, "max_error_per_head": err16}})
    print(f"torch {res['torch']}  device {res['device']}  N={N} (n={n}, m={m}) first={first} D={D}")
    if t32:
        print(f"sdpa float32{' (efficient)' if dev == 'cuda' else ''} N={rows32}: {t32:.4f} s, all {rows32} rows"
              + (f"; max |error| per head vs structured {err32}" if err32 else " (a prefix: no error measured)"))
    else:
        print("sdpa float32 (efficient): did not run at any N >= 1024")
    print(f"sdpa bfloat16 N={N}: {t16:.4f} s, all {N} rows; max |error| per head vs structured {err16}")

    row, why = run_bench_cuda(a.bench, n, m)
    if row is None:
        print(f"ours: skipped ({why or 'bench_cuda ran nothing'})")
        res["ours"] = None
    else:
        to_s = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[row.get("time_unit", "ns")]
        t_ours = row["real_time"] * to_s
        s_ours = causal_scores(N, first)
        res["ours"] = {"N": int(row["N"]), "rows": N - first, "seconds": t_ours, "prep_seconds": row.get("prep_s"),
                       "tc_frac": row.get("tc_frac"), "mufu_frac": row.get("mufu_frac"), "bench_row": row}
        print(f"ours (tensor core) N={int(row['N'])}: kernel {t_ours:.4f} s, rows {first}..{N - 1}; "
              f"tc_frac {row.get('tc_frac', 0):.3f}, mufu_frac {row.get('mufu_frac', 0):.3f}")
        ratios = {"bf16_over_ours_equal_N": t16 / t_ours,
                  "bf16_over_ours_per_score": (t16 / causal_scores(N)) / (t_ours / s_ours)}
        if t32:
            # at equal rows scored: our time scaled to the fp32 run's prefix by score counts
            ratios["fp32_over_ours_per_score"] = (t32 / causal_scores(rows32)) / (t_ours / s_ours)
            if rows32 == N:
                ratios["fp32_over_ours_equal_N"] = t32 / t_ours
        res["ratios"] = ratios
        for k, v in ratios.items():
            print(f"ratio {k} = {v:.2f}")
    if a.json:
        files.atomic_write(a.json, json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
