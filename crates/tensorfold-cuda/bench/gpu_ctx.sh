#!/bin/bash
# gpu_ctx.sh FINAL BUDGET_S OLD NEW: call 43. Decode at 2k of context (and the rest of the full sweep, prefill at 2k
# only) with OLD (last session's final binary, aeed1b4) and NEW in turn on the 27B MLX 4-bit shape: call 42 measured
# 91.4 tok/s there against call 34's 106.7.
FINAL=${1:?out dir}; BUDGET=${2:-300}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  for b in old new; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    step 27b-$b-$i 60 "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
    grep -E 'decode|streams|prefill' "$OUT/27b-$b-$i.log" | sed "s/^/27b-$b-$i /"
  done
done
rm -rf /tmp/s27m4
finish "$FINAL"
