#!/bin/bash
# gpu_final126.sh FINAL BUDGET_S BIN: (call 126) the final binary of this session: every check; the equality suites
# with every matrix on the wgmma round kernels (small fixtures: TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS=0, from 5 rows);
# compute-sanitizer's memcheck on those; then the 27B bf16 sweep with the bf16 round kernel's final stages.
FINAL=${1:?out dir}; BUDGET=${2:-500}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
ALL="TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS=0 TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5"
for f in tiny-wrapper-bf16 tiny-mlx-4bit; do
  step full-all-$f 40 env $ALL "$BIN" check --device cuda --model fixtures/$f
  grep -E "^oracle|cases,|^FAIL|^DIFF" "$OUT/full-all-$f.log" | sed "s/^/full-all-$f /"
done
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for f in tiny-wrapper-bf16 tiny-mlx-4bit; do
  step memcheck-all-$f 100 env $ALL "$cs" --print-limit 10 "$BIN" check --device cuda --model fixtures/$f
  grep -E "ERROR SUMMARY|cases," "$OUT/memcheck-all-$f.log" | sed "s/^/memcheck-all-$f /"
done
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
step sweep-bf16 120 "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 32 --repeat 2 --prefill-lens 2048
grep -E "^\||copy" "$OUT/sweep-bf16.log" | cut -c1-130 | sed "s/^/sweep-bf16 /"
step rounds-bf16 40 "$BIN" bench --device cuda --model /dev/shm/s27b --quick --decode-tokens 4 --repeat 1 \
  --prefill-lens 64 --round-rows 1,9,10,12,16,17,32,64
grep -hE "round of" "$OUT/rounds-bf16.log" | cut -c1-60 | sed "s/^/rounds-bf16 /"
rm -rf /dev/shm/s27b
finish "$FINAL"
