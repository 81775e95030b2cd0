#!/bin/bash
# gpu_final139.sh FINAL BUDGET_S NEW OLD: (call 139) this session's final binary: every check and the tiny shas;
# the 27B MLX4 sweep on a checkpoint with an MTP head (synth --mtp), which adds the cost of one chained draft step;
# and the 9B bf16 sweep of OLD (0ff77d2: a keep launch a slot) and NEW in turn (one keep launch a layer for every
# slot, measured so far on 4-bit weights only).
FINAL=${1:?out dir}; BUDGET=${2:-300}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$NEW"
sweep() {  # sweep NAME MODEL BIN
  step "$1" 60 "$3" bench --device cuda --model "$2" --decode-tokens 32 --repeat 2 --prefill-lens 2048
  grep -E "^\| (decode, 1 stream \||round of|[0-9]+ streams|prefill|MTP)|^model|copy" "$OUT/$1.log" | cut -c1-150 \
    | sed "s/^/$1 /"
}
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --mtp --threads 16 --out $M
sweep m27-mtp $M "$NEW"
rm -rf $M
M9=/dev/shm/s9b
step synth-9b-bf16 60 "$NEW" synth --shape 9b --format bf16 --threads 16 --out $M9
sweep b9-old-1 $M9 "$OLD"
sweep b9-new-1 $M9 "$NEW"
sweep b9-old-2 $M9 "$OLD"
sweep b9-new-2 $M9 "$NEW"
rm -rf $M9
finish "$FINAL"
