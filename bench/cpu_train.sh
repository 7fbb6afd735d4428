#!/usr/bin/env bash
# The measurements of bench/results/cpu-train/README.md (the fast CPU device, issue 28), in one run:
#   bench/cpu_train.sh OLD NEW OUT [PART...]
#     OLD  a build directory of the commit before the fast device (its learn/train, learn/evaluate)
#     NEW  this tree's build directory (learn/train, learn/evaluate, learn/dump_batches, bench/bench_learn)
#     OUT  the directory the raw results go to (created)
# PARTs (default: all, in this order): machine, bench (bench_learn: GEMM peak, the recipes' steps), train
# (the old binary against the new one on the same runs), torch (PyTorch on the same batches), eval (the
# evaluation grid), curves (500-step loss curves, reference against fast: not timed, about an hour).
# Each timed part runs for a few minutes at most, so that other work on the machine can be paused around
# each: PAUSE and RESUME, if set, are run before and after every part but curves (e.g. `kill -STOP` and
# `kill -CONT` of other processes); what else was running is recorded in OUT/load.txt either way.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 3 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OLD="$(cd "$1" && pwd)"; NEW="$(cd "$2" && pwd)"; OUT="$3"; shift 3
parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=(machine bench train torch eval curves)
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
fig12="$here/learn/configs/paper/fig12-d64.json"
l4h="$here/models/cpu-sa1010-1l4h-d64/config.json"
py=/usr/bin/python3

load() {  # what ran on the machine besides us
  { echo "== $1 $(date -u +%FT%TZ)"; uptime; ps -eo pid,stat,pcpu,etime,args --sort=-pcpu | head -8 | cut -c1-160; } >> "$OUT/load.txt"
}
run_part() {
  local pause="${PAUSE:-}" resume="${RESUME:-}"
  [ "$1" = curves ] && pause= resume=
  if [ -n "$pause" ]; then eval "$pause"; fi
  load "before $1"
  "part_$1" || { if [ -n "$resume" ]; then eval "$resume"; fi; return 1; }
  load "after $1"
  if [ -n "$resume" ]; then eval "$resume"; fi
  return 0
}

part_machine() {
  { lscpu; echo; free -g; echo; g++ --version | head -1; dpkg-query -W libdnnl2 libopenblas0-pthread python3-torch;
    echo "commit $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet || echo -dirty)"; } > "$OUT/machine.txt"
}

# oneDNN's measured peak (BM_GemmPeak) and one step of each recipe on both devices (BM_TrainRecipe).
part_bench() {
  "$NEW/bench/bench_learn" --benchmark_filter='BM_GemmPeak|BM_TrainRecipe' \
    --benchmark_out="$OUT/bench_learn.json" --benchmark_out_format=json > "$OUT/bench_learn.txt"
}

# tokens/s of a run's log rows: steps 6..20 of a fresh run (three rows of 5 steps; the median), exactly
# what the progress line shows, for the old binary (the reference device) and the new one (cpu-fast).
tps() {  # BIN DEVICE CONFIG PRECISION THREADS
  local d; d="$(mktemp -d)"
  local dev=(); [ "$2" = cpu ] || dev=(--device "$2")
  "$1" --config "$3" --precision "$4" --threads "$5" --train-size 20000 --stop-after 20 --log-every 5 \
    --eval-every 0 --checkpoint-every 0 --out "$d/run" -q "${dev[@]}" > /dev/null
  tail -n +3 "$d/run/log.csv" | cut -d, -f5 | sort -n | sed -n 2p
  rm -rf "$d"
}
part_train() {
  echo "recipe,precision,threads,old_cpu,new_cpu,new_cpu_fast" > "$OUT/train.csv"
  for recipe in fig12 l4h; do
    cfg=$fig12; [ $recipe = l4h ] && cfg=$l4h
    for prec in fp32 bf16; do
      for t in 1 2; do
        old=$(tps "$OLD/learn/train" cpu "$cfg" $prec $t)
        new_cpu=-; [ $t = 2 ] && [ $prec = fp32 ] && new_cpu=$(tps "$NEW/learn/train" cpu "$cfg" $prec $t)
        fast=$(tps "$NEW/learn/train" cpu-fast "$cfg" $prec $t)
        echo "$recipe,$prec,$t,$old,$new_cpu,$fast" | tee -a "$OUT/train.csv"
      done
    done
  done
}

