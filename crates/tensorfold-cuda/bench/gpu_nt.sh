#!/bin/bash
# gpu_nt.sh FINAL BUDGET_S OLD NEW: call 50. Rounds of 16 rows with 2 row tiles a block (NEW's default) against 4
# (TENSORFOLD_CUDA_MMA_NT=4, call 48's layout) and OLD (e9a8f93), in turn, on the 9B bf16 and MLX 4-bit shapes.
FINAL=${1:?out dir}; BUDGET=${2:-300}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  quick 9b-old-$i /tmp/s9m4 "$OLD"
  quick 9b-nt2-$i /tmp/s9m4 "$NEW"
  quick 9b-nt4-$i /tmp/s9m4 "$NEW" TENSORFOLD_CUDA_MMA_NT=4
done
rm -rf /tmp/s9m4
step synth-9b-bf16 90 "$NEW" synth --shape 9b --format bf16 --out /tmp/s9b
for i in 1 2; do
  quick 9bf-old-$i /tmp/s9b "$OLD"
  quick 9bf-nt2-$i /tmp/s9b "$NEW"
  quick 9bf-nt4-$i /tmp/s9b "$NEW" TENSORFOLD_CUDA_MMA_NT=4
done
rm -rf /tmp/s9b
finish "$FINAL"
