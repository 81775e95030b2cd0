#!/bin/bash
# gpu_call149.sh FINAL BUDGET_S NEW OLD: (call 149) where one-stream decode at a long context loses its time. On the
# 27B MLX4 shape, `bench --at-context` (a 2k and a 32k prefill, then decode at each context) with the attention
# kernels a decode row takes now (attn_chunk_g3, K and V read once per 3 query heads) and with the shared-key kernel
# (attn_block: every query head of a kv head from one tile in shared memory; TENSORFOLD_CUDA_ATTN_BLOCK_ROWS=1 sends a
# one-row chain to it, columns per thread 3 or 2), each with f32 and bf16 KV; the event profiles of decode at 32k;
# Nsight Compute on one attn_chunk_g3 launch of a 32k-context decode round. NEW's attn_merge weighs the chunks side
# by side (OLD: main's kernels before it); everything but the first run is NEW's.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
# `ctx NAME DTYPE [ENV...]`: decode at 2k and 32k of context under ENV (binary $B, NEW unless set).
ctx() {
  local name=$1 dt=$2; shift 2
  step "$name" 45 env "$@" "${B:-$BIN}" bench --device cuda --model $M --kv-cache-dtype "$dt" --at-context \
    --prefill-lens 2048,32768
  grep -E 'copy|prefill|decode at' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
B=$OLD ctx old-chunk-f32 f32
ctx chunk-f32 f32
ctx block3-f32 f32 TENSORFOLD_CUDA_ATTN_BLOCK_ROWS=1
ctx chunk-bf16 bf16
ctx block3-bf16 bf16 TENSORFOLD_CUDA_ATTN_BLOCK_ROWS=1
ctx prof-chunk-f32 f32 TENSORFOLD_CUDA_PROFILE=1
sed -n '/profile of 8 decode rounds at 32768/,/^launches/p' "$OUT/prof-chunk-f32.log" | head -12 | sed "s/^/prof-chunk /"
ctx prof-block3-f32 f32 TENSORFOLD_CUDA_PROFILE=1 TENSORFOLD_CUDA_ATTN_BLOCK_ROWS=1
sed -n '/profile of 8 decode rounds at 32768/,/^launches/p' "$OUT/prof-block3-f32.log" | head -12 | sed "s/^/prof-block3 /"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
STALLS=$(for s in short_scoreboard long_scoreboard barrier membar wait math_pipe_throttle mio_throttle lg_throttle \
  no_instruction branch_resolving dispatch_stall drain not_selected selected; do
  printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $s; done)
step ncu-chunk-g3 70 "$NCU" --kernel-name attn_chunk_g3 --launch-skip 4 --launch-count 1 --section SpeedOfLight \
  --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --metrics "${STALLS%,}" \
  "$BIN" bench --device cuda --model $M --at-context --prefill-lens 32768
grep -E "Duration|Throughput|Issued Ipc|Issue Slots|Eligible|Active Warps Per|Registers Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|Block Size|Hit Rate|Mem Busy|Max Bandwidth|stalled" \
  "$OUT/ncu-chunk-g3.log" | sed "s/^/ncu /"
rm -rf $M
finish "$FINAL"
