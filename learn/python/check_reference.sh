#!/bin/sh
# ctest driver: trains a tiny model with the train CLI, asks evaluate for one problem's logits, and
# checks them against the independent Python forward (reference_forward.py). Args: TRAIN EVALUATE DIR
set -e
train="$1"; evaluate="$2"; here="$(dirname "$0")"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
for mode in coupled digits absolute none; do
  mp1=6; [ "$mode" = absolute ] && mp1=40
  "$train" --out "$dir/$mode" --pos-mode $mode --train-n 2 --train-m 3 --train-size 200 --max-pos1 $mp1 \
    --max-pos2 6 --n-layers 2 --d-model 16 --d-head 4 --d-ff 16 --batch 8 --steps 20 --lr 0.01 \
    --eval-every 0 --eval-samples 2 > /dev/null 2>&1
  # exit 1 only means the (barely trained) model answered wrongly; the logits are what we compare
  "$evaluate" --model "$dir/$mode" --problem 57+8+96 --json "$dir/$mode.json" > /dev/null || [ $? -eq 1 ]
  "${PYTHON:-python3}" "$here/reference_forward.py" "$dir/$mode" "$dir/$mode.json"
done
