#!/bin/bash
# gpu_wgmma_default.sh FINAL BUDGET_S BIN: (call 106) the wgmma kernel on by default on Hopper for rounds of 9-16
# rows, with shared launches and B tiles written by x's producers: every check with the default binary, the
# wgmma kernel's bits with rounds of 5 rows and more on it (the 16-column kernel) and with every matrix on it, then
# 27B MLX4 quick benches and rounds sweeps with it off (WGMMA=0), on (default) and from 5 rows, in turn.
FINAL=${1:?out dir}; BUDGET=${2:-500}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
for v in "MIN_ROWS=5" "MIN_ROWS=5 TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS=0" "WGMMA=0"; do
  n=check-$(echo "$v" | tr ' =' '__' | cut -c1-40)
  step "$n" 60 env TENSORFOLD_CUDA_$v "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
  grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/$n.log" | head | sed "s/^/$n /"
  grep -q "0 failed" "$OUT/$n.log" || { finish "$FINAL"; exit 1; }
done
all_checks "$BIN"
tiny_shas "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  quick q-off-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_WGMMA=0
  quick q-on-$r /dev/shm/s27m4 "$BIN"
  quick q-r5-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5
done
for v in "WGMMA=0" "WGMMA=1" "WGMMA_MIN_ROWS=5"; do
  n=rounds-$(echo "$v" | tr '=' '_')
  step "$n" 40 env TENSORFOLD_CUDA_$v "$BIN" bench --device cuda --model /dev/shm/s27m4 --rounds --repeat 1
  grep -hE "round of" "$OUT/$n.log" | cut -c1-60 | sed "s/^/$n /"
done
step prof-r5 60 env TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5 TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda \
  --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 64
grep -E "project_wgmma" "$OUT/prof-r5.log" | head -14 | sed "s/^/prof-r5 /"
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 60 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for v in "WGMMA=0" "WGMMA=1" "WGMMA_MIN_ROWS=5"; do
  n=rounds9-$(echo "$v" | tr '=' '_')
  step "$n" 30 env TENSORFOLD_CUDA_$v "$BIN" bench --device cuda --model /dev/shm/s9m4 --rounds --repeat 1
  grep -hE "round of|decode, 1 stream \|" "$OUT/$n.log" | cut -c1-60 | sed "s/^/$n /"
done
rm -rf /dev/shm/s9m4
finish "$FINAL"
