#!/bin/bash
# side-by-side.sh [OUT] (default bench/results/grid-ut/side-by-side): the grid model's test instances
# (Table III and Table IV's term counts, and four beyond every training set, 1000 problems each) on this
# project's decoders, and the construction's proof that covers them. Run from the repository root after ./x build.
#   decoders: the best coupled_rel models (SA(10, 10) and SA(10, 20) training sets), widened to max_pos
#   1100 (they have no position table: widen.sh), and a learned-table model (max_pos 40 as trained: NA
#   where IDs exceed it); `evaluate --table iii|iv-terms --samples 1000` (greedy decoding, offsets 1).
#   construction: `verify_construction --whole-claim --p1 10 --p2 10` proves one model for every shape
#   with l <= 1022, m <= 1023 (every instance of Table III and Table IV's term counts, every input,
#   zero-padded operands included); --p1 12 --p2 2 every shape with l <= 4094, m <= 3 (Table IV's digits).
set -euo pipefail
out=${1:-bench/results/grid-ut/side-by-side}
mkdir -p "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for m in cpu-sa1010-1l4h-d64-coupled-rel-far cpu-sa1020-1l4h-d64-coupled-rel-far cpu-sa1010-1l4h-d64; do
  model=models/$m
  if grep -q coupled_rel "$model/config.json"; then
    bench/results/position-codes/widen.sh "$model" "$tmp/$m" 1100 && model=$tmp/$m/model
  fi
  for t in iii iv-terms; do
    build/learn/evaluate --model "$model" --table $t --samples 1000 --seed 12345 --threads 2 \
      --csv "$out/$m-$t.csv" --json "$out/$m-$t.json"
  done
  # beyond both training sets: longer operands, more terms (the decoders saw <= 10 digits, <= 10 or 20 terms)
  build/learn/evaluate --model "$model" --instance 2x20 --instance 2x30 --instance 11-20x1-10 --instance 21-40x1-10 \
    --samples 1000 --seed 12345 --threads 2 --csv "$out/$m-beyond.csv" --json "$out/$m-beyond.json"
done
build/proofs-check/verify_construction --whole-claim --p1 10 --p2 10 --json "$out/construction-whole-claim-p10.json" \
  | tee "$out/construction-whole-claim-p10.txt"
# Table IV's 2 terms of 1000-4000 digits: l <= 4094, m <= 3
build/proofs-check/verify_construction --whole-claim --p1 12 --p2 2 --json "$out/construction-whole-claim-p12-p2.json" \
  | tee "$out/construction-whole-claim-p12-p2.txt"