# PyTorch (bench/torch_twin.py, eager and bf16 autocast, OpenBLAS, 2 threads) and the fast device on the
# same 8 batches: steps 21-28 of one fig12-d64 run.
part_torch() {
  local run="$OUT/torch/run"; rm -rf "$OUT/torch"; mkdir -p "$OUT/torch"
  "$NEW/learn/train" --config "$fig12" --train-size 20000 --stop-after 18 --eval-every 0 --out "$run" --device cpu-fast -q > /dev/null
  "$NEW/learn/dump_batches" --run "$run" --from 21 --steps 8 --out "$OUT/torch/batches.bin" > /dev/null
  OMP_NUM_THREADS=2 "$py" "$here/bench/torch_twin.py" bench "$run" "$OUT/torch/batches.bin" --device cpu --steps 8 \
    --warmup 2 --json "$OUT/torch/torch.json" > "$OUT/torch/torch.txt"
  echo "precision,ours_tokens_per_s" > "$OUT/torch/ours.csv"
  for prec in fp32 bf16; do  # steps 21-28 resumed from step 18 (19-20 warm up; log rows at 24 and 28: their mean)
    local d="$OUT/torch/ours-$prec"; cp -r "$run" "$d"
    "$NEW/learn/train" --out "$d" --resume --stop-after 28 --log-every 4 --precision $prec --allow-precision-change \
      --device cpu-fast --threads 2 -q > /dev/null
    echo "$prec,$(grep -E '^(24|28),' "$d/log.csv" | cut -d, -f5 | awk '{s += $1} END {print s / NR}')" >> "$OUT/torch/ours.csv"
  done
}

# The paper's grid (30 x 29 cells) with 20 samples per cell: the old binary (the reference) and the
# new one on the fast device, 2 threads; the CSVs are compared.
part_eval() {
  local m="$here/models/cpu-sa1010-1l4h-d64"
  /usr/bin/time -f "%e" -o "$OUT/eval_old.time" "$OLD/learn/evaluate" --model "$m" --samples 20 --threads 2 \
    --csv "$OUT/eval_old.csv" --png "$OUT/eval_old.png" -q > "$OUT/eval_old.txt"
  /usr/bin/time -f "%e" -o "$OUT/eval_fast.time" "$NEW/learn/evaluate" --model "$m" --samples 20 --threads 2 \
    --device cpu-fast --csv "$OUT/eval_fast.csv" --png "$OUT/eval_fast.png" -q > "$OUT/eval_fast.txt"
  if cmp -s "$OUT/eval_old.csv" "$OUT/eval_fast.csv"; then echo same > "$OUT/eval_csv_compare.txt"
  else diff "$OUT/eval_old.csv" "$OUT/eval_fast.csv" > "$OUT/eval_csv_compare.txt" || true; fi
}

# 500 steps of the 1L4H d64 recipe in fp32 and bf16 and of fig12-d64 in its precision, bf16 (the
# reference takes ~30 min per fig12 run here): the reference (the old binary) with 2 threads and with 1
# (another fp32 order: the spread of the reference against itself) and the fast device with 2; the log
# rows (mean loss of each 50 steps) side by side in OUT/curves.csv.
part_curves() {
  echo "recipe,precision,step,ref_t2,ref_t1,fast_t2" > "$OUT/curves.csv"
  for recipe in l4h fig12; do
    cfg=$fig12; [ $recipe = l4h ] && cfg=$l4h
    precs=(fp32 bf16); [ $recipe = fig12 ] && precs=(bf16)
    for prec in "${precs[@]}"; do
      local d="$OUT/curves/$recipe-$prec"; rm -rf "$d"; mkdir -p "$d"
      "$OLD/learn/train" --config "$cfg" --precision $prec --threads 2 --stop-after 500 --log-every 50 --eval-every 0 \
        --out "$d/ref_t2" -q > /dev/null
      "$OLD/learn/train" --config "$cfg" --precision $prec --threads 1 --stop-after 500 --log-every 50 --eval-every 0 \
        --out "$d/ref_t1" -q > /dev/null
      "$NEW/learn/train" --config "$cfg" --precision $prec --threads 2 --stop-after 500 --log-every 50 --eval-every 0 \
        --out "$d/fast_t2" --device cpu-fast -q > /dev/null
      paste -d, <(tail -n +2 "$d/ref_t2/log.csv" | cut -d, -f1,2) <(tail -n +2 "$d/ref_t1/log.csv" | cut -d, -f2) \
        <(tail -n +2 "$d/fast_t2/log.csv" | cut -d, -f2) | sed "s/^/$recipe,$prec,/" >> "$OUT/curves.csv"
    done
  done
}

for p in "${parts[@]}"; do
  echo "cpu_train.sh: $p" >&2
  run_part "$p"
done
