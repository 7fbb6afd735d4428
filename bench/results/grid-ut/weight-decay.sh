#!/bin/bash
# weight-decay.sh [THREADS [RUN COMMIT]]: one controlled change to a run's overtraining phase, to test the
# reading that weight decay drives Seq2Grid's leak while the loss cannot see it (README, "The leak read from
# the weights"). Default: base seed 2 from its checkpoint at step 6,900 (commit e3bd818: digit leak 1.29e-4,
# 2 x 602 solved); RUN COMMIT: the checkpoint of bench/results/grid-ut/RUN committed at COMMIT (base-seed1
# 77112fc: step 6,482). From that step to 8,100 again with --weight-decay 0 instead of 0.1, everything else
# as the run (bit for bit up to the change: train_grid records it in run.train_changes), into RUN-wd0-fromSTEP/.
# Then leak.py on the result beside the checkpoint's model and the run's own step 8,100, and the paper's
# test on 2 x 602 (200 problems) and [5, 6] / [7, 10] x [1, 10] (1000), as interventions.sh evaluated the
# mid-phase models. From the repository root after ./x build; safe to kill and rerun (it resumes). About 25
# minutes at 2 threads for base seed 2's 1,200 steps.
set -euo pipefail
threads=${1:-2}
run=${2:-base-seed2}
commit=${3:-e3bd818}
here=bench/results/grid-ut
case $run in
  base-seed[0-9]*|nogroups-seed[0-9]*) ;;
  *) echo "weight-decay.sh: unknown run '$run' (base-seedS | nogroups-seedS)" >&2; exit 2 ;;
esac
git cat-file -e "$commit:$here/$run/checkpoint.safetensors" 2>/dev/null ||
  { echo "weight-decay.sh: commit '$commit' holds no checkpoint of $here/$run" >&2; exit 2; }
step=$(git show "$commit:$here/$run/config.json" | sed -n 's/^ *"step": \([0-9]*\),*$/\1/p')
[ -n "$step" ] && [ "$step" -ge 5100 ] && [ "$step" -lt 8100 ] ||
  { echo "weight-decay.sh: the checkpoint at $commit is at step '$step', not inside the overtraining phase (5,100-8,099)" >&2; exit 2; }
d=$here/$run-wd0-from$step
if [ ! -f "$d/checkpoint.safetensors" ]; then
  mkdir -p "$d.tmp"
  for f in config.json checkpoint.safetensors model.safetensors log.csv eval.csv; do
    git show "$commit:$here/$run/$f" > "$d.tmp/$f"
  done
  mv "$d.tmp" "$d"
fi
build/learn/train_grid --out "$d" --resume --weight-decay 0 --threads "$threads" --device cpu-fast -q
if [ ! -f "$d-602.csv" ]; then
  build/learn/evaluate_grid --model "$d" --instance 2x602 --samples 200 --threads "$threads" --device cpu-fast -q \
    --csv "$d-602.tmp.csv"
  mv "$d-602.tmp.csv" "$d-602.csv"
fi
if [ ! -f "$d-terms.csv" ]; then
  build/learn/evaluate_grid --model "$d" --instance 5-6x1-10 --instance 7-10x1-10 --samples 1000 --threads "$threads" \
    --device cpu-fast -q --csv "$d-terms.tmp.csv"
  mv "$d-terms.tmp.csv" "$d-terms.csv"
fi
/usr/bin/python3 "$here/leak.py" "$commit:$here/$run/model.safetensors" "$here/$run" "$d" --lengths 602,1000,4000
cat "$d-602.csv" "$d-terms.csv"
