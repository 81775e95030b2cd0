#!/bin/bash
# gpu_prefetch.sh FINAL BUDGET_S NEW: call 45. The weight stream's first stages copied before the previous kernel is
# done (TENSORFOLD_CUDA_EARLY) and L2 asked for more of each tile (TENSORFOLD_CUDA_L2_AHEAD), against the old order,
# in turn on the 27B and 9B MLX 4-bit shapes; and two timing-only ablations (no lo-half mmas, no dequantisation)
# that say what the tensor pipe and the dequantisation cost. Checks first, with the L2 requests on.
# TENSORFOLD_CUDA_L2_AHEAD and the TF_ABLATE_LO / TF_ABLATE_DEQ macros existed only in call 45's binary (the
# working tree before e9a8f93); they were removed after it (BENCHMARKS.md §7, kernels v9).
FINAL=${1:?out dir}; BUDGET=${2:-400}; NEW=${3:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
step check-ops 90 env TENSORFOLD_CUDA_L2_AHEAD=65536 "$NEW" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
step full-tiny-mlx-4bit 40 env TENSORFOLD_CUDA_L2_AHEAD=65536 "$NEW" check --device cuda --model fixtures/tiny-mlx-4bit
step check-coder 30 "$NEW" check --device cuda --quick --model models/tensorfold-coder-tiny
grep -hE "^cuda:|^backend-ops|^oracle|cases,|^FAIL|^DIFF|^error|panicked" "$OUT"/check-*.log "$OUT"/full-*.log | head -20
variants() {  # variants SHAPE MODEL ROUNDS
  for i in $(seq 1 $3); do
    quick $1-old-$i $2 "$NEW" TENSORFOLD_CUDA_EARLY=0
    quick $1-early-$i $2 "$NEW"
    quick $1-l2s-$i $2 "$NEW" TENSORFOLD_CUDA_L2_AHEAD=16384
    quick $1-l2m-$i $2 "$NEW" TENSORFOLD_CUDA_L2_AHEAD=65536
    quick $1-l2all-$i $2 "$NEW" TENSORFOLD_CUDA_L2_AHEAD=1073741824
  done
  quick $1-nolo $2 "$NEW" TENSORFOLD_CUDA_DEFINES=-DTF_ABLATE_LO
  quick $1-nodeq $2 "$NEW" TENSORFOLD_CUDA_DEFINES=-DTF_ABLATE_DEQ
}
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
variants 27b /tmp/s27m4 2
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
variants 9b /tmp/s9m4 1
rm -rf /tmp/s9m4
finish "$FINAL"
