#!/bin/bash
# gpu_call155.sh FINAL BUDGET_S NEW OLD: attn_block_d*_q3k8 loading a column's next four queries (pass 1) and next
# four weights (pass 2) with one 128-bit load each, the queries' rows stored chain-major (NEW), against call 154's
# k8 (OLD): 8% fewer instructions in the inner loops, the same wavefronts, the same chains. Call 154 found k8 issuing
# in 54% of cycles with 2 warps a scheduler. backend-ops (k8 against a block per row, bit for bit) first; then the
# 27B MLX4 16k and 32k prefills alternating; then Nsight Compute on call 154's launch for both, with the stall
# reasons this time.
FINAL=${1:?out dir}; BUDGET=${2:-300}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  BIN=$OLD at_context old-$r $M 16384,32768
  BIN=$NEW at_context new-$r $M 16384,32768
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
for v in old:$OLD new:$NEW; do
  n=${v%%:*}; b=${v#*:}
  step ncu-$n 45 "$NCU" --kernel-name attn_block_d256_q3k8 --launch-skip 116 --launch-count 1 --section SpeedOfLight \
    --section SchedulerStats --metrics \
    'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum' \
    "$b" run --device cuda --model $M --prompt-ids "$(seq -s, 1 16384)" --max-tokens 1 --ignore-eos
  grep -E "Duration|Eligible Warps|l1tex__|sm__pipe|smsp__inst|L1/TEX Cache|stalled" "$OUT/ncu-$n.log" \
    | awk '$NF+0 >= 0.05 || !/stalled/' | head -30 | sed "s/^/ncu-$n /"
done
rm -rf $M
finish "$FINAL"
