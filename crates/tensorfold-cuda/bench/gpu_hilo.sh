#!/bin/bash
# gpu_hilo.sh FINAL BUDGET_S OLD NEW: call 46. NEW puts x's hi and lo in two B columns of one mma (half the tensor
# work at up to 4 rows; new bits, the same on every path). Every check with NEW; then OLD (e9a8f93) and NEW in turn,
# quick runs on the 27B and 9B MLX 4-bit shapes (and a 16k prefill on the 27B), then on the 9B bf16 shape.
FINAL=${1:?out dir}; BUDGET=${2:-500}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-old-$i /tmp/s27m4 "$OLD"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
done
for b in old new; do
  bin=$OLD; [ $b = new ] && bin=$NEW
  step 27b-16k-$b 60 "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 16384
  grep -E 'prefill' "$OUT/27b-16k-$b.log" | sed "s/^/27b-16k-$b /"
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  quick 9b-old-$i /tmp/s9m4 "$OLD"
  quick 9b-new-$i /tmp/s9m4 "$NEW"
done
rm -rf /tmp/s9m4
step synth-9b-bf16 90 "$NEW" synth --shape 9b --format bf16 --out /tmp/s9b
quick 9bf-old /tmp/s9b "$OLD"
quick 9bf-new /tmp/s9b "$NEW"
rm -rf /tmp/s9b
finish "$FINAL"
