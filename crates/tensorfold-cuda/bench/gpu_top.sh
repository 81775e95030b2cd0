#!/bin/bash
# gpu_top.sh FINAL BUDGET_S OLD NEW: call 38. backend-ops and one fixture's full suite with NEW (row_top in three
# kernels: the row's best key and its softmax total's lanes over 8 blocks a row, one atomic per warp and bin in the
# radix select); then OLD (call 37's binary, one block a row) and NEW in turn on the 27B and 9B MLX 4-bit shapes.
FINAL=${1:?out dir}; BUDGET=${2:-300}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step check-ops 90 "$NEW" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
step full-tiny-mlx-4bit 40 "$NEW" check --device cuda --model fixtures/tiny-mlx-4bit
grep -hE "^backend-ops|^oracle|cases,|^FAIL|panicked|row_top|cut draws|keyed draws|penalised" "$OUT"/check-*.log "$OUT"/full-*.log
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-old-$i /tmp/s27m4 "$OLD"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  quick 9b-old-$i /tmp/s9m4 "$OLD"
  quick 9b-new-$i /tmp/s9m4 "$NEW"
done
rm -rf /tmp/s9m4
finish "$FINAL"
