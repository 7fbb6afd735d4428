#!/bin/bash
# weight-decay.sh [THREADS]: one controlled change to base seed 2's overtraining phase, to test the reading
# that weight decay drives Seq2Grid's leak up while the loss cannot see it (README, "The leak read from the
# weights"). From the run's checkpoint at step 6,900 (commit e3bd818: digit leak 1.29e-4, 2 x 602 solved),
# steps 6,901-8,100 again with --weight-decay 0 instead of 0.1, everything else as the run (bit for bit up
# to the change: train_grid records it in run.train_changes). Then leak.py on the result beside the run's
# own step 8,100 (digit leak 5.52e-4), and the paper's test on 2 x 602 (200 problems) and [5, 6] x [1, 10]
# (1000), as interventions.sh evaluated the step-6,900 model. From the repository root after ./x build;
# safe to kill and rerun (it resumes). About 25 minutes at 2 threads.
set -euo pipefail
threads=${1:-2}
here=bench/results/grid-ut
d=$here/base-seed2-wd0-from6900
if [ ! -f "$d/checkpoint.safetensors" ]; then
  mkdir -p "$d.tmp"
  for f in config.json checkpoint.safetensors model.safetensors log.csv eval.csv; do
    git show "e3bd818:$here/base-seed2/$f" > "$d.tmp/$f"
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
/usr/bin/python3 "$here/leak.py" "e3bd818:$here/base-seed2/model.safetensors" "$here/base-seed2" "$d" --lengths 602,1000,4000
cat "$d-602.csv" "$d-terms.csv"
