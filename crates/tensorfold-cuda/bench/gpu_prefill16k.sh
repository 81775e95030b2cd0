#!/bin/bash
# gpu_prefill16k.sh FINAL BUDGET_S BIN: (call 112) the pool frees its excess at once again when nothing recorded is
# unsent (call 111's 16k prefill ran out of memory with every excess free held for a synchronisation): checks, then
# the 27B MLX4 quick bench with a 16k prefill.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step full-4bit 30 "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
grep -E "cases,|panicked" "$OUT/full-4bit.log" | sed "s/^/full-4bit /"
step full-coder 30 "$BIN" check --device cuda --model models/tensorfold-coder-tiny
grep -E "cases,|panicked" "$OUT/full-coder.log" | sed "s/^/full-coder /"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
step q16k 90 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048,16384
grep -E "^\||panicked|error" "$OUT/q16k.log" | cut -c1-110 | sed "s/^/q16k /"
rm -rf /dev/shm/s27m4
finish "$FINAL"
