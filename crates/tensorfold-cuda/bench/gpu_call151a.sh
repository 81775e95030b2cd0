#!/bin/bash
# gpu_call151a.sh FINAL BUDGET_S BIN: (call 151, on the session's last device seconds) backend-ops and a quick suite,
# then decode at 32k of context on the 27B MLX4 shape with attn_chunk_g3 (the default) and attn_chunk_g6
# (TENSORFOLD_CUDA_ATTN_GROUP=6), f32 KV, then g6 and g3 with bf16 KV, as far as the budget goes.
FINAL=${1:?out dir}; BUDGET=${2:-170}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 30 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
ctx() {
  local name=$1 dt=$2; shift 2
  step "$name" 35 env "$@" "$BIN" bench --device cuda --model $M --kv-cache-dtype "$dt" --at-context \
    --prefill-lens 32768
  grep -E 'prefill|decode at' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
ctx g3-f32 f32
ctx g6-f32 f32 TENSORFOLD_CUDA_ATTN_GROUP=6
ctx g6-bf16 bf16 TENSORFOLD_CUDA_ATTN_GROUP=6
ctx g3-bf16 bf16
rm -rf $M
finish "$FINAL"
