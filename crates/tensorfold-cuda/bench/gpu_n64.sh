#!/bin/bash
# gpu_n64.sh FINAL BUDGET_S BIN: (call 122) the wgmma round kernel's 64-column build for rounds of 17 to 64 rows
# (blocks of 64 outputs × 32 rows, a block per part of 32 rows): every check with the default binary, backend-ops
# with the split launches off and with the build off (TENSORFOLD_CUDA_WGMMA_MAX_ROWS=16), then 27B MLX4 rounds of 1
# to 64 rows with the build on and off, alternating, the default sweep and the sweep with it off.
FINAL=${1:?out dir}; BUDGET=${2:-500}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
for v in "WGMMA_SPLIT=0" "WGMMA_MAX_ROWS=16" "WGMMA_MAX_ROWS=32"; do
  n=check-$(echo "$v" | tr '=' '_')
  step "$n" 40 env TENSORFOLD_CUDA_$v "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
  grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/$n.log" | head | sed "s/^/$n /"
  grep -q "0 failed" "$OUT/$n.log" || { finish "$FINAL"; exit 1; }
done
all_checks "$BIN"
tiny_shas "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  for v in "WGMMA_MAX_ROWS=16" "WGMMA_MAX_ROWS=64"; do
    n=rounds-$(echo "$v" | tr '=' '_')-$r
    step "$n" 40 env TENSORFOLD_CUDA_$v "$BIN" bench --device cuda --model /dev/shm/s27m4 --quick --decode-tokens 4 \
      --repeat 1 --prefill-lens 64 --round-rows 1,16,17,24,32,33,48,64
    grep -hE "round of" "$OUT/$n.log" | cut -c1-60 | sed "s/^/$n /"
  done
done
step prof-32 60 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 4 \
  --repeat 1 --quick --prefill-lens 64 --round-rows 32
grep -E "project_wgmma" "$OUT/prof-32.log" | head -8 | sed "s/^/prof-32 /"
step sweep-on 120 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048
grep -E "^\||copy" "$OUT/sweep-on.log" | cut -c1-150 | sed "s/^/sweep-on /"
step sweep-off 120 env TENSORFOLD_CUDA_WGMMA_MAX_ROWS=16 "$BIN" bench --device cuda --model /dev/shm/s27m4 \
  --decode-tokens 32 --repeat 2 --prefill-lens 2048
grep -E "^\||copy" "$OUT/sweep-off.log" | cut -c1-150 | sed "s/^/sweep-off /"
rm -rf /dev/shm/s27m4
finish "$FINAL"
