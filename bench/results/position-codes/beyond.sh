#!/bin/bash
# beyond.sh MODEL OUT [BUILD]: a coupled_rel model beyond the 30 x 29 grid (README.md here, "Why the
# relative bias generalizes in count"). A coupled_rel model has no position table: max_pos only bounds the
# IDs it admits, so OUT/model is the same weights with max_pos 110/110, then evaluate's grid on the
# fast CPU device: n = 1..3 by m = 2..100, n = 1..100 by m = 2..3 (50 samples per cell), TA(n, 100) for
# n = 1..3 and 5..30 by 5 and TA(100, 2..3) (100 samples), TA(100, 100) (20 samples).
set -euo pipefail
model=$1 out=$2 build=${3:-build}
"$(dirname "$0")/widen.sh" "$model" "$out"
ev() { "$build/learn/evaluate" --model "$out/model" --threads 1 --device cpu-fast -q "$@"; }
ev --samples 50 --n-min 1 --n-max 3 --m-min 2 --m-max 100 --csv "$out/m-direction.csv" --png "$out/m-direction.png"
ev --samples 50 --n-min 1 --n-max 100 --m-min 2 --m-max 3 --csv "$out/n-direction.csv" --png "$out/n-direction.png"
ev --samples 100 --n-min 1 --n-max 3 --m-min 100 --m-max 100 --csv "$out/n1-3_m100.csv" --png "$out/n1-3_m100.png"
ev --samples 100 --n-min 5 --n-max 30 --n-step 5 --m-min 100 --m-max 100 --csv "$out/n5-30_m100.csv" --png "$out/n5-30_m100.png"
ev --samples 100 --n-min 100 --n-max 100 --m-min 2 --m-max 3 --csv "$out/n100_m2-3.csv" --png "$out/n100_m2-3.png"
ev --samples 20 --n-min 100 --n-max 100 --m-min 100 --m-max 100 --csv "$out/n100_m100.csv" --png "$out/n100_m100.png"
