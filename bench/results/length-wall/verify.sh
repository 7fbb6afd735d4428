#!/bin/sh
# verify.sh OUT RUN_DIR...: each model's worst case with verify_learned (README.md here, "Worst case"):
# TA(10, 10) with 1000 random samples (evaluate's cell) and a 10 s adversarial search, and the
# certificate on TA(1, 2), TA(1, 3) and TA(2, 2) (fp32, 150 s each). THREADS (default 1). From the
# repository root after ./x build. Writes OUT/NAME-ta1010.{txt,json} and OUT/NAME-small.{txt,csv,json}.
set -eu
out=$1; shift
V=build/proofs-check/verify_learned
T=${THREADS:-1}
mkdir -p "$out"
for run in "$@"; do
  name=$(basename "$run")
  $V --model "$run" --n 10 --m 10 --samples 1000 --attack-seconds 10 --threads "$T" -q \
     --json "$out/$name-ta1010.json" > "$out/$name-ta1010.txt" || [ $? -eq 1 ]
  $V --model "$run" --n-range 1-2 --m-range 2-3 --samples 100 --attack-seconds 1 --certificate --cert-seconds 150 \
     --threads "$T" --csv "$out/$name-small.csv" --json "$out/$name-small.json" > "$out/$name-small.txt" || [ $? -eq 1 ]
done
