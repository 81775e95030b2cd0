#!/bin/bash
# gpu_call150.sh FINAL BUDGET_S BIN: (call 150) which attention kernel a one-stream decode row at a long context
# should take, with call 149's kernels: attn_chunk_g3 (now), the shared-key kernel attn_block
# (TENSORFOLD_CUDA_ATTN_BLOCK_ROWS=1 sends a one-row chain to it: every query head of a kv head from one tile in
# shared memory, K and V read once), and attn_chunk at 2 blocks an SM (TF_ATTN_BLOCKS=2: 128 registers, no
# spills; compiled on the device). `bench --at-context` on the 27B MLX4 shape, f32 and bf16 KV.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
ctx() {
  local name=$1 dt=$2; shift 2
  step "$name" 45 env "$@" "$BIN" bench --device cuda --model $M --kv-cache-dtype "$dt" --at-context \
    --prefill-lens 2048,32768
  grep -E 'decode at|prefill' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
ctx chunk-f32 f32
ctx block-f32 f32 TENSORFOLD_CUDA_ATTN_BLOCK_ROWS=1
ctx chunk-bf16 bf16
ctx block-bf16 bf16 TENSORFOLD_CUDA_ATTN_BLOCK_ROWS=1
ctx chunk2-f32 f32 TENSORFOLD_CUDA_DEFINES=-DTF_ATTN_BLOCKS=2 TENSORFOLD_CACHE_DIR=/tmp/tfcache2
ctx chunk-f32-2 f32
rm -rf $M
finish "$FINAL"
