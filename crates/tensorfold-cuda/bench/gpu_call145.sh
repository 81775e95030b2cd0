#!/bin/bash
# gpu_call145.sh FINAL BUDGET_S NEW OLD: (call 145) the DeltaNet state a half-warp a row (NEW: 8 key dims a lane, a
# dot product an 8-fma chain and four shuffles) against a warp a row (OLD, fc6102c: 4 dims a lane, five shuffles):
# every check and the tiny shas with NEW (the GPU's recurrence bits change on every path alike), then 27B MLX4 and
# 27B bf16 quick benches (decode, rounds of 1 and 16 rows, 2k prefill) alternating twice, a 16k prefill each, and
# NEW's event profile of 27B MLX4 rounds.
FINAL=${1:?out dir}; BUDGET=${2:-480}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$NEW"
pre() {  # pre NAME BIN MODEL: a 16k prefill
  step "$1" 60 "$2" bench --device cuda --model "$3" --decode-tokens 8 --repeat 1 --quick --prefill-lens 16384
  grep -E 'prefill|decode, 1 stream \|' "$OUT/$1.log" | cut -c1-110 | sed "s/^/$1 /"
}
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
alternate m4 $M 2 "$OLD" "$NEW"
pre m4-16k-old "$OLD" $M
pre m4-16k-new "$NEW" $M
profile_decode prof-m4-new $M "$NEW"
sed -n '/profile of 4 rounds of 16 rows/,/^launches/p' "$OUT/prof-m4-new.log" | grep -E "dn_recur|launches" | sed "s/^/prof-m4-new /"
rm -rf $M
B=/dev/shm/s27b
step synth-27b-bf16 150 "$NEW" synth --shape 27b --format bf16 --threads 16 --out $B
alternate bf $B 2 "$OLD" "$NEW"
pre bf-16k-old "$OLD" $B
pre bf-16k-new "$NEW" $B
rm -rf $B
finish "$FINAL"
