#!/bin/sh
# Reproduces bench/results/compare-attention-cpu/ from a clean clone (2-vCPU CPU machine, no GPU).
# 1. the learned model (committed under models/cpu-sa1010-1l4h-d64/; this retrains it, ~30 min):
#    build/learn/train --out runs/sa1010 --train-n 10 --train-m 10 --max-pos1 40 --max-pos2 40 \
#      --n-layers 1 --n-heads 4 --d-model 64 --d-head 16 --d-ff 256 --steps 8000 --batch 64 --lr 3e-3 \
#      --threads 2 --seed 1 --log-every 100 --eval-every 1000 --eval-samples 50 --checkpoint-every 500
# 2. the comparisons (from the repository root):
set -e
./x build
M=models/cpu-sa1010-1l4h-d64
R=bench/results/compare-attention-cpu
build/learn/compare_attention --learned $M --n 11 --m 11 --samples 1000 --out /tmp/cmp_TA11x11 | tee $R/compare_TA11x11.txt
cp /tmp/cmp_TA11x11/compare.json $R/compare_TA11x11.json
cp /tmp/cmp_TA11x11/side_by_side.png $R/side_by_side_TA11x11.png
build/learn/compare_attention --learned $M --n 5 --m 14 --samples 1000 --out /tmp/cmp_TA5x14 > $R/compare_TA5x14.txt
cp /tmp/cmp_TA5x14/side_by_side.png $R/side_by_side_TA5x14.png
build/learn/compare_attention --learned $M --grid --samples 10 --out /tmp/cmp_grid
cp /tmp/cmp_grid/grid.png /tmp/cmp_grid/grid_alignment.csv $R/   # grid_alignment.json (1 MB) not committed
build/learn/evaluate --model $M --n-min 1 --n-max 10 --m-min 2 --m-max 10 --samples 1000 --mode teacher \
  --csv $R/in_distribution_1000.csv --png $R/in_distribution_1000.png --json $R/in_distribution_1000.json
# 3. the 1-layer 2-head model (models/cpu-sa1010-1l2h-d64; command in models/README.md):
M2=models/cpu-sa1010-1l2h-d64
R2=$R/1l2h
mkdir -p $R2
build/learn/compare_attention --learned $M2 --n 11 --m 11 --samples 1000 --out /tmp/cmp2_TA11x11 > $R2/compare_TA11x11.txt
cp /tmp/cmp2_TA11x11/compare.json $R2/compare_TA11x11.json
cp /tmp/cmp2_TA11x11/side_by_side.png $R2/side_by_side_TA11x11.png
build/learn/compare_attention --learned $M2 --grid --samples 10 --out /tmp/cmp2_grid
cp /tmp/cmp2_grid/grid.png /tmp/cmp2_grid/grid_alignment.csv $R2/
build/learn/evaluate --model $M2 --n-min 1 --n-max 10 --m-min 2 --m-max 10 --samples 1000 --mode teacher \
  --csv $R2/in_distribution_1000.csv --png $R2/in_distribution_1000.png --json $R2/in_distribution_1000.json
# 4. the 2-layer 2-head model (models/cpu-sa1010-2l2h-d64): the same five commands with M3/R3
M3=models/cpu-sa1010-2l2h-d64
R3=$R/2l2h
mkdir -p $R3
build/learn/compare_attention --learned $M3 --n 11 --m 11 --samples 1000 --out /tmp/cmp3_TA11x11 > $R3/compare_TA11x11.txt
cp /tmp/cmp3_TA11x11/compare.json $R3/compare_TA11x11.json
cp /tmp/cmp3_TA11x11/side_by_side.png $R3/side_by_side_TA11x11.png
build/learn/compare_attention --learned $M3 --grid --samples 10 --out /tmp/cmp3_grid
cp /tmp/cmp3_grid/grid.png /tmp/cmp3_grid/grid_alignment.csv $R3/
build/learn/evaluate --model $M3 --n-min 1 --n-max 10 --m-min 2 --m-max 10 --samples 1000 --mode teacher \
  --csv $R3/in_distribution_1000.csv --png $R3/in_distribution_1000.png --json $R3/in_distribution_1000.json
