#!/bin/bash
# gpu_final9.sh FINAL BUDGET_S OLD NEW: call 49. The final binary (NEW) of the hi/lo-column kernels: every check; the
# full sweep of the 27B MLX 4-bit shape (prefill at 2k, 16k, 32k) and of the 9B MLX 4-bit shape; the 27B bf16
# 16-layer cut's prefill at 2k and 16k with OLD (e9a8f93) and NEW in turn.
FINAL=${1:?out dir}; BUDGET=${2:-500}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
step 27b-full 150 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384,32768
grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-full.log" | sed "s/^/27b-full /"
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
step 9b-full 90 "$NEW" bench --device cuda --model /tmp/s9m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384
grep -E 'copy|decode|streams|round of|prefill' "$OUT/9b-full.log" | sed "s/^/9b-full /"
rm -rf /tmp/s9m4
step synth-27b-bf16-16l 90 "$NEW" synth --shape 27b --format bf16 --layers 16 --out /tmp/s27b16
for b in old new; do
  bin=$NEW; [ $b = old ] && bin=$OLD
  step 27b-bf16-16l-$b 60 "$bin" bench --device cuda --model /tmp/s27b16 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048,16384
  grep -E 'prefill|decode, 1 stream \||round of' "$OUT/27b-bf16-16l-$b.log" | sed "s/^/27b-bf16-16l-$b /"
done
rm -rf /tmp/s27b16
finish "$FINAL"
