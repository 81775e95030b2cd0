#!/bin/bash
# gpu_occupancy.sh FINAL BUDGET_S NEW PREV: call 33. Every check with NEW (attn_chunk and dn_conv held to the
# register counts of 0c4e1bb by launch bounds); the 27B MLX 4-bit prefill of 16k tokens, PREV (call 32's binary)
# and NEW in turn; quick runs of both; a profile of NEW with the host's time in launch calls and allocations; the
# 27B bf16 16-layer cut's prefill at 2k and 16k (the issue's prefill target).
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?new binary}; PREV=${4:?previous binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
prefill() {  # prefill NAME BIN
  step "$1" 60 "$2" bench --device cuda --model /tmp/s27m4 --decode-tokens 4 --repeat 1 --quick --prefill-lens 16384
  grep -E 'prefill' "$OUT/$1.log" | sed "s/^/$1 /"
}
prefill 16k-prev "$PREV"
prefill 16k-new "$NEW"
for i in 1 2; do
  quick 27b-prev-$i /tmp/s27m4 "$PREV"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
done
step profile-new 60 env TENSORFOLD_CUDA_PROFILE=1 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048
grep -E "^profile|^launches|^host:" "$OUT/profile-new.log"
rm -rf /tmp/s27m4
step synth-27b-bf16-16l 90 "$NEW" synth --shape 27b --format bf16 --layers 16 --out /tmp/s27b16
step 27b-bf16-16l 90 "$NEW" bench --device cuda --model /tmp/s27b16 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048,16384
grep -E 'prefill|decode, 1|round of' "$OUT/27b-bf16-16l.log" | sed "s/^/27b-bf16-16l /"
rm -rf /tmp/s27b16
finish "$FINAL"
