#!/bin/bash
# gpu_memcheck121.sh FINAL BUDGET_S BIN: (call 121) compute-sanitizer's memcheck with the wgmma prompt kernels on
# (their suites' 70-row prompt chunks take them): tiny-mlx-4bit's and tiny-wrapper-bf16's full suites.
FINAL=${1:?out dir}; BUDGET=${2:-240}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for f in tiny-mlx-4bit tiny-wrapper-bf16; do
  step memcheck-$f 80 "$cs" --print-limit 10 "$BIN" check --device cuda --model fixtures/$f
done
grep -HE "ERROR SUMMARY|cases,|Invalid|out of bounds" "$OUT"/memcheck-*.log | head -20 | sed "s|^$OUT/||"
finish "$FINAL"
