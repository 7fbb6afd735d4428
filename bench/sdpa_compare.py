#!/usr/bin/env python3
"""Times torch.nn.functional.scaled_dot_product_attention(is_causal=True) on the constructed model's
per-head Q X0, K X0, V X0 (written by export_qkv) and, in the same run on the same GPU, our bench_cuda
at the same N; prints both and the ratio, with torch.__version__ and the GPU's name.

usage:
  build/construct/export_qkv --n 1000 --m 1000 --out /tmp/qkv
  python3 bench/sdpa_compare.py /tmp/qkv [--bench build/bench/bench_cuda] [--log2n 21]
                                [--dtype float32|float16|bfloat16] [--reps 3] [--json FILE]

Needs torch >= 2.1 (the scale argument of SDPA) and numpy. The q, k and v rows of every head are
zero-padded to one width D, a multiple of 8 (zero columns add nothing to q.k, and the value's one real
column stays column 0): a value width of 1 is not served by the fused kernels, and PyTorch's math
kernel would materialise the N x N score matrix (3.7 TB at N = 2M). The math kernel is disabled, so a
shape no fused kernel takes fails with PyTorch's message instead of allocating it. bench_cuda's
timings are read from Google Benchmark's JSON output file (--benchmark_out), never from its console.
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


def fused_kernels_only():
    """A context in which SDPA may not fall back to its math kernel (API of torch >= 2.3, else 2.0)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_mem_efficient=True, enable_math=False)
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends.append(SDPBackend.CUDNN_ATTENTION)
    return sdpa_kernel(backends)


def run_bench_cuda(exe, log2n):
    """The BM_cuda_forward/<log2n>/0 row of bench_cuda, from its --benchmark_out JSON file."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        r = subprocess.run([exe, f"--benchmark_filter=^BM_cuda_forward/{log2n}/0(/|$)",
                            f"--benchmark_out={out}", "--benchmark_out_format=json"], capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(out):
            # bench_cuda exits 0 without writing results when it finds no device: its message says so.
            raise SystemExit(f"sdpa_compare: {exe} gave no results (exit {r.returncode}):\n{r.stdout}{r.stderr}")
        try:
            with open(out) as f:
                rows = [b for b in json.load(f)["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
        except (ValueError, KeyError):  # an empty file: no benchmark matched the filter
            rows = []
    if not rows:
        raise SystemExit(f"sdpa_compare: {exe} has no row BM_cuda_forward/{log2n}/0 (log2n in 14..21)")
    return rows[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("qkv_dir", help="directory holding qkv.safetensors (export_qkv --out)")
    ap.add_argument("--bench", default="build/bench/bench_cuda")
    ap.add_argument("--log2n", type=int, default=None, help="bench_cuda row to run (default: from N)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="also write the numbers to this file")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_compare: no CUDA device visible to torch", file=sys.stderr)
        return 2
    try:
        T, meta = safetensors.read(os.path.join(a.qkv_dir, "qkv.safetensors"), use_numpy=True)
    except safetensors.InputError as e:
        print(f"sdpa_compare: {e}", file=sys.stderr)
        return 2
    N = int(meta["N"])
    dt = getattr(torch, a.dtype)
    D = -(-max(T[f"q{h}"].shape[1] for h in range(1, 5)) // 8) * 8

    def heads(kind):  # (1, 4 heads, N, D), zero-padded columns
        x = torch.stack([torch.nn.functional.pad(torch.from_numpy(T[f"{kind}{h}"]), (0, D - T[f"{kind}{h}"].shape[1]))
                         for h in range(1, 5)])
        return x[None].to("cuda", dt)

    q, k, v = heads("q"), heads("k"), heads("v")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with fused_kernels_only():
        sdpa(q, k, v, is_causal=True, scale=1.0)  # warm-up (lambda is folded into q and k)
        torch.cuda.synchronize()
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            o = sdpa(q, k, v, is_causal=True, scale=1.0)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    t_sdpa = min(times)
    gpu = torch.cuda.get_device_name()
    print(f"torch {torch.__version__}  device {gpu}  N={N} D={D} dtype={a.dtype}")
    print(f"sdpa(is_causal) all N rows: {t_sdpa:.4f} s (best of {a.reps}); out[0,:,-1,0] = {o[0, :, -1, 0].tolist()}")

    log2n = a.log2n if a.log2n is not None else max(14, min(21, (N - 1).bit_length()))
    row = run_bench_cuda(a.bench, log2n)
    to_s = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[row.get("time_unit", "ns")]
    t_ours = row["real_time"] * to_s  # manual time = the attention kernel's device time
    print(f"bench_cuda {row['name']}: N={int(row['N'])} kernel {t_ours:.4f} s (response rows only)")
    if int(row["N"]) != N:
        print(f"note: bench N {int(row['N'])} != exported N {N}; export with the bench's n = m "
              f"({int(row['n=m'])}) for a like-for-like ratio")
    print(f"ratio sdpa / ours = {t_sdpa / t_ours:.2f}")
    if a.json:
        files.atomic_write(a.json, json.dumps({
            "torch": torch.__version__, "gpu": gpu, "N": N, "D": D, "dtype": a.dtype, "sdpa_seconds": t_sdpa,
            "reps": a.reps, "bench_row": row, "ratio_sdpa_over_ours": t_sdpa / t_ours}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
