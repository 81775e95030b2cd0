#!/bin/bash
# gpu_attention.sh NEW OLD FINAL BUDGET_S: on the GPU machine, one call after the chunked attention kernels:
# backend-ops and equality checks with NEW, then NEW and OLD (the previous attention kernel, same bench code)
# alternated on the 27B MLX 4-bit shape: quick decode and 16-row rounds, then prefill and decode at 2k and 16k of
# context, a profile, and the full equality suite on every fixture while the budget lasts.
NEW=${1:?new binary}; OLD=${2:?old binary}; FINAL=${3:?out dir}; BUDGET=${4:-420}
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
step check-ops 90 "$NEW" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
step check-mlx4 30 "$NEW" check --device cuda --quick --model fixtures/tiny-mlx-4bit
step check-coder 30 "$NEW" check --device cuda --quick --model models/tensorfold-coder-tiny
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^DIFF|^error|panicked" "$OUT"/check-*.log | head -20
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  for b in old new; do
    bin=$NEW; [ $b = old ] && bin=$OLD
    step quick-$b-$i 25 "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 2 --quick
    echo "$b $i: $(grep -m1 'decode, 1 stream' "$OUT/quick-$b-$i.log") $(grep 'round of 16' "$OUT/quick-$b-$i.log")"
  done
done
for b in new old; do
  bin=$NEW; [ $b = old ] && bin=$OLD
  step long-$b 90 "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384
  grep -E 'prefill|decode at|streams|round of' "$OUT/long-$b.log" | sed "s/^/$b /"
done
step profile-new 30 env TENSORFOLD_CUDA_PROFILE=1 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick
grep -E 'attn|GPU busy' "$OUT/profile-new.log"
for f in tiny-wrapper-bf16 tiny-mlx-4bit tiny-mlx-mixed tiny-flat-f32-sharded tiny-flat-f16-notok; do
  step full-$f 40 "$NEW" check --device cuda --model fixtures/$f
  echo "full $f: $(grep -hE 'cases,|^FAIL|^error' "$OUT/full-$f.log" | head -3)"
done
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
