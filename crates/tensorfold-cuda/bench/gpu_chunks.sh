#!/bin/bash
# gpu_chunks.sh FINAL BUDGET_S BIN: (written for a call 132 that never ran: the session's device time was spent)
# prefill speed by prompt rows a forward (`bench --prefill-chunk`,
# `serve --prefill-chunk`, whose default is 256 while the bench measured 2,048): 27B MLX4 prompts of 2k and 16k
# tokens in chunks of 256, 512, 1,024 and 2,048 rows (the engine also ends a chunk at each prompt-cache snapshot,
# every 1,024 tokens). The kernels are the final commit's (call 130's SASS); first_check guards the run.
FINAL=${1:?out dir}; BUDGET=${2:-150}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step synth-27b-mlx4 40 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out /dev/shm/s27m4
for c in 256 512 1024 2048; do
  step chunk-$c 25 "$BIN" bench --device cuda --model /dev/shm/s27m4 --quick --decode-tokens 4 --repeat 1 \
    --round-rows 1 --prefill-lens 2048,16384 --prefill-chunk $c
  grep -E "prefill" "$OUT/chunk-$c.log" | sed "s/^/chunk-$c /"
done
finish "$FINAL"
