#!/bin/bash
# gpu_sanitize2.sh FINAL BUDGET_S BIN: (call 109) compute-sanitizer's memcheck on the built-in model's quick suite
# (call 108 found embed_dense_f32 reading a freed embedding table) and other fixtures', then every check.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for m in models/tensorfold-coder-tiny fixtures/tiny-wrapper-bf16 fixtures/tiny-mlx-mixed fixtures/tiny-flat-f16-notok; do
  n=san-$(basename $m)
  step "$n" 80 "$CS" --print-limit 10 "$BIN" check --device cuda --quick --model $m
  grep -E "ERROR SUMMARY|Invalid|cases,|panicked" "$OUT/$n.log" | head -4 | sed "s/^/$n /"
done
full_check "$BIN"
finish "$FINAL"
