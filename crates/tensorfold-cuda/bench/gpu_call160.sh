#!/bin/bash
# gpu_call160.sh FINAL BUDGET_S BIN: DeltaNet chains stepped with each row's output sum beside the next row's
# advance (deltanet_batch.cu dn_chain_batch; TENSORFOLD_CUDA_DN_PIPE=0 for the old order, the same bits). Every check
# (backend-ops compares the batched kernel with the plain one on chains, bit for bit); then on the 27B MLX4 shape
# quick benches (rounds of 1 and 16 rows, a 2k prefill) and a 16k prefill, pipelined and not, in turn.
FINAL=${1:?out dir}; BUDGET=${2:-250}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m4-pipe-$r $M "$BIN"
  quick m4-old-$r $M "$BIN" TENSORFOLD_CUDA_DN_PIPE=0
done
at_context pipe-16k $M 16384
at_context old-16k $M 16384 TENSORFOLD_CUDA_DN_PIPE=0
rm -rf $M
finish "$FINAL"
