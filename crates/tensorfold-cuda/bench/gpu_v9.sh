#!/bin/bash
# gpu_v9.sh FINAL BUDGET_S OLD NEW: call 48. NEW: hi and lo in two B columns, centred codes, the prompt kernel at
# 4 warps and 3 blocks an SM. Every check; OLD (e9a8f93) and NEW in turn on the 27B MLX 4-bit shape (NEW also with at
# most 2 row tiles a block, TENSORFOLD_CUDA_MMA_NT=2); NEW's full sweep there (prefill at 2k and 16k); the 9B shapes.
FINAL=${1:?out dir}; BUDGET=${2:-500}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-old-$i /tmp/s27m4 "$OLD"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
  quick 27b-nt2-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_NT=2
done
step 27b-full 150 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384
grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-full.log" | sed "s/^/27b-full /"
step 27b-full-old 150 "$OLD" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384
grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-full-old.log" | sed "s/^/27b-full-old /"
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
quick 9b-old /tmp/s9m4 "$OLD"
quick 9b-new /tmp/s9m4 "$NEW"
rm -rf /tmp/s9m4
step synth-9b-bf16 90 "$NEW" synth --shape 9b --format bf16 --out /tmp/s9b
quick 9bf-old /tmp/s9b "$OLD"
quick 9bf-new /tmp/s9b "$NEW"
rm -rf /tmp/s9b
finish "$FINAL"
