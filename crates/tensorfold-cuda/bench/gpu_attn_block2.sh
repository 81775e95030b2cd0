#!/bin/bash
# gpu_attn_block2.sh FINAL BUDGET_S BIN: call 75, attn_block's final binary: every check and the tiny fixtures'
# shas; the 27B MLX4 sweep (rounds of 1 to 64 rows, streams, prefill 2k and 16k, decode at their context) with
# attn_chunk alone (TENSORFOLD_CUDA_ATTN_BLOCK=0) and with attn_block for every chain of 2 rows or more
# (TENSORFOLD_CUDA_ATTN_BLOCK_ROWS=2), then the default (128 rows), in turn.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
tiny_shas "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
sweep() {  # sweep NAME ENV...
  local name=$1; shift
  step "$name" 90 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384
  grep -E 'decode|streams|round of|prefill' "$OUT/$name.log" | grep -v "temperature\|presence" | cut -c1-110 | sed "s/^/$name /"
}
sweep sweep-chunk TENSORFOLD_CUDA_ATTN_BLOCK=0
sweep sweep-block-all TENSORFOLD_CUDA_ATTN_BLOCK_ROWS=2
sweep sweep-default TENSORFOLD_CUDA_ATTN_BLOCK=3
rm -rf /dev/shm/s27m4
finish "$FINAL"
