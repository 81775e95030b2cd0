#!/bin/bash
# gpu_call159.sh FINAL BUDGET_S BIN: whether norms on clusters help rounds of 32 and 64 rows too: the final binary's
# rounds of 1, 32 and 64 rows on the 27B MLX4 and bf16 shapes with its default (clusters up to 16 rows) and with
# TENSORFOLD_CUDA_NORM_CLUSTER=64, in turn.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
rounds() {  # rounds NAME MODEL [ENV...]
  local name=$1 model=$2; shift 2
  step "$name" 30 env "$@" "$BIN" bench --device cuda --model "$model" --decode-tokens 8 --repeat 2 --quick \
    --round-rows 1,32,64 --prefill-lens 64
  grep -E 'round of' "$OUT/$name.log" | cut -c1-60 | sed "s/^/$name /"
}
first_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  rounds m4-16-$r $M
  rounds m4-64-$r $M TENSORFOLD_CUDA_NORM_CLUSTER=64
done
rm -rf $M
B=/dev/shm/s27bf
step synth-27b-bf16 100 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
for r in 1 2; do
  rounds bf-16-$r $B
  rounds bf-64-$r $B TENSORFOLD_CUDA_NORM_CLUSTER=64
done
rm -rf $B
finish "$FINAL"
