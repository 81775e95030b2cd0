#!/bin/bash
# gpu_call151.sh FINAL BUDGET_S BIN: (next session's first call) six query heads a block for long-context rows
# (attn_chunk_g6, TENSORFOLD_CUDA_ATTN_GROUP=6: a kv head's keys and values read once for its six heads, where two
# attn_chunk_g3 blocks read them twice; 2 blocks an SM, 128 registers, 54 KB of dynamic shared memory) against the
# default (g3), one binary. First every check (backend-ops now compares g6 with one head a block, bit for bit);
# then on the 27B MLX4 shape `bench --at-context` (2k, 16k and 32k prefills, one-stream decode at each context),
# default and g6 alternating, with f32 and with bf16 KV; then the issue's whole table once (the default).
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
ctx() {
  local name=$1 dt=$2; shift 2
  step "$name" 45 env "$@" "$BIN" bench --device cuda --model $M --kv-cache-dtype "$dt" --at-context \
    --prefill-lens 2048,16384,32768
  grep -E 'prefill|decode at' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
for r in 1 2; do
  ctx g3-f32-$r f32
  ctx g6-f32-$r f32 TENSORFOLD_CUDA_ATTN_GROUP=6
done
ctx g3-bf16 bf16
ctx g6-bf16 bf16 TENSORFOLD_CUDA_ATTN_GROUP=6
step table 150 "$BIN" bench --device cuda --model $M --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
grep -E '\|' "$OUT/table.log" | grep -v profile | cut -c1-120 | sed "s/^/table /"
rm -rf $M
finish "$FINAL"
