#!/bin/bash
# gpu_call153.sh FINAL BUDGET_S NEW OLD: attn_block with each warp taking 4 key (value) vectors × 8 columns and padded
# query and score rows (NEW), against main's 16 × 2 (OLD, 3cf3fc0). Call 151's Nsight Compute run counted 7.1M
# shared-memory load wavefronts against 14.3M warp fmas (the SM's shared memory serves one wavefront a cycle, its fma
# pipes four warp fmas): NEW's loads should take one wavefront each where OLD's took two. Same chains, same bits.
# First every check on NEW; then on the 27B MLX4 shape `bench --at-context` (2k, 16k and 32k prefills, one-stream
# decode at each), OLD and NEW alternating; Nsight Compute on one 256-row launch of a 16k `run` for each; the 27B
# MLX4 decode shas (quick bench); then the 27B bf16 shape's 16k prefill, OLD and NEW.
FINAL=${1:?out dir}; BUDGET=${2:-420}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$NEW"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
L=2048,16384,32768
for r in 1 2; do
  BIN=$OLD at_context old-$r $M $L
  BIN=$NEW at_context new-$r $M $L
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
for v in old:$OLD new:$NEW; do
  n=${v%%:*}; b=${v#*:}
  step ncu-$n 60 "$NCU" --kernel-name attn_block_d256_q3k4 --launch-skip 116 --launch-count 1 --section SpeedOfLight \
    --section SchedulerStats --section WarpStateStats --metrics \
    l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_op_shared_ld.sum \
    "$b" run --device cuda --model $M --prompt-ids "$(seq -s, 1 16384)" --max-tokens 1 --ignore-eos
  grep -E "Duration|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Grid Size|l1tex__|sm__pipe|smsp__inst|L1/TEX Cache" \
    "$OUT/ncu-$n.log" | head -14 | sed "s/^/ncu-$n /"
done
quick quick-new $M "$NEW"
grep -o 'token_sha [0-9a-f ]*' "$OUT/quick-new.log" | sed "s/^/quick-new /"
rm -rf $M
B=/dev/shm/s27bf
step synth-27b-bf16 80 "$NEW" synth --shape 27b --format bf16 --threads 16 --out $B
BIN=$OLD at_context bf16-16k-old $B 16384
BIN=$NEW at_context bf16-16k-new $B 16384
rm -rf $B
finish "$FINAL"
