#!/bin/bash
# gpu_call157.sh FINAL BUDGET_S BIN: call 156 found norms on clusters of 8 blocks 3.8% faster in 16-row 27B MLX4
# rounds and 1.2% slower in 16-row 27B bf16 rounds. Here clusters of 8 (the default), of 4
# (TENSORFOLD_CUDA_NORM_CLUSTER_SIZE=4) and one block a row (TENSORFOLD_CUDA_NORM_CLUSTER=0) in turn on both shapes,
# and the event profile of 16-row rounds with one block and with clusters of 8, to see which launches move.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
# `profile16 NAME MODEL [ENV...]`: the event profile of 4 rounds of 16 rows under ENV; prints its first kernels.
profile16() {
  local name=$1 model=$2; shift 2
  step "$name" 40 env "$@" TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model "$model" --decode-tokens 16 \
    --repeat 1 --quick --prefill-lens 64
  sed -n '/profile of 4 rounds of 16 rows/,/^launches/p' "$OUT/$name.log" | head -16 | sed "s/^/$name /"
}
first_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m4-c8-$r $M "$BIN"
  quick m4-c4-$r $M "$BIN" TENSORFOLD_CUDA_NORM_CLUSTER_SIZE=4
  quick m4-one-$r $M "$BIN" TENSORFOLD_CUDA_NORM_CLUSTER=0
done
profile16 p16-m4-one $M TENSORFOLD_CUDA_NORM_CLUSTER=0
profile16 p16-m4-c8 $M
rm -rf $M
B=/dev/shm/s27bf
step synth-27b-bf16 80 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
for r in 1 2; do
  quick bf-c8-$r $B "$BIN"
  quick bf-c4-$r $B "$BIN" TENSORFOLD_CUDA_NORM_CLUSTER_SIZE=4
  quick bf-one-$r $B "$BIN" TENSORFOLD_CUDA_NORM_CLUSTER=0
done
profile16 p16-bf-one $B TENSORFOLD_CUDA_NORM_CLUSTER=0
profile16 p16-bf-c8 $B
rm -rf $B
finish "$FINAL"
