#!/bin/bash
# gpu_call172.sh FINAL BUDGET_S BIN: what each small launch of a 27B MLX4 decode round costs inside the round's graph:
# quick benches with one kernel family launched twice (TENSORFOLD_CUDA_TWICE, a timing ablation: in-place kernels then
# compute wrong values), against the same binary launching each once, before and after.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
M=/dev/shm/s27m4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
quick base-1 $M "$BIN"
for k in add_rms_norm swiglu dn_conv dn_recur dn_norm attn_prep attn_chunk prepare_x; do
  quick twice-$k $M "$BIN" TENSORFOLD_CUDA_TWICE=$k
done
quick base-2 $M "$BIN"
rm -rf $M
finish "$FINAL"
