#!/bin/bash
# gpu_top2.sh FINAL BUDGET_S OLD NEW: call 40. backend-ops and one fixture's full suite with NEW (row_top with 8
# loads in flight a thread, penalised rows copied by device copies); the profile of 8 cut and 8 penalised draws with
# OLD (call 39's kept binary) and NEW on the 9B MLX 4-bit shape; then OLD and NEW in turn on the 9B and 27B shapes.
FINAL=${1:?out dir}; BUDGET=${2:-400}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step check-ops 90 "$NEW" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
step full-tiny-mlx-4bit 40 "$NEW" check --device cuda --model fixtures/tiny-mlx-4bit
grep -hE "^backend-ops|^oracle|cases,|^FAIL|panicked|row_top|cut draws|keyed draws|penalised" "$OUT"/check-*.log "$OUT"/full-*.log
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for b in old new; do
  bin=$OLD; [ $b = new ] && bin=$NEW
  step profile-$b 60 env TENSORFOLD_CUDA_PROFILE=1 "$bin" bench --device cuda --model /tmp/s9m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048
  sed -n '/profile of 8 cut draws/,/^host:/p' "$OUT/profile-$b.log" | sed "s/^/$b /"
done
for i in 1 2; do
  quick 9b-old-$i /tmp/s9m4 "$OLD"
  quick 9b-new-$i /tmp/s9m4 "$NEW"
done
rm -rf /tmp/s9m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-old-$i /tmp/s27m4 "$OLD"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
done
rm -rf /tmp/s27m4
finish "$FINAL"
