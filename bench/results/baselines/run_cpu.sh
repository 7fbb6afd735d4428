#!/bin/sh
# The reduced CPU runs of the baselines (README.md here): every configuration in cpu-configs/ trained
# and evaluated by bench/paper-recipe/run_config.py on the CPU (one run each: seed 1, data seed 1),
# the grid TA(n, m), n = 1..10, m = 2..10, 100 samples per cell; two configurations at a time, niced.
# Then table.py (the table in README.md) and grid_png for the grids run_config.py does not draw.
# usage: bench/results/baselines/run_cpu.sh OUT [CONFIG_NAME ...]   (from the repository root, after ./x build)
set -e
out="$1"; shift
here=bench/results/baselines
names="$*"
[ -n "$names" ] || names="coupled coupled-noscratch nope nope-noscratch fire fire-noscratch fire-min fire-min-noscratch rope rope-noscratch"
one() {
  nice -n 10 python3 bench/paper-recipe/run_config.py --config "$here/cpu-configs/$1.json" --runs 1:1 --out "$out" \
    --device cpu --n-max 10 --m-max 10 --samples 100 > "$out/$1.driver.log" 2>&1
  build/learn/grid_png --csv "$out/$1/s1_d1/grid.csv" --png "$out/$1/s1_d1/grid.png" --train-n 5 --train-m 5 > /dev/null
}
mkdir -p "$out"
set -- $names
while [ $# -gt 0 ]; do
  one "$1" & a=$!
  b=""
  if [ $# -gt 1 ]; then one "$2" & b=$!; fi
  wait $a
  [ -z "$b" ] || wait $b
  shift; [ $# -gt 0 ] && shift
done
python3 $here/table.py "$out" > "$out/table.md"
