#!/bin/bash
# gpu_many2.sh FINAL BUDGET_S OLD NEW: call 52. Shared launches only up to 8 rows (NEW) against OLD (21dc682):
# every check; the 27B MLX4 sweep without the long prefills, both binaries; NEW's profile; layout ablations of the
# 1-row weight stream; the 9B MLX4 and bf16 shapes, both binaries in turn.
FINAL=${1:?out dir}; BUDGET=${2:-400}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for b in old new; do
  bin=$NEW; [ $b = old ] && bin=$OLD
  step 27b-sweep-$b 60 "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
  grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-sweep-$b.log" | sed "s/^/27b-sweep-$b /"
done
quick 27b-new-2 /tmp/s27m4 "$NEW"
quick 27b-old-2 /tmp/s27m4 "$OLD"
step profile-new 30 env TENSORFOLD_CUDA_PROFILE=1 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick
quick 27b-s8 /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_STAGES=8
quick 27b-w16 /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_WARPS=16
quick 27b-w4 /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_WARPS=4
quick 27b-pdl0 /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_PDL=0
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  quick 9b-old-$i /tmp/s9m4 "$OLD"
  quick 9b-new-$i /tmp/s9m4 "$NEW"
done
rm -rf /tmp/s9m4
step synth-9b-bf16 90 "$NEW" synth --shape 9b --format bf16 --out /tmp/s9b
for i in 1 2; do
  quick 9bf-old-$i /tmp/s9b "$OLD"
  quick 9bf-new-$i /tmp/s9b "$NEW"
done
rm -rf /tmp/s9b
finish "$FINAL"
