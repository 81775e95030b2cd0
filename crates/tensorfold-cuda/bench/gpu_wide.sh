#!/bin/bash
# gpu_wide.sh FINAL BUDGET_S NEW START: on the GPU machine, one call: backend-ops and every equality suite with NEW,
# then quick runs (decode, 16-row rounds, 2k prefill) alternating START (this session's first binary), NEW, and NEW
# with the old warp rule (TENSORFOLD_CUDA_MMA_WIDE=1024: 16 warps only up to 1024 outputs) on the 27B MLX 4-bit
# shape (twice), and NEW against the old rule on the 9B MLX 4-bit and bf16 shapes.
FINAL=${1:?out dir}; BUDGET=${2:-480}; NEW=${3:?new binary}; START=${4:?start binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-start-$i /tmp/s27m4 "$START"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
  quick 27b-narrow-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_WIDE=1024
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
quick 9b-mlx4-new /tmp/s9m4 "$NEW"
quick 9b-mlx4-narrow /tmp/s9m4 "$NEW" TENSORFOLD_CUDA_MMA_WIDE=1024
rm -rf /tmp/s9m4
step synth-9b-bf16 60 "$NEW" synth --shape 9b --format bf16 --out /tmp/s9b
quick 9b-bf16-new /tmp/s9b "$NEW"
quick 9b-bf16-narrow /tmp/s9b "$NEW" TENSORFOLD_CUDA_MMA_WIDE=1024
rm -rf /tmp/s9b
finish "$FINAL"
