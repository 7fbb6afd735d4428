#!/bin/bash
# widen.sh MODEL OUT [MAXPOS]: OUT/model = MODEL's weights with max_pos MAXPOS/MAXPOS (default 110), for evaluating a coupled_rel
# model past the training IDs (it has no position table: max_pos only bounds the IDs it admits).
# Refuses a model with tables (their size fixes max_pos). Used by beyond.sh, sparse100.sh and grid-ut/side-by-side.sh.
set -euo pipefail
model=$1 out=$2 maxpos=${3:-110}
python3 - "$model" <<'PY'
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
if c["model"].get("pos_mode") != "coupled_rel":
    sys.exit("%s is not a coupled_rel model (its tables fix max_pos)" % sys.argv[1])
PY
mkdir -p "$out/model"
cp "$model/model.safetensors" "$out/model/"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["model"]["max_pos1"]=c["model"]["max_pos2"]=int(sys.argv[3]); json.dump(c,open(sys.argv[2],"w"),indent=2)' \
  "$model/config.json" "$out/model/config.json" "$maxpos"
