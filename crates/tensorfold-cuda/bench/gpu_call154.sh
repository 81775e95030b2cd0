#!/bin/bash
# gpu_call154.sh FINAL BUDGET_S BIN: prompt attention with a score's four chains on four lanes (attn_block_d*_q3k8,
# attention_lanes.cu; TENSORFOLD_CUDA_ATTN_BLOCK=3k8) against the default (q3k4), one binary. Call 153's Nsight
# Compute run found q3k4 held by shared memory (83M load wavefronts for about 190M warp fmas, L1 66% busy, fma pipes 35%);
# k8 needs about half the wavefronts per fma. First every check (backend-ops compares k8 with a block per row, bit
# for bit); then on the 27B MLX4 shape `bench --at-context` (2k, 16k, 32k prefills and decode at each), default and
# k8 alternating; Nsight Compute on the same 256-row launch of a 16k `run` for both; quick benches of both (the
# decode shas must agree); then the 27B bf16 shape's 16k prefill with both.
FINAL=${1:?out dir}; BUDGET=${2:-420}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
L=2048,16384,32768
for r in 1 2; do
  at_context k4-$r $M $L
  at_context k8-$r $M $L TENSORFOLD_CUDA_ATTN_BLOCK=3k8
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
for k in k4 k8; do
  step ncu-$k 60 env TENSORFOLD_CUDA_ATTN_BLOCK=3$k "$NCU" --kernel-name attn_block_d256_q3$k --launch-skip 116 \
    --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats --metrics \
    l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed.sum \
    "$BIN" run --device cuda --model $M --prompt-ids "$(seq -s, 1 16384)" --max-tokens 1 --ignore-eos
  grep -E "Duration|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|l1tex__|sm__pipe|smsp__inst|L1/TEX Cache" \
    "$OUT/ncu-$k.log" | head -14 | sed "s/^/ncu-$k /"
done
quick quick-k4 $M "$BIN"
quick quick-k8 $M "$BIN" TENSORFOLD_CUDA_ATTN_BLOCK=3k8
rm -rf $M
B=/dev/shm/s27bf
step synth-27b-bf16 80 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
at_context bf16-16k-k4 $B 16384
at_context bf16-16k-k8 $B 16384 TENSORFOLD_CUDA_ATTN_BLOCK=3k8
rm -rf $B
finish "$FINAL"
