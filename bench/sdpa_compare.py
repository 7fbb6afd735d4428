#!/usr/bin/env python3
"""Times torch.nn.functional.scaled_dot_product_attention(is_causal=True) on the constructed model's
per-head Q X0, K X0, V X0 (written by build/kernels/export_qkv) and, in the same run on the same GPU,
our bench_cuda at the same N; prints both and the ratio, with torch.__version__.

usage: python3 bench/sdpa_compare.py QKV_DIR [--bench build/bench/bench_cuda --log2n 21] [--dtype float32]
"""
import argparse, json, re, struct, subprocess, sys, time

import torch


def load_safetensors(path):
    with open(path, "rb") as f:
        hl = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(hl))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(t["shape"])
    return out, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("qkv_dir")
    ap.add_argument("--bench", default="build/bench/bench_cuda")
    ap.add_argument("--log2n", type=int, default=None, help="bench_cuda row to run (default: from N)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    T, meta = load_safetensors(a.qkv_dir + "/qkv.safetensors")
    N = int(meta["N"])
    dt = getattr(torch, a.dtype)
    D = max(T[f"q{h}"].shape[1] for h in range(1, 5))
    pad = lambda x, w: torch.nn.functional.pad(x, (0, w - x.shape[1]))
    # (1, 4 heads, N, D): heads padded with zero columns (zeros add nothing to q.k); values width 1
    q = torch.stack([pad(T[f"q{h}"], D) for h in range(1, 5)])[None].to("cuda", dt)
    k = torch.stack([pad(T[f"k{h}"], D) for h in range(1, 5)])[None].to("cuda", dt)
    v = torch.stack([T[f"v{h}"] for h in range(1, 5)])[None].to("cuda", dt)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sdpa(q, k, v, is_causal=True, scale=1.0)  # warm-up (lambda is folded into q and k)
    torch.cuda.synchronize()
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        o = sdpa(q, k, v, is_causal=True, scale=1.0)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    t_sdpa = min(times)
    print(f"torch {torch.__version__}  device {torch.cuda.get_device_name()}  N={N} D={D} dtype={a.dtype}")
    print(f"sdpa(is_causal) all N rows: {t_sdpa:.4f} s (best of {a.reps}); out[0,:,-1,0] = {o[0, :, -1, 0].tolist()}")
    log2n = a.log2n if a.log2n is not None else max(14, min(21, N.bit_length()))
    r = subprocess.run([a.bench, f"--benchmark_filter=BM_cuda_forward/{log2n}/0$", "--benchmark_format=json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr, file=sys.stderr)
        sys.exit(1)
    j = json.loads(r.stdout)
    row = j["benchmarks"][0]
    t_ours = row["real_time"] / 1e3  # ms -> s (manual time = kernel time)
    print(f"bench_cuda {row['name']}: N={int(row['N'])} kernel {t_ours:.4f} s (response rows only)")
    if int(row["N"]) != N:
        print(f"note: bench N {int(row['N'])} != exported N {N}; export with the bench's n = m "
              f"({int(row['n=m'])}) for a like-for-like ratio")
    print(f"ratio sdpa / ours = {t_sdpa / t_ours:.2f}")


if __name__ == "__main__":
    main()
