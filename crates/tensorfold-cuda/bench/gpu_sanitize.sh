#!/bin/bash
# gpu_sanitize.sh FINAL BUDGET_S BIN: (call 108) compute-sanitizer's memcheck on the full tiny-mlx-4bit suite and the
# built-in model's quick suite (call 107 found dn_tail_keep writing a freed conv tail), then every check, and the
# 27B MLX4 quick benches and rounds with the wgmma kernel off and on.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step san-4bit 90 "$CS" --print-limit 10 "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
grep -E "ERROR SUMMARY|Invalid|cases,|panicked" "$OUT/san-4bit.log" | head -8 | sed "s/^/san-4bit /"
step san-coder 60 "$CS" --print-limit 10 "$BIN" check --device cuda --quick --model models/tensorfold-coder-tiny
grep -E "ERROR SUMMARY|Invalid|cases,|panicked" "$OUT/san-coder.log" | head -8 | sed "s/^/san-coder /"
full_check "$BIN"
step check-r5 40 env TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5 "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/check-r5.log" | head -4 | sed "s/^/check-r5 /"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q-off /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_WGMMA=0
quick q-on /dev/shm/s27m4 "$BIN"
for v in "WGMMA=0" "WGMMA=1"; do
  n=rounds-$(echo "$v" | tr '=' '_')
  step "$n" 40 env TENSORFOLD_CUDA_$v "$BIN" bench --device cuda --model /dev/shm/s27m4 --rounds --repeat 1
  grep -hE "round of|streams" "$OUT/$n.log" | cut -c1-70 | sed "s/^/$n /"
done
rm -rf /dev/shm/s27m4
finish "$FINAL"
