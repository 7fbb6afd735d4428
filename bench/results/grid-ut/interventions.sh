#!/bin/bash
# interventions.sh [OUT]: where the committed grid models' extrapolation breaks, found by intervening at
# test (README.md here, "Why the extrapolation stops"). From the repository root after ./x build; writes
# OUT (default bench/results/grid-ut/interventions): one evaluate_grid CSV per experiment, the per-problem
# rows under OUT/problems/ (not committed: megabytes) and errors.py's tables in OUT/errors.md.
#   1. Seq2Grid's soft actions: every model on 2 terms of 602-4000 digits with its soft actions (the
#      paper's test) and with --hard-actions (each token's argmax action, weight 1), on the same problems;
#      and the instances of terms, where hard actions should change nothing.
#   2. The halting: --fixed-steps N on 2 x 1000 (noGroups) and on 7, 8 and 10 terms (base), beside the
#      steps the halting takes.
#   3. The base model's soft actions on 2 terms of 200-500 digits: where its length limit lies.
#   4. The base models at step 5,100 (before the overtraining phase; runs.sh's RUN-step5100/, seed 1's
#      taken from the commit that held it as models/cpu-grid-ut-base-s1) on 2 x 602, soft and hard.
#   5. Every later seed's finished run (runs.sh's RUN/ at step 8,100: base2, nogroups2, base3, nogroups3)
#      through part 1's soft / hard pairs; a run not finished yet is skipped (run this again later).
#   6. The leak over the overtraining phase: the runs' checkpoints committed mid-phase (base seed 1 at step
#      6,482, base seed 2 at 6,900, noGroups seed 1 at 6,700; taken from git history) on 2 x 602, and base
#      seed 2's at step 6,900 on the whole of Table III (the paper's test, 1000 problems each).
# Every run is evaluate_grid's default seed (1), so each intervention sees the problems, grids and halting
# draws of the run without it. 1 thread, so that a training can use the other core; about an hour.
set -euo pipefail
out=${1:-bench/results/grid-ut/interventions}
mkdir -p "$out/problems"
B=models/cpu-grid-ut-base-s1
G=models/cpu-grid-ut-nogroups-s1
ev() {  # ev NAME MODEL ARGS...: one evaluate_grid run, its rows in NAME.csv and NAME's problems
  local name=$1 model=$2
  shift 2
  [ -f "$out/$name.csv" ] && return 0  # done by an earlier call
  build/learn/evaluate_grid --model "$model" --threads 1 --device cpu-fast -q "$@" \
    --problems-csv "$out/problems/$name.csv" --csv "$out/$name.csv.tmp" && mv "$out/$name.csv.tmp" "$out/$name.csv"
}
# 1. soft and hard actions
ev base-602-soft $B --instance 2x602 --samples 1000
ev base-602-hard $B --instance 2x602 --samples 1000 --hard-actions
ev nogroups-602-soft $G --instance 2x602 --samples 1000
ev nogroups-602-hard $G --instance 2x602 --samples 1000 --hard-actions
for m in base nogroups; do
  [ $m = base ] && model=$B || model=$G
  ev $m-long-soft $model --instance 2x1000 --instance 2x2000 --instance 2x4000 --samples 100
  ev $m-long-hard $model --instance 2x1000 --instance 2x2000 --instance 2x4000 --samples 100 --hard-actions
  ev $m-terms-soft $model --instance 1-4x1-10 --instance 5-6x1-10 --instance 7-10x1-10 --samples 1000
  ev $m-terms-hard $model --instance 1-4x1-10 --instance 5-6x1-10 --instance 7-10x1-10 --samples 1000 --hard-actions
done
# 2. the halting against fixed step counts
for n in 6 7 8 9 10 12; do
  ev nogroups-1000-fixed$n $G --instance 2x1000 --samples 200 --fixed-steps $n
done
ev nogroups-1000-halting $G --instance 2x1000 --samples 200
for n in 10 12 14 16 18 20; do
  ev base-terms-fixed$n $B --instance 7x1-10 --instance 8x1-10 --instance 10x1-10 --samples 300 --fixed-steps $n
done
ev base-terms-halting $B --instance 7x1-10 --instance 8x1-10 --instance 10x1-10 --samples 300
# 1 and 2 together: noGroups with hard actions and 8 steps (8: the smallest best count on 2 x 1000 above),
# held out on the longer instances
ev nogroups-long-hardfixed8 $G --instance 2x1000 --instance 2x2000 --instance 2x4000 --samples 100 --hard-actions \
  --fixed-steps 8
# 3. the length at which the base model's soft grid stops being read: 2 terms of 200-600 digits
ev base-lengths-soft $B --instance 2x200 --instance 2x300 --instance 2x350 --instance 2x400 --instance 2x450 \
  --instance 2x500 --samples 100
# 4. the base seeds before their overtraining phase (RUN-step5100/) on 2 x 602
for s in 1 2; do
  ev base${s}at5100-602-soft bench/results/grid-ut/base-seed$s-step5100 --instance 2x602 --samples 200
  ev base${s}at5100-602-hard bench/results/grid-ut/base-seed$s-step5100 --instance 2x602 --samples 200 --hard-actions
done
# 5. the later seeds' finished runs, soft and hard actions as in 1
for run in base-seed2 nogroups-seed2 base-seed3 nogroups-seed3; do
  d=bench/results/grid-ut/$run
  [ -f "$d/log.csv" ] && [ "$(tail -n 1 "$d/log.csv" | cut -d, -f1)" = 8100 ] || { echo "interventions.sh: $run not finished, skipped"; continue; }
  p=${run%-seed*}${run#*-seed}  # base-seed2 -> base2
  ev $p-602-soft "$d" --instance 2x602 --samples 1000
  ev $p-602-hard "$d" --instance 2x602 --samples 1000 --hard-actions
  ev $p-long-soft "$d" --instance 2x1000 --instance 2x2000 --instance 2x4000 --samples 100
  ev $p-long-hard "$d" --instance 2x1000 --instance 2x2000 --instance 2x4000 --samples 100 --hard-actions
  ev $p-terms-soft "$d" --instance 1-4x1-10 --instance 5-6x1-10 --instance 7-10x1-10 --samples 1000
  ev $p-terms-hard "$d" --instance 1-4x1-10 --instance 5-6x1-10 --instance 7-10x1-10 --samples 1000 --hard-actions
done
# 6. the committed mid-phase checkpoints (git history: RUN/ at the commit that held that step)
mid=$(mktemp -d)
trap 'rm -rf "$mid"' EXIT
for spec in base1at6482:base-seed1:77112fc base2at6900:base-seed2:e3bd818 nogroups1at6700:nogroups-seed1:4084cc5; do
  IFS=: read -r name run commit <<< "$spec"
  mkdir -p "$mid/$name"
  for f in config.json model.safetensors; do git show "$commit:bench/results/grid-ut/$run/$f" > "$mid/$name/$f"; done
  ev $name-602-soft "$mid/$name" --instance 2x602 --samples 200
  ev $name-602-hard "$mid/$name" --instance 2x602 --samples 200 --hard-actions
done
# base seed 2 mid-phase solved 2 x 602: the whole of Table III, the paper's test (no intervention)
ev base2at6900-tableiii "$mid/base2at6900" --table iii --samples 1000
# errors.py over the problems here (a fresh checkout has only the runs it made since: --update keeps the
# other runs' sections of the committed errors.md)
shopt -s nullglob
python3 bench/results/grid-ut/errors.py --update "$out/errors.md" "$out"/problems/*.csv
echo "interventions.sh: done ($out)"
