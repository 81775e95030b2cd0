#!/bin/bash
# gpu_pool.sh FINAL BUDGET_S NEW: call 34. Every check with NEW (activations and temporaries recycled on the host,
# scratch.rs); NEW against NEW with TENSORFOLD_CUDA_POOL=0 (every buffer from the driver's allocator) in turn on the
# 27B and 9B MLX 4-bit shapes and the 9B bf16 shape; a profile of each way with the host's time in launch calls and
# allocations; the 27B full sweep with prompts of 2k, 16k and 32k tokens.
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-pool-$i /tmp/s27m4 "$NEW"
  quick 27b-nopool-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_POOL=0
done
for b in pool nopool; do
  v=1; [ $b = nopool ] && v=0
  step profile-$b 60 env TENSORFOLD_CUDA_PROFILE=1 TENSORFOLD_CUDA_POOL=$v "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048
  grep -E "^profile|^launches|^host:" "$OUT/profile-$b.log" | head -6 | sed "s/^/$b /"
done
step 27b-full 150 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384,32768
grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-full.log" | sed "s/^/27b-full /"
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  quick 9b-pool-$i /tmp/s9m4 "$NEW"
  quick 9b-nopool-$i /tmp/s9m4 "$NEW" TENSORFOLD_CUDA_POOL=0
done
rm -rf /tmp/s9m4
step synth-9b-bf16 70 "$NEW" synth --shape 9b --format bf16 --out /tmp/s9b
quick 9b-bf16-pool /tmp/s9b "$NEW"
quick 9b-bf16-nopool /tmp/s9b "$NEW" TENSORFOLD_CUDA_POOL=0
rm -rf /tmp/s9b
finish "$FINAL"
