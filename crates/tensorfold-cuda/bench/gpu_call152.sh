#!/bin/bash
# gpu_call152.sh FINAL BUDGET_S BIN: BIN built with bench/logs/call152/sixteen_warps.patch (not on main): attn_block
# generalised over warps, with a sixteen-warp shape (attn_block_d*_q3w16, TENSORFOLD_CUDA_ATTN_BLOCK=3w16; call
# 151's Nsight Compute run found attn_block issuing in 42% of cycles with 2 warps a scheduler, its occupancy held by
# registers and shared memory), timed against the default of main (q3k4, which the patch builds from the same
# generic code). First every check (backend-ops compares all shapes with a block per row, bit for bit); then on the
# 27B MLX4 shape `bench --at-context` (2k, 16k and 32k prefills, one-stream decode at each), the default and w16
# alternating, and main's before (g3 and q3) once; then, budget allowing, the 27B bf16 shape's 16k prefill.
FINAL=${1:?out dir}; BUDGET=${2:-420}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
L=2048,16384,32768
for r in 1 2; do
  at_context new-$r $M $L
  at_context w16-$r $M $L TENSORFOLD_CUDA_ATTN_BLOCK=3w16
done
at_context main $M $L TENSORFOLD_CUDA_ATTN_BLOCK=3 TENSORFOLD_CUDA_ATTN_GROUP=3
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
# Call 151's Nsight Compute launch again, for the sixteen-warp kernel: does it issue more often?
step ncu-w16 60 env TENSORFOLD_CUDA_ATTN_BLOCK=3w16 "$NCU" --kernel-name attn_block_d256_q3w16 --launch-skip 4 \
  --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
  --section ComputeWorkloadAnalysis \
  "$BIN" run --device cuda --model $M --prompt-ids "$(seq -s, 1 2048)" --max-tokens 2 --ignore-eos
grep -E "Duration|Issued Ipc|Eligible|Active Warps Per|Warp Cycles Per Issued|Achieved Occupancy" \
  "$OUT/ncu-w16.log" | head -12 | sed "s/^/ncu-w16 /"
rm -rf $M
# The issue's prefill target: the 27B bf16 shape at 16k (call 143: 1,983 tok/s on the H200), with whichever of
# k4 and w16 was faster above at 16k.
best=$(awk '/prefill 16384/ {split(FILENAME, f, "/"); n=f[length(f)]; sub(/-[0-9]\.log/, "", n); s[n]+=$(NF-5)} END {print (s["w16"] > s["new"]) ? "3w16" : "3k4"}' "$OUT"/new-*.log "$OUT"/w16-*.log 2>/dev/null)
echo "faster at 16k: $best"
B=/dev/shm/s27bf
step synth-27b-bf16 80 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
at_context bf16-16k $B 16384 TENSORFOLD_CUDA_ATTN_BLOCK=$best
at_context bf16-16k-main $B 16384 TENSORFOLD_CUDA_ATTN_BLOCK=3 TENSORFOLD_CUDA_ATTN_GROUP=3
rm -rf $B
finish "$FINAL"
