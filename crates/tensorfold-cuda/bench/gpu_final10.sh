#!/bin/bash
# gpu_final10.sh FINAL BUDGET_S OLD NEW: call 55. The final binary (NEW) of the shared launches against OLD (21dc682):
# every check; the 27B MLX4 sweep (NEW with prefill at 2k, 16k and 32k; OLD at 2k); quick runs in turn; the 9B
# MLX4 sweep, both binaries; the 27B bf16 16-layer cut, both binaries in turn.
FINAL=${1:?out dir}; BUDGET=${2:-420}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
step 27b-sweep-old 40 "$OLD" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-sweep-old.log" | sed "s/^/27b-sweep-old /"
step 27b-sweep-new 120 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384,32768
grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-sweep-new.log" | sed "s/^/27b-sweep-new /"
quick 27b-old-2 /tmp/s27m4 "$OLD"
quick 27b-new-2 /tmp/s27m4 "$NEW"
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for b in old new; do
  bin=$NEW; [ $b = old ] && bin=$OLD
  step 9b-sweep-$b 40 "$bin" bench --device cuda --model /tmp/s9m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
  grep -E 'copy|decode|streams|round of|prefill' "$OUT/9b-sweep-$b.log" | sed "s/^/9b-sweep-$b /"
done
rm -rf /tmp/s9m4
step synth-27b-bf16-16l 100 "$NEW" synth --shape 27b --format bf16 --layers 16 --out /tmp/s27b16
for b in old new; do
  bin=$NEW; [ $b = old ] && bin=$OLD
  quick 27b-bf16-16l-$b /tmp/s27b16 "$bin"
done
rm -rf /tmp/s27b16
finish "$FINAL"
