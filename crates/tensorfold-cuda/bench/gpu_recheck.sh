#!/bin/bash
# gpu_recheck.sh BIN FINAL BUDGET_S: on the GPU machine, a short call after a change meant to keep every bit:
# backend-ops and equality checks, then the 27B MLX 4-bit token_sha with the fused kernels on and off.
BIN=${1:?binary}; FINAL=${2:?out dir}; BUDGET=${3:-200}
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
step check-ops 60 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
step check-mlx4 30 "$BIN" check --device cuda --quick --model fixtures/tiny-mlx-4bit
step check-coder 30 "$BIN" check --device cuda --quick --model models/tensorfold-coder-tiny
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^DIFF|^error|panicked" "$OUT"/check-*.log | head -20
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
for v in "default:" "nofuse:TENSORFOLD_CUDA_FUSE=0"; do
  label=${v%%:*}; envs=${v#*:}
  step quick-$label 20 env $envs "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 2 --quick
  echo "$label: $(grep -m1 'decode, 1 stream' "$OUT/quick-$label.log")"
done
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
