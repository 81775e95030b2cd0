#!/bin/bash
# gpu_keeps142.sh FINAL BUDGET_S NEW OLD: (call 142) a round's keeps in two launches (kv_keep and dn_tail_keep over
# every slot and layer) in NEW against one launch a layer in OLD (9a523fc): the first check, then the 27B and 9B
# MLX4 sweeps (decode, rounds, aggregate decode at 1 to 64 streams) of each binary twice for the 27B, once for the
# 9B, alternating.
FINAL=${1:?out dir}; BUDGET=${2:-200}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
sweep() {  # sweep NAME MODEL BIN
  step "$1" 30 "$3" bench --device cuda --model "$2" --decode-tokens 32 --repeat 2 --prefill-lens 64
  grep -E "^\| (decode, 1 stream \||round of (1|16) |[0-9]+ streams)" "$OUT/$1.log" | cut -c1-100 | sed "s/^/$1 /"
}
M=/dev/shm/s27m4
step synth-27b-mlx4 40 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  sweep m27-old-$r $M "$OLD"
  sweep m27-new-$r $M "$NEW"
done
rm -rf $M
M9=/dev/shm/s9m4
step synth-9b-mlx4 20 "$NEW" synth --shape 9b --format mlx4 --threads 16 --out $M9
sweep m9-old $M9 "$OLD"
sweep m9-new $M9 "$NEW"
rm -rf $M9
finish "$FINAL"
