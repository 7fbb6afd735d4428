#!/bin/sh
# ctest driver (seconds, CPU): the paper-recipe scripts at toy size. A paper configuration shrunk by
# --train-arg overrides (d_model 16, 4 steps, SA(2, 3)), three (seed, data seed) runs two at a time,
# one training step per piece (--piece-seconds 1e-9: train stops after the first step that ends
# past it, so every run resumes three times), a 3 x 3 grid (n 1..3, m 2..4) with 5
# samples per cell; then the median heatmap and the comparison line. Checks: a zero budget starts
# nothing and exits 1, a later call finishes every run; the run made of pieces is byte-identical to the
# same run trained in one call; every file the scripts promise is there. Args: BIN_DIR (train,
# evaluate, grid_png).
set -eu
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
py="${PYTHON:-python3}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
toy="--train-arg=--d-model=16 --train-arg=--d-head=4 --train-arg=--d-ff=32 --train-arg=--steps=4 \
--train-arg=--batch=4 --train-arg=--train-size=50 --train-arg=--train-n=2 --train-arg=--train-m=3 \
--train-arg=--threads=1 --train-arg=--log-every=1"
cfg="$root/learn/configs/paper/fig12-d64.json"
args="--config $cfg --runs 0:0,1:0,0:1 --out $dir/runs --bin $bin --device cpu --parallel 2 --piece-seconds 1e-9 \
--n-max 3 --m-max 4 --samples 5 --min-piece-seconds 0 --reserve-seconds 0"

# A budget already spent: nothing starts, exit 1 (runs left to a later call).
rc=0; "$py" "$here/run_config.py" $args $toy --budget-seconds 0.000001 --min-piece-seconds 1 > "$dir/first.txt" || rc=$?
[ "$rc" -eq 1 ] || fail "a spent budget should exit 1 (got $rc)"
grep -q "unfinished" "$dir/first.txt" || fail "no run reported unfinished: $(cat "$dir/first.txt")"
# The real call: pieces of one step, then the grid row by row.
"$py" "$here/run_config.py" $args $toy > "$dir/second.txt" || fail "run_config.py: $(cat "$dir/second.txt")"
cat "$dir/second.txt"
for r in s0_d0 s1_d0 s0_d1; do
  d="$dir/runs/fig12-d64/$r"
  for f in config.json model.safetensors checkpoint.safetensors log.csv train.log evaluate.log run.json grid.csv grid.png; do
    [ -f "$d/$f" ] || fail "$r has no $f"
  done
  [ "$(grep -c '^[0-9]' "$d/grid.csv")" -eq 9 ] || fail "$r/grid.csv has not 9 cells"
  "$py" - "$d/run.json" <<'PY' || fail "$r/run.json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["evaluated"] and r["finished"] and r["steps"] == 4, r
trains = [c for c in r["calls"] if c["kind"] == "train"]
assert len(trains) == 4 and all(c["rc"] == 0 for c in trains), trains   # one step per piece
assert sum("--resume" in c["cmd"] for c in trains) == 3
assert len([c for c in r["calls"] if c["kind"] == "evaluate"]) == 3     # one call per n
assert r["gpu"] and r["device"] == "cpu" and r["train_seconds"] > 0
PY
done
# Pieces == one call, byte for byte (seed 1, data seed 0; the device the pieces ran on, cpu).
"$bin/train" --config "$cfg" --seed 1 --data-seed 0 --device cpu --out "$dir/whole" $(echo $toy | sed 's/--train-arg=//g') > /dev/null 2>&1 \
  || fail "train in one call"
cmp -s "$dir/whole/checkpoint.safetensors" "$dir/runs/fig12-d64/s1_d0/checkpoint.safetensors" \
  || fail "the run trained in pieces differs from the one trained in one call"
# Different data seeds train on different data: s0_d0 and s0_d1 differ.
cmp -s "$dir/runs/fig12-d64/s0_d0/checkpoint.safetensors" "$dir/runs/fig12-d64/s0_d1/checkpoint.safetensors" \
  && fail "data seeds 0 and 1 gave the same run"
# The median heatmap and the comparison line.
"$py" "$here/summarize.py" "$dir/runs/fig12-d64" --bin "$bin" > "$dir/summary.txt" || fail "summarize.py"
cat "$dir/summary.txt"
for f in median_grid.csv median_grid.png summary.json summary.txt; do
  [ -f "$dir/runs/fig12-d64/$f" ] || fail "no $f"
