#!/bin/bash
# sparse100.sh MODEL OUT [BUILD]: a coupled_rel model on the sparse grid n, m in {10, 20, ..., 100}
# (issue: TA(100, 100) beyond the paper), 20 samples per cell, the fast CPU device. As beyond.sh, the
# model is evaluated with max_pos 110/110 (no table: max_pos only bounds the IDs it admits).
# Writes OUT/sparse.csv (n,m,samples,exact,accuracy) and OUT/sparse.txt (the grid in percent).
set -euo pipefail
model=$1 out=$2 build=${3:-build}
"$(dirname "$0")/widen.sh" "$model" "$out"
mkdir -p "$out/parts"
for m in 10 20 30 40 50 60 70 80 90 100; do
  "$build/learn/evaluate" --model "$out/model" --threads 1 --device cpu-fast -q --samples 20 --seed 12345 \
    --n-min 10 --n-max 100 --n-step 10 --m-min "$m" --m-max "$m" --csv "$out/parts/m$m.csv"
done
python3 - "$out" <<'PY'
import csv, glob, os, sys
out = sys.argv[1]
rows = [r for f in sorted(glob.glob(os.path.join(out, "parts", "m*.csv"))) for r in csv.DictReader(open(f))]
rows.sort(key=lambda r: (int(r["n"]), int(r["m"])))
with open(os.path.join(out, "sparse.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
ms = sorted({int(r["m"]) for r in rows})
acc = {(int(r["n"]), int(r["m"])): float(r["accuracy"]) for r in rows}
with open(os.path.join(out, "sparse.txt"), "w") as f:
    f.write("exact match (%%), 20 samples per cell; rows n, columns m = %s\n" % " ".join(map(str, ms)))
    for n in sorted({int(r["n"]) for r in rows}):
        f.write("n=%3d: %s\n" % (n, " ".join("%4.0f" % (100 * acc[(n, m)]) for m in ms)))
print(open(os.path.join(out, "sparse.txt")).read(), end="")
PY
