for mode in coupled none; do
  rm -rf cmp_$mode
  build/learn/train --config bench/results/learn-cpu-sa55/config.json --out cmp_$mode --pos-mode $mode --steps 4000 --eval-every 1000 --checkpoint-every 0 --log-every 500 --json cmp_$mode.json
  build/learn/evaluate --model cmp_$mode --n-min 1 --n-max 8 --m-min 2 --m-max 8 --samples 100 --json cmp_${mode}_grid.json --csv cmp_${mode}_grid.csv --png cmp_${mode}_grid.png
done
