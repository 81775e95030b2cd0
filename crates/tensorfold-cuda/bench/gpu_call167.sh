#!/bin/bash
# gpu_call167.sh FINAL BUDGET_S BIN: the final binary's first check, then the issue's table rows for the 9B shapes
# (call 143's sweeps: decode against the bound, rounds of 1 to 64 rows, aggregate decode, prefill 2k and 16k) and
# the transformers peer on 9B bf16, none of which ran since call 143.
FINAL=${1:?out dir}; BUDGET=${2:-280}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
first_check "$BIN"
sweep() {  # sweep NAME MODEL PREFILL_LENS
  step "$1" 60 "$BIN" bench --device cuda --model "$2" --decode-tokens 32 --repeat 2 --prefill-lens "$3"
  grep -E "^\||copy|weights read" "$OUT/$1.log" | cut -c1-120 | sed "s/^/$1 /"
}
step synth-9b-mlx4 20 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out /dev/shm/s9m4
sweep sweep-9b-mlx4 /dev/shm/s9m4 2048,16384
rm -rf /dev/shm/s9m4
step synth-9b-bf16 30 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /dev/shm/s9b
sweep sweep-9b-bf16 /dev/shm/s9b 2048,16384
step peer-9b-bf16 45 python3 "$(dirname "$0")/peer_transformers.py" /dev/shm/s9b 32
grep -E "^\||peer load" "$OUT/peer-9b-bf16.log" | sed "s/^/peer-9b-bf16 /"
rm -rf /dev/shm/s9b
finish "$FINAL"
