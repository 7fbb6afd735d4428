#!/usr/bin/env bash
# One GPU lease, in the order bench/results/GPU-NEXT.md gives: each PART is one call of the device tool
# (at most 10 minutes each; a lease is 15 minutes in all, the machine's start included), and within a part
# the steps run in order, each under its own time limit, so that whatever the lease cuts short, what ran
# before it is already under $OUT.
#   bench/gpu/lease.sh PART        PART 1: every GPU test  2: the constructed kernel (ncu, headline) and the
#                                  trainer's tokens/s  3: a carried piece of a paper-width run
#   bench/gpu/lease.sh --plan      the steps, their limits and commands; checks that $G/bin has every binary
# Runs after `. bench/gpu/pre.sh` (G, LD_LIBRARY_PATH); writes at most 6 files per part into $OUT:
# lease-PART.log (every step's command, exit code, seconds and output) and the steps' JSON/ncu files.
# LEASE_SECONDS (default 540) caps a part: a step gets min(its limit, what is left).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# part:name:limit_s:command (the command runs under bash -c; $G, $OUT and $here are set)
steps=(
  "1:nvidia-smi:20:nvidia-smi; nvidia-smi -q -d CLOCK | head -40; cat \$G/MANIFEST"
  "1:mma-probe:90:MANYADD_MMA_PROBE_REPORT=\$OUT/mma_probe.txt \$G/bin/test_mma_probe --gtest_filter='MmaProbeGpu.*'"
  "1:engine-tests:120:\$G/bin/test_cuda_engine --gtest_filter='CudaEngineGpu.*'"
  "1:kernel-tests:120:\$G/bin/test_cuda_train_kernels --gtest_filter='*Gpu.*'"
  "1:trainer-tests:180:\$G/bin/test_cuda_train --gtest_filter='*Gpu.*'"
  "2:kernel-headline:90:\$G/bin/bench_cuda --shape=1000,1000 --benchmark_filter='^BM_cuda_shape/' --benchmark_out=\$OUT/bench_2011005.json --benchmark_out_format=json"
  "2:ncu-2^17:180:if command -v ncu >/dev/null; then ncu --set full --launch-count 1 -f -o \$OUT/kernel-256x256 \$G/bin/bench_cuda --shape=256,256 --benchmark_filter='^BM_cuda_shape/' && ncu --import \$OUT/kernel-256x256.ncu-rep --page details; else echo 'ncu: not on this image'; fi"
  "2:verify-headline:90:\$G/bin/verify_construction --n 1000 --m 1000 --engine cuda --certify-cuda --json \$OUT/verify_cuda.json"
  "2:trainer-tokens:150:\$G/bin/bench_cuda_train --benchmark_out=\$OUT/bench_cuda_train.json --benchmark_out_format=json"
  "3:paper-width-piece:420:\$G/bin/train --config \$here/learn/configs/paper/fig12-d256.json --device cuda --seed 1 --out \$OUT/fig12-d256-s1 --max-seconds 360 -q"
)
binaries=(test_mma_probe test_cuda_engine test_cuda_train_kernels test_cuda_train bench_cuda verify_construction
          bench_cuda_train train)

usage() { echo "usage: bench/gpu/lease.sh PART (1, 2 or 3) | --plan" >&2; exit 2; }
[ $# -eq 1 ] || usage
if [ "$1" = "--plan" ]; then
  total=0
  for s in "${steps[@]}"; do
    IFS=: read -r part name limit cmd <<< "$s"
    printf 'part %s  %-18s <= %3s s  %s\n' "$part" "$name" "$limit" "$cmd"
  done
  for p in 1 2 3; do
    t=0
    for s in "${steps[@]}"; do IFS=: read -r part _ limit _ <<< "$s"; [ "$part" = "$p" ] && t=$((t + limit)); done
    echo "part $p: at most $t s of steps"
    total=$((total + t))
  done
  if [ -n "${G:-}" ]; then
    for b in "${binaries[@]}"; do
      [ -x "$G/bin/$b" ] || { echo "lease: \$G/bin/$b is missing (bench/gpu/gather.sh bundles it)" >&2; exit 2; }
    done
    echo "every binary present in $G/bin"
  fi
  exit 0
fi
case "$1" in 1|2|3) part=$1 ;; *) usage ;; esac
[ -n "${G:-}" ] || { echo "lease: G is not set: run '. bench/gpu/pre.sh' first" >&2; exit 3; }
[ -n "${OUT:-}" ] && [ -d "$OUT" ] || { echo "lease: OUT is not a directory" >&2; exit 2; }
export G OUT here
log="$OUT/lease-$part.log"
budget="${LEASE_SECONDS:-540}"
start=$(date +%s)
echo "lease part $part, $(date -u +%FT%TZ), commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown), budget ${budget} s" > "$log"
failed=0
for s in "${steps[@]}"; do
  IFS=: read -r p name limit cmd <<< "$s"
  [ "$p" = "$part" ] || continue
  left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt 10 ]; then echo "== $name: not run (the part's budget is spent)" >> "$log"; failed=1; continue; fi
  [ "$limit" -lt "$left" ] || limit=$left
  echo "== $name (limit $limit s): $cmd" >> "$log"
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" bash -c "$cmd" >> "$log" 2>&1
  rc=$?
  echo "== $name: exit $rc after $(( $(date +%s) - t0 )) s" >> "$log"
  [ "$rc" -eq 0 ] || failed=1
done
echo "lease part $part done in $(( $(date +%s) - start )) s" >> "$log"
grep '^== ' "$log"
exit $failed
