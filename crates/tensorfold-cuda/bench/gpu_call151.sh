#!/bin/bash
# gpu_call151.sh FINAL BUDGET_S BIN: two kernels not yet timed, against the defaults, one binary:
# - six query heads a block for long-context decode rows (attn_chunk_g6, TENSORFOLD_CUDA_ATTN_GROUP=6: a kv head's
#   keys and values read once for its six heads, where two attn_chunk_g3 blocks read them twice; 2 blocks an SM,
#   128 registers, 54 KB of dynamic shared memory);
# - prompt attention scoring four keys a thread (attn_block_d256_q3k4, TENSORFOLD_CUDA_ATTN_BLOCK=3k4: two tiles of
#   keys at a time, 7 float4 loads from shared memory for 48 fmas where the default loads 4 float2s and 3 float4s
#   for 24).
# Decode rows never take attn_block and prompt chunks never take attn_chunk_g*, so one NEW run (both switches)
# times both: its decode lines are g6's, its prefill lines k4's. First every check (backend-ops compares both with
# one head a block / attn_chunk, bit for bit); then on the 27B MLX4 shape `bench --at-context` (2k, 16k and 32k
# prefills, one-stream decode at each context), default and NEW alternating, with f32 and with bf16 KV; then Nsight
# Compute on one default prompt-attention launch (attn_block_d256_q3, 30% of the 16k prefill); then, on the H200
# only, the issue's table for the 27B MLX4 shape (the default).
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
NEW=(TENSORFOLD_CUDA_ATTN_GROUP=6 TENSORFOLD_CUDA_ATTN_BLOCK=3k4)
for r in 1 2; do
  ctx old-f32-$r f32
  ctx new-f32-$r f32 "${NEW[@]}"
done
ctx old-bf16 bf16
ctx new-bf16 bf16 "${NEW[@]}"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
P2K=$(seq -s, 1 2048)
# The 2048-token prompt is one chunk of 2048 rows; launch 4 is its fifth attention layer (the first ones may be a
# warm-up round's).
step ncu-attn-block 90 "$NCU" --kernel-name attn_block_d256_q3 --launch-skip 4 --launch-count 1 --section SpeedOfLight \
  --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section InstructionStats \
  --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed.sum,smsp__inst_executed_op_shared_ld.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active \
  "$BIN" run --device cuda --model $M --prompt-ids "$P2K" --max-tokens 2 --ignore-eos
grep -E "Duration|Throughput|Issued Ipc|Issue Slots|Eligible|Active Warps Per|Registers Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|Block Size|Stall|stall|Pipe|pipe|wavefronts|conflicts|inst_executed|ffma|Shared" \
  "$OUT/ncu-attn-block.log" | head -60 | sed "s/^/ncu /"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
step table 150 "$BIN" bench --device cuda --model $M --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
grep -E '\|' "$OUT/table.log" | grep -v profile | cut -c1-120 | sed "s/^/table /"
else echo "not an H200: no table"; fi
step ncu-attn-block-k4 90 env TENSORFOLD_CUDA_ATTN_BLOCK=3k4 "$NCU" --kernel-name attn_block_d256_q3k4 --launch-skip 4 --launch-count 1 --section SpeedOfLight \
  --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats \
  --section ComputeWorkloadAnalysis --section InstructionStats \
  "$BIN" run --device cuda --model $M --prompt-ids "$P2K" --max-tokens 2 --ignore-eos
grep -E "Duration|Issued Ipc|Eligible|Warp Cycles Per Issued|Pipe|pipe" "$OUT/ncu-attn-block-k4.log" | head -30 | sed "s/^/ncu-k4 /"
rm -rf $M
finish "$FINAL"
