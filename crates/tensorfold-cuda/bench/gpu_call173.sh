#!/bin/bash
# gpu_call173.sh FINAL BUDGET_S BIN: main's kernels, no change. (1) What each small launch of a 27B MLX4 decode round
# costs inside the round's graph: quick benches with one kernel family launched twice (TENSORFOLD_CUDA_TWICE, a timing
# ablation: in-place kernels then compute wrong values), against the same binary launching each once, before and
# after (the plan of gpu_call172.sh, which never ran and is gone). (2) Where a 27B bf16 16-row round's time goes against a 1-row
# round's (event profiles), and the bf16 rounds on mma.sync (TENSORFOLD_CUDA_WGMMA_BF16=0) beside wgmma.
FINAL=${1:?out dir}; BUDGET=${2:-420}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
M=/dev/shm/s27m4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
quick base-1 $M "$BIN"
for k in add_rms_norm swiglu dn_conv dn_recur dn_norm attn_prep attn_chunk prepare_x; do
  quick twice-$k $M "$BIN" TENSORFOLD_CUDA_TWICE=$k
done
quick base-2 $M "$BIN"
rm -rf $M
BF=/dev/shm/s27bf
step synth-bf 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
quick bf-base-1 $BF "$BIN"
quick bf-mma-1 $BF "$BIN" TENSORFOLD_CUDA_WGMMA_BF16=0
profile_decode bf-prof $BF "$BIN"
sed -n '/profile of 4 rounds of 16/,/^launches/p' "$OUT/bf-prof.log" | sed "s/^/bf-prof16 /"
quick bf-base-2 $BF "$BIN"
quick bf-mma-2 $BF "$BIN" TENSORFOLD_CUDA_WGMMA_BF16=0
rm -rf $BF
finish "$FINAL"
