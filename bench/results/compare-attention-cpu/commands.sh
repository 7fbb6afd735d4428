#!/bin/sh
# Reproduces bench/results/compare-attention-cpu/ from a clean clone (2-vCPU CPU machine, no GPU).
# The learned models are committed under models/; models/README.md has the commands that retrain them
# (e.g. cpu-sa1010-1l4h-d64, ~30 min):
#    build/learn/train --out runs/sa1010 --train-n 10 --train-m 10 --max-pos1 40 --max-pos2 40 \
#      --n-layers 1 --n-heads 4 --d-model 64 --d-head 16 --d-ff 256 --steps 8000 --batch 64 --lr 3e-3 \
#      --threads 2 --seed 1 --log-every 100 --eval-every 1000 --eval-samples 50 --checkpoint-every 500
# The comparisons (from the repository root):
set -e
./x build
R=bench/results/compare-attention-cpu

# compare_model MODEL_DIR RESULT_DIR: TA(11, 11) table + figure + JSON, the grid, in-distribution accuracy.
compare_model() {
  M=$1 OUT=$2 T=/tmp/cmp_$(basename "$1")
  mkdir -p "$OUT"
  build/learn/compare_attention --learned "$M" --n 11 --m 11 --samples 1000 --out "$T/TA11x11" > "$OUT/compare_TA11x11.txt"
  cp "$T/TA11x11/compare.json" "$OUT/compare_TA11x11.json"
  cp "$T/TA11x11/side_by_side.png" "$OUT/side_by_side_TA11x11.png"
  build/learn/compare_attention --learned "$M" --grid --samples 10 --out "$T/grid"
  cp "$T/grid/grid.png" "$T/grid/grid_alignment.csv" "$OUT/"   # grid_alignment.json (1 MB) not committed
  build/learn/evaluate --model "$M" --n-min 1 --n-max 10 --m-min 2 --m-max 10 --samples 1000 --mode teacher \
    --csv "$OUT/in_distribution_1000.csv" --png "$OUT/in_distribution_1000.png" --json "$OUT/in_distribution_1000.json"
}

compare_model models/cpu-sa1010-1l4h-d64 $R
compare_model models/cpu-sa1010-1l2h-d64 $R/1l2h
compare_model models/cpu-sa1010-2l2h-d64 $R/2l2h
# The 1-layer 4-head model at TA(5, 14), where its accuracy falls off (the README's "Why 14 operands"):
build/learn/compare_attention --learned models/cpu-sa1010-1l4h-d64 --n 5 --m 14 --samples 1000 --out /tmp/cmp_TA5x14 \
  > $R/compare_TA5x14.txt
cp /tmp/cmp_TA5x14/side_by_side.png $R/side_by_side_TA5x14.png

# The figures (matplotlib, python/manyadd/figures.py) from the files above and the compare_attention
# outputs left in /tmp; the PNGs beside the CSVs are the C++ quick looks.
export PYTHONPATH=$PWD/python
F="/usr/bin/python3 -m manyadd.figures"
for M in 1l4h 1l2h 2l2h; do
  if [ $M = 1l4h ]; then OUT=$R; else OUT=$R/$M; fi
  mkdir -p "$OUT/figures"
  $F alignment "$OUT/grid_alignment.csv" --model models/cpu-sa1010-$M-d64 -o "$OUT/figures/grid.png"
  $F grid "$OUT/in_distribution_1000.csv" --model models/cpu-sa1010-$M-d64 -o "$OUT/figures/in_distribution_1000.png"
  $F compare /tmp/cmp_cpu-sa1010-$M-d64/TA11x11 -o "$OUT/figures/side_by_side_TA11x11.png"
done
$F compare /tmp/cmp_TA5x14 -o $R/figures/side_by_side_TA5x14.png
