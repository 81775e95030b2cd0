#!/bin/bash
# gpu_call158.sh FINAL BUDGET_S BIN: the session's final binary (norms on clusters of 4 blocks for calls of up to 16
# rows by default): every check; quick benches of the 27B MLX4 shape with the default and with one block a row
# (TENSORFOLD_CUDA_NORM_CLUSTER=0), in turn; then the issue's sweep (`bench`: copy bandwidth, decode against the
# bound, rounds of 1 to 64 rows, aggregate decode, prefill 2k/16k/32k) of the 27B MLX4 and bf16 shapes.
FINAL=${1:?out dir}; BUDGET=${2:-520}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
sweep() {  # sweep NAME MODEL PREFILL_LENS
  step "$1" 150 "$BIN" bench --device cuda --model "$2" --decode-tokens 32 --repeat 2 --prefill-lens "$3"
  grep -E "^\||copy|weights read" "$OUT/$1.log" | cut -c1-140 | sed "s/^/$1 /"
}
full_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m4-new-$r $M "$BIN"
  quick m4-one-$r $M "$BIN" TENSORFOLD_CUDA_NORM_CLUSTER=0
done
sweep sweep-27b-mlx4 $M 2048,16384,32768
rm -rf $M
B=/dev/shm/s27bf
step synth-27b-bf16 250 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
sweep sweep-27b-bf16 $B 2048,16384
rm -rf $B
finish "$FINAL"
