#!/bin/sh
# ctest driver: trains a tiny model with the train CLI, asks evaluate for one problem's logits, and
# checks them against the independent Python forward (reference_forward.py): every position mode with
# the default architecture (FIRE with either threshold), input injection, then each architecture option
# alone and all of them together (the authors' model), then the other tasks' models (parity: one level; multiplication: three levels and
# the '*' token). Args: TRAIN EVALUATE
set -e
train="$1"; evaluate="$2"; here="$(dirname "$0")"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
check() {  # NAME MODE FLAGS...
  name="$1"; mode="$2"; shift 2
  mp1=6; [ "$mode" = absolute ] && mp1=40
  "$train" --out "$dir/$name" --pos-mode $mode --train-n 2 --train-m 3 --train-size 200 --max-pos1 $mp1 \
    --max-pos2 6 --n-layers 2 --d-model 16 --d-head 4 --d-ff 16 --batch 8 --steps 20 --lr 0.01 \
    --eval-every 0 --eval-samples 2 "$@" > /dev/null 2>&1
  # exit 1 only means the (barely trained) model answered wrongly; the logits are what we compare
  "$evaluate" --model "$dir/$name" --problem 57+8+96 --json "$dir/$name.json" > /dev/null || [ $? -eq 1 ]
  printf '%s: ' "$name"
  "${PYTHON:-python3}" "$here/reference_forward.py" "$dir/$name" "$dir/$name.json"
}
for mode in coupled digits absolute none fire rope; do check "$mode" "$mode"; done
check fire_min fire --fire-threshold min
check injection coupled --input-injection true
check injection_rope rope --input-injection true
check attn_scale_none coupled --attn-scale none
check tie_readout coupled --tie-readout true
check final_layernorm coupled --final-norm layer
check init_t5 coupled --init t5
check authors_model coupled --attn-scale none --init t5 --tie-readout true --final-norm layer
check_task() {  # NAME TASK MODE PROBLEM FLAGS...
  name="$1"; task="$2"; mode="$3"; problem="$4"; shift 4
  "$train" --out "$dir/$name" --task $task --pos-mode $mode --train-n 3 --train-m 2 --train-size 200 --max-pos1 8 \
    --max-pos2 6 --max-pos3 8 --n-layers 2 --d-model 16 --d-head 4 --d-ff 16 --batch 8 --steps 20 --lr 0.01 \
    --eval-every 0 --eval-samples 2 "$@" > /dev/null 2>&1
  "$evaluate" --model "$dir/$name" --problem "$problem" --json "$dir/$name.json" > /dev/null || [ $? -eq 1 ]
  printf '%s: ' "$name"
  "${PYTHON:-python3}" "$here/reference_forward.py" "$dir/$name" "$dir/$name.json"
}
check_task parity parity digits 0101
check_task multiplication multiplication coupled3 '37*92'
check_task abacus addition-2op abacus '573+82' --abacus-k 4
check_task multiplication_noscratch multiplication-noscratch digits '37*92' --attn-scale none --tie-readout true
check_task fire_noscratch addition-noscratch fire '57+8+96' --fire-threshold min
check_task rope_parity parity rope 0101 --input-injection true
# Bad usage and input: exit 2 with a message (the usage names every task's problem notation).
py="${PYTHON:-python3}"
expect2() {  # WHAT PATTERN ARGS...
  what="$1"; pattern="$2"; shift 2
  rc=0; "$py" "$here/reference_forward.py" "$@" > /dev/null 2> "$dir/err" || rc=$?
  [ "$rc" -eq 2 ] || { echo "FAIL: $what: exit $rc, not 2"; exit 1; }
  grep -q -- "$pattern" "$dir/err" || { echo "FAIL: $what: no '$pattern' in: $(cat "$dir/err")"; exit 1; }
}
expect2 "no arguments" "--problem 37\*925"
expect2 "no arguments" "--problem 0101"
expect2 "a missing model" "cannot read" "$dir/no_such_model" "$dir/parity.json"
expect2 "a missing problem" "cannot read" "$dir/parity" "$dir/no_such.json"
echo '{"tokens": "$0101="' > "$dir/broken.json"
expect2 "malformed JSON" "not valid JSON" "$dir/parity" "$dir/broken.json"
echo '{"tokens": "$0101=0110"}' > "$dir/short.json"
expect2 "a JSON without the logits" "lacks pos1, logits_from_eq" "$dir/parity" "$dir/short.json"
echo "bad input: exit 2 with a message"
