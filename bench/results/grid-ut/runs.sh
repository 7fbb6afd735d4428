#!/bin/bash
# runs.sh [SECONDS] [RUN...]: the grid model's runs of this study, continued where they stopped, within
# about SECONDS of wall time (default 3300), on $THREADS (default 2) threads of the fast device. From the
# repository root after ./x build. Each run directory bench/results/grid-ut/RUN (RUN = base-seedS or nogroups-seedS,
# S = 1..3; default: all six, one seed of each variant before the next seed) goes through
#   1. the paper's 510 epochs (5,100 steps):   train_grid --out D --seed S [--groups 1]
#   2. the overtraining phase to 810 epochs:   train_grid --out D --resume --epochs 810 --beta 5e-4
#      (the model at step 5,100 kept first in RUN-step5100/: Table VI compares models before this phase)
#   3. Table III and Table IV's right half, 1000 problems each (evaluate_grid --table iii / iv-terms), four
#      instances beyond them (2 x 20, 2 x 30, [11, 20] and [21, 40] x [1, 10]: the side-by-side table's),
#      and Table IV's left half for the noGroups runs (iv-digits, 100 problems: hours at 1000); the
#      evaluations at evaluate_grid's default seed (1), the same problems for every run
#   4. the step-5,100 model (RUN-step5100/) on Table III, 1000 problems each: Table VI's comparison
# in pieces stopped by --max-seconds with a checkpoint (each resume is bit for bit on the same device).
# The next piece always goes to the first unfinished run. Safe to kill: the next call continues.
set -euo pipefail
budget=${1:-3300}
threads=${THREADS:-2}  # THREADS=1: beside another job (a run does not depend on its thread count)
shift || true
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(base-seed1 nogroups-seed1 base-seed2 nogroups-seed2 base-seed3 nogroups-seed3)
here=bench/results/grid-ut
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
step_of() { [ -f "$1/log.csv" ] && tail -n 1 "$1/log.csv" | cut -d, -f1 | grep -E '^[0-9]+$' || echo 0; }
for run in "${runs[@]}"; do
  d=$here/$run
  case $run in
    base-seed[0-9]*) seed=${run#base-seed}; extra=() ;;
    nogroups-seed[0-9]*) seed=${run#nogroups-seed}; extra=(--groups 1) ;;
    *) echo "runs.sh: unknown run '$run' (base-seedS | nogroups-seedS)" >&2; exit 2 ;;
  esac
  while [ "$(left)" -gt 60 ]; do
    s=$(step_of "$d")
    if [ ! -f "$d/checkpoint.safetensors" ]; then
      build/learn/train_grid --out "$d" --seed "$seed" "${extra[@]}" --threads "$threads" --device cpu-fast --max-seconds "$(left)" -q
    elif [ "$s" -lt 5100 ]; then
      build/learn/train_grid --out "$d" --resume --threads "$threads" --device cpu-fast --max-seconds "$(left)" -q
    elif [ "$s" -lt 8100 ]; then
      if [ "$s" -eq 5100 ] && [ ! -d "$d-step5100" ]; then  # the model before the overtraining (Table VI's)
        mkdir -p "$d-step5100" && cp "$d/config.json" "$d/model.safetensors" "$d-step5100/"
      fi
      build/learn/train_grid --out "$d" --resume --epochs 810 --beta 5e-4 --threads "$threads" --device cpu-fast --max-seconds "$(left)" -q
    elif [ ! -f "$d-tableiii.json" ]; then
      build/learn/evaluate_grid --model "$d" --table iii --samples 1000 --threads "$threads" --device cpu-fast \
        --csv "$d-tableiii.csv" --json "$d-tableiii.json"
    elif [ ! -f "$d-tableiv-terms.json" ]; then
      build/learn/evaluate_grid --model "$d" --table iv-terms --samples 1000 --threads "$threads" --device cpu-fast \
        --csv "$d-tableiv-terms.csv" --json "$d-tableiv-terms.json"
    elif [ ! -f "$d-beyond.json" ]; then
      build/learn/evaluate_grid --model "$d" --instance 2x20 --instance 2x30 --instance 11-20x1-10 --instance 21-40x1-10 \
        --samples 1000 --threads "$threads" --device cpu-fast --csv "$d-beyond.csv" --json "$d-beyond.json"
    elif [ "${extra[*]-}" = "--groups 1" ] && [ ! -f "$d-tableiv-digits.json" ]; then
      build/learn/evaluate_grid --model "$d" --table iv-digits --samples 100 --threads "$threads" --device cpu-fast \
        --csv "$d-tableiv-digits.csv" --json "$d-tableiv-digits.json"
    elif [ -d "$d-step5100" ] && [ ! -f "$d-step5100-tableiii.json" ]; then  # Table VI's models
      build/learn/evaluate_grid --model "$d-step5100" --table iii --samples 1000 --threads "$threads" --device cpu-fast \
        --csv "$d-step5100-tableiii.csv" --json "$d-step5100-tableiii.json"
    else
      break  # this run is done
    fi
  done
  [ "$(left)" -gt 60 ] || { echo "runs.sh: time budget spent; run it again to continue ($run)"; exit 0; }
done
echo "runs.sh: every run is done"
