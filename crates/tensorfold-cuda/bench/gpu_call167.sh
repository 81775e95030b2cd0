#!/bin/bash
# gpu_call167.sh FINAL BUDGET_S BIN: the final binary's first check, then the issue's table row for the 9B MLX4
# shape (call 143's sweep: decode against the bound, rounds of 1 to 64 rows, aggregate decode, prefill 2k and 16k),
# not run since call 143.
FINAL=${1:?out dir}; BUDGET=${2:-120}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
first_check "$BIN"
step synth-9b-mlx4 20 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out /dev/shm/s9m4
step sweep-9b-mlx4 60 "$BIN" bench --device cuda --model /dev/shm/s9m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
grep -E "^\||copy|weights read" "$OUT/sweep-9b-mlx4.log" | cut -c1-160 | sed "s/^/sweep-9b-mlx4 /"
rm -rf /dev/shm/s9m4
finish "$FINAL"