done
grep -q "median of 3 runs" "$dir/summary.txt" || fail "summary line"
grep -q "/9 cells >= 90%" "$dir/summary.txt" || fail "summary counts"
grep -q "| paper: Figure 12" "$dir/summary.txt" || fail "paper comparison"
[ "$(grep -c '^[0-9]' "$dir/runs/fig12-d64/median_grid.csv")" -eq 9 ] || fail "median grid cells"
# The median and the metrics on known grids: three runs over n 1..3 x m 2..4, A all 1.0 but (3, 2) 0.5,
# B all 0.95 but (1, 4) 0.2, C all 0.8. Median: 0.95 everywhere but (3, 2) and (1, 4), both 0.8; so 7/9
# cells >= 90%, worst 80%, longest operand at m = 2: 2, most operands at n = 1: 3.
syn="$dir/syn/fig10-2l2h"
for r in A B C; do
  mkdir -p "$syn/$r"
  echo '{"evaluated": true, "seed": 0, "data_seed": 0}' > "$syn/$r/run.json"
  "$py" - "$syn/$r/grid.csv" "$r" <<'PY'
import sys
path, r = sys.argv[1], sys.argv[2]
rows = ["n,m,samples,exact,accuracy"]
for n in range(1, 4):
    for m in range(2, 5):
        a = {"A": 0.5 if (n, m) == (3, 2) else 1.0, "B": 0.2 if (n, m) == (1, 4) else 0.95, "C": 0.8}[r]
        rows.append("%d,%d,100,%d,%.4f" % (n, m, round(100 * a), a))
open(path, "w").write("\n".join(rows) + "\n")
PY
done
"$py" "$here/summarize.py" "$syn" --bin "$bin" > "$dir/syn.txt" || fail "summarize.py on known grids"
grep -q "7/9 cells >= 90%, worst cell 80.0%, longest operand at m = 2: 2, most operands at n = 1: 3" "$dir/syn.txt" \
  || fail "median metrics: $(cat "$dir/syn.txt")"
grep -q "paper: Figure 10 (median of 6): >= 90.0% on all 870 cells" "$dir/syn.txt" || fail "paper line"
grep -q "^3,2,3,0.8000$" "$syn/median_grid.csv" || fail "median of (3, 2)"
grep -q "^1,3,3,0.9500$" "$syn/median_grid.csv" || fail "median of (1, 3)"
# The other tasks: their grids (parity: query lengths 5, 10; multiplication: TM(1..2, 1..2)) with both
# metrics, and the median with the task's comparison line.
small="--train-arg=--n-layers=1 --train-arg=--d-model=16 --train-arg=--d-head=4 --train-arg=--d-ff=32 \
--train-arg=--steps=2 --train-arg=--batch=4 --train-arg=--train-size=50 --train-arg=--train-n=2 --train-arg=--threads=1"
for c in fig3-parity:10:2:2 fig9-multiplication:2:2:4; do
  name="${c%%:*}"; rest="${c#*:}"; nmax="${rest%%:*}"; rest="${rest#*:}"; mmax="${rest%%:*}"; cells="${rest#*:}"
  "$py" "$here/run_config.py" --config "$root/learn/configs/paper/$name.json" --runs 0:0 --out "$dir/tasks" --bin "$bin" \
    --device cpu --n-max "$nmax" --m-max "$mmax" --samples 3 $small --train-arg=--train-m=2 > "$dir/$name.txt" \
    || fail "run_config.py $name: $(cat "$dir/$name.txt")"
  g="$dir/tasks/$name/s0_d0/grid.csv"
  [ "$(grep -c '^[0-9]' "$g")" -eq "$cells" ] || fail "$name: grid.csv has not $cells cells: $(cat "$g")"
  grep -q "answer_accuracy" "$g" || fail "$name: grid.csv without the answer metric"
  "$py" "$here/summarize.py" "$dir/tasks/$name" --bin "$bin" > "$dir/$name.sum" || fail "summarize.py $name"
  cat "$dir/$name.sum"
  grep -q "answer tokens" "$dir/$name.sum" || fail "$name summary: $(cat "$dir/$name.sum")"
  grep -q "| paper: Figure" "$dir/$name.sum" || fail "$name summary: $(cat "$dir/$name.sum")"
done
# Figure 9's reach scales with the training set: SM(2, 2) reaches 4 x 3 digits (SM(10, 10): 20 x 15).
grep -q "worst cell up to 4 x 3 digits" "$dir/fig9-multiplication.sum" || fail "reach: $(cat "$dir/fig9-multiplication.sum")"
head -1 "$dir/tasks/fig3-parity/s0_d0/grid.csv" | grep -qx "n,samples,exact,accuracy,answer_exact,answer_accuracy" \
  || fail "parity's grid has one axis"
# Bad usage: exit 2.
rc=0; "$py" "$here/run_config.py" --config "$cfg" --runs 0-0 --out "$dir/x" --bin "$bin" 2> /dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "--runs 0-0 should exit 2 (got $rc)"
rc=0; "$py" "$here/summarize.py" "$dir/no_such_dir" 2> /dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "summarize.py on a missing directory should exit 2 (got $rc)"
echo "paper-recipe scripts: OK"
