#!/bin/bash
# gpu_attn_check.sh FINAL BUDGET_S BIN: call 68, the final binary (attn_chunk at 3 blocks an SM by default): every
# check, the tiny fixtures' token shas, and the full 27B MLX4 sweep with a 16k prompt (decode at 16k of context).
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
for m in tiny-mlx-4bit tiny-wrapper-bf16; do
  for n in 64 300; do
    step run-$m-$n 20 "$BIN" run --device cuda --model fixtures/$m --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens $n --ignore-eos --json
    echo "run-$m-$n $(tail -1 "$OUT/run-$m-$n.log" | grep -o '"token_sha":"[0-9a-f]*"')"
  done
done
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
step 27b-sweep 60 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 16384
grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-sweep.log" | grep -v "temperature\|presence" | sed "s/^/27b-sweep /"
rm -rf /dev/shm/s27m4
finish "$FINAL"
