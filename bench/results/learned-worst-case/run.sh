#!/bin/sh
# The learned-worst-case study (README.md here): every committed decoder's worst case on TA(10, 10), the
# certificate on the small shapes, and the 30 x 29 grid of the coupled_rel SA(10, 10) model. From the
# repository root, after ./x build; THREADS (default 2). Writes into bench/results/learned-worst-case/.
set -eu
V=build/proofs-check/verify_learned
OUT=bench/results/learned-worst-case
T=${THREADS:-2}
# 1. TA(10, 10), every committed decoder: 1000 samples (evaluate's cell) and a 10 s attack
for m in cpu-sa1010-1l4h-d64-coupled-rel-far cpu-sa1020-1l4h-d64-coupled-rel-far cpu-sa1010-1l4h-d64 cpu-sa1010-1l2h-d64 \
         cpu-sa1010-2l2h-d64; do
  $V --model models/$m --n 10 --m 10 --samples 1000 --attack-seconds 10 --threads "$T" -q \
     --json "$OUT/ta1010-$m.json" > "$OUT/ta1010-$m.txt" || [ $? -eq 1 ]
done
# 2. the certificate on TA(1..2, 2..4): the coupled_rel SA(10, 10) model in fp32 (300 s per cell), the
#    position-table model in real arithmetic (its fp32 rounding bound is wider than its margins) and in fp32
for spec in "cpu-sa1010-1l4h-d64-coupled-rel-far fp32 4 300" "cpu-sa1010-1l4h-d64 real 3 120" "cpu-sa1010-1l4h-d64 fp32 3 60"; do
  set -- $spec
  $V --model "models/$1" --n-range 1-2 --m-range "2-$3" --samples 100 --attack-seconds 1 --certificate --arithmetic "$2" \
     --cert-seconds "$4" --threads "$T" --csv "$OUT/small-$1-$2.csv" --json "$OUT/small-$1-$2.json" > "$OUT/small-$1-$2.txt" \
     || [ $? -eq 1 ]
done
# 3. the paper's grid (n = 1..30, m = 2..30): 20 samples (the attack's starts) and a 1 s attack per cell;
#    random accuracy at 1000 samples per cell is the committed bench/results/position-codes/grid1000/
$V --model models/cpu-sa1010-1l4h-d64-coupled-rel-far --n-range 1-30 --m-range 2-30 --samples 20 --attack-seconds 1 \
   --threads "$T" --csv "$OUT/grid-sa1010-rel-far.csv" --json "$OUT/grid-sa1010-rel-far.json" \
   > "$OUT/grid-sa1010-rel-far.txt" || [ $? -eq 1 ]
python3 "$OUT/plot.py"
