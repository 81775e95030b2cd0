#!/bin/bash
# gpu_wide16.sh FINAL BUDGET_S OLD NEW: call 53. Why 16-row rounds got slower with shared launches (call 52): NEW
# against NEW with 16 warps for matrices of up to 1024 outputs again (TENSORFOLD_CUDA_MMA_WIDE=1024, which also
# keeps b and a out of qkv's launch) and OLD (21dc682), in turn, on the 27B MLX4 shape.
FINAL=${1:?out dir}; BUDGET=${2:-300}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-new-$i /tmp/s27m4 "$NEW"
  quick 27b-wide-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_WIDE=1024
  quick 27b-old-$i /tmp/s27m4 "$OLD"
done
quick 27b-nopair /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_PAIR=0
quick 27b-old-nopair /tmp/s27m4 "$OLD" TENSORFOLD_CUDA_PAIR=0
step profile-old 30 env TENSORFOLD_CUDA_PROFILE=1 "$OLD" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick
rm -rf /tmp/s27m4
finish "$FINAL"
