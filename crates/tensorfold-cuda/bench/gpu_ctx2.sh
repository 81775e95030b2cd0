#!/bin/bash
# gpu_ctx2.sh FINAL BUDGET_S NEW: call 44. Is the slower decode at 2k of context (call 43) the scratch pool's doing?
# NEW's full sweep (prefill at 2k only) with TENSORFOLD_CUDA_POOL=0 and then as it is, on the 27B MLX 4-bit shape.
FINAL=${1:?out dir}; BUDGET=${2:-200}; NEW=${3:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for p in 0 1; do
  step 27b-pool$p 50 env TENSORFOLD_CUDA_POOL=$p "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
  grep -E 'decode|prefill' "$OUT/27b-pool$p.log" | sed "s/^/27b-pool$p /"
done
rm -rf /tmp/s27m4
finish "$FINAL"
