#!/usr/bin/env bash
# One controlled change at a time (README.md here): 1-layer 4-head d_model 64 models trained on SA(10, 10)
# with models/README.md's CPU recipe: this project's defaults (base), the authors' unscaled T5 scores
# alone (--attn-scale none), the authors' T5 initialization alone (--init t5), and the authors' model at
# this width (all three of their options that apply at d_model 64: unscaled scores, T5 init, tied
# readout; Figure 12's final norm is RMSNorm, ours too); seeds 1 and 2; then the
# 30 x 29 grid at 20 samples per cell (the same test instances for every model: --seed 12345).
# About 40 min of one core per training run and 30 min per grid on the project's 2-vCPU machine.
# usage: bench/results/controls-cpu/commands.sh OUT      (from the repository root, after ./x build)
# A toy run of the script itself: STEPS=20 SAMPLES=1 GRID="--n-max 3 --m-max 4" commands.sh /tmp/toy
# The same study as a sweep (sweep.json here; README.md "Running a study"), here or on a Slurm cluster:
#   python3 -m manyadd.sweep local bench/results/controls-cpu/sweep.json --out OUT -j 2
set -euo pipefail
out=${1:?usage: commands.sh OUT}
mkdir -p "$out/grids"
recipe=(--train-n 10 --train-m 10 --max-pos1 40 --max-pos2 40 --n-layers 1 --n-heads 4 --d-model 64 --d-head 16
        --d-ff 256 --steps "${STEPS:-8000}" --batch "${BATCH:-64}" --lr 3e-3 --threads 1 --log-every 100
        --eval-every 1000 --eval-samples "${EVAL_SAMPLES:-50}" --checkpoint-every 500)
recipe+=(${EXTRA:-})  # BATCH, EVAL_SAMPLES, EXTRA (more train flags): tests/test_sweep.py's smaller toy
# base-s1 is the committed models/cpu-sa1010-1l4h-d64 (this recipe with --threads 2, seed 1): evaluated as
# committed, not retrained. The other seven are trained here with one thread (deterministic for (seed,
# threads) on one build).
build/learn/train --out "$out/none-s1" "${recipe[@]}" --seed 1 --attn-scale none -q
build/learn/train --out "$out/base-s2" "${recipe[@]}" --seed 2 -q
build/learn/train --out "$out/none-s2" "${recipe[@]}" --seed 2 --attn-scale none -q
build/learn/train --out "$out/t5-s1" "${recipe[@]}" --seed 1 --init t5 -q
build/learn/train --out "$out/t5-s2" "${recipe[@]}" --seed 2 --init t5 -q
for seed in 1 2; do
  build/learn/train --out "$out/authors-s$seed" "${recipe[@]}" --seed "$seed" --attn-scale none --init t5 \
    --tie-readout true -q
done
ln -sfn "$PWD/models/cpu-sa1010-1l4h-d64" "$out/base-s1"
for run in base-s1 base-s2 none-s1 none-s2 t5-s1 t5-s2 authors-s1 authors-s2; do
  build/learn/evaluate --model "$out/$run" --samples "${SAMPLES:-20}" --seed 12345 --threads 2 ${GRID:-} -q \
    --csv "$out/grids/$run.csv" --png "$out/grids/$run.png" --json "$out/grids/$run.json"
done
python3 bench/results/controls-cpu/table.py "$out/grids"
