#!/bin/bash
# beyond.sh MODEL OUT [BUILD]: a coupled_rel model beyond the 30 x 29 grid (README.md here, "Beyond the
# grid"): the same weights with max_pos 110/110 (position-codes/widen.sh: no table, max_pos only bounds the
# IDs it admits), evaluate's cells on the fast CPU device, test seed 12345: the diagonal TA(k, k), k = 40,
# 50, 60, 70, 80, 100, and the long edges TA(100, 2), TA(100, 10), TA(2, 100), TA(10, 100), 10 samples each.
# Writes OUT/beyond.csv (n,m,samples,exact,accuracy).
set -euo pipefail
model=$1 out=$2 build=${3:-build}
"$(dirname "$0")/../position-codes/widen.sh" "$model" "$out"
echo "n,m,samples,exact,accuracy" > "$out/beyond.csv"
for c in "40 40" "50 50" "60 60" "70 70" "80 80" "100 100" "100 2" "100 10" "2 100" "10 100"; do
  set -- $c
  "$build/learn/evaluate" --model "$out/model" --threads 1 --device cpu-fast -q --samples 10 --seed 12345 \
    --n-min "$1" --n-max "$1" --m-min "$2" --m-max "$2" --csv "$out/cell.csv" --png "$out/cell.png" > /dev/null
  tail -n 1 "$out/cell.csv" >> "$out/beyond.csv"
done
rm -f "$out/cell.csv" "$out/cell.png"
cat "$out/beyond.csv"
