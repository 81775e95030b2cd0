#!/bin/bash
# gpu_bounds.sh FINAL BUDGET_S OLD NEW: call 54. The stream kernels' registers back where they were (NEW) against
# OLD (21dc682): every check; the 27B MLX4 sweep without the long prefills, both binaries; 16-row layouts (shared
# launches at every row count; 4 row tiles of one output tile a block); the 9B MLX4 sweep, both binaries.
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
for i in 1 2; do
  quick 27b-new-$i /tmp/s27m4 "$NEW"
  quick 27b-many64-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MANY_ROWS=64
  quick 27b-nt4s4-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_NT=4 TENSORFOLD_CUDA_MMA_STAGES=4
  quick 27b-old-$i /tmp/s27m4 "$OLD"
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for b in old new; do
  bin=$NEW; [ $b = old ] && bin=$OLD
  step 9b-sweep-$b 60 "$bin" bench --device cuda --model /tmp/s9m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
  grep -E 'copy|decode|streams|round of|prefill' "$OUT/9b-sweep-$b.log" | sed "s/^/9b-sweep-$b /"
done
rm -rf /tmp/s9m4
finish "$FINAL"
