#!/bin/bash
# gpu_call156.sh FINAL BUDGET_S NEW OLD: norms of 1,024-thread rows on clusters of 8 blocks (rms_norm_c8,
# add_rms_norm_c8: the same bits; TENSORFOLD_CUDA_NORM_CLUSTER=0 keeps one block a row) and a cheaper prepare_store
# (bf16 by F2FP, row and column passed, not divided for; swiglu's rows on the grid's y) against OLD (e2a502c, main
# before these). First every check on NEW (backend-ops compares the cluster norms with one block a row, bit for bit);
# then on the 27B MLX4 and bf16 shapes quick benches of OLD, NEW with one-block norms and NEW, in turn (the decode
# shas must agree), and the event profile of decode rounds with and without clusters.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2 3; do
  quick m4-old-$r $M "$OLD"
  quick m4-one-$r $M "$BIN" TENSORFOLD_CUDA_NORM_CLUSTER=0
  quick m4-new-$r $M "$BIN"
done
profile_decode prof-m4-one $M "$BIN" TENSORFOLD_CUDA_NORM_CLUSTER=0
profile_decode prof-m4-new $M "$BIN"
rm -rf $M
B=/dev/shm/s27bf
step synth-27b-bf16 80 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
for r in 1 2; do
  quick bf-old-$r $B "$OLD"
  quick bf-one-$r $B "$BIN" TENSORFOLD_CUDA_NORM_CLUSTER=0
  quick bf-new-$r $B "$BIN"
done
rm -rf $B
finish "$FINAL"
