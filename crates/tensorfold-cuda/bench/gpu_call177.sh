#!/bin/bash
# gpu_call177.sh FINAL BUDGET_S BIN OLD: the bf16 decode kernel's early loads kept to its 1-row-tile build, against
# call 176's binary (OLD), whose 2-row-tile build took 71 registers (one 16-warp block an SM) and 8-row bf16 rounds
# 16% slower. Every function of BIN's cubin has the SASS of call 176's or of call 171's main, both fully checked;
# backend-ops and the bf16 fixture's full suite again here, then 9B bf16 rounds of 1 to 64 rows, alternating.
FINAL=${1:?out dir}; BUDGET=${2:-150}; BIN=${3:?binary}; OLD=${4:?call 176 binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step full-tiny-wrapper-bf16 30 "$BIN" check --device cuda --model fixtures/tiny-wrapper-bf16
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^error|panicked" "$OUT"/full-*.log
B=/dev/shm/s9b
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out $B
for r in 1 2; do
  sweep "new-$r" $B 2048 "$BIN"
  sweep "old-$r" $B 2048 "$OLD"
done
rm -rf $B
finish "$FINAL"
