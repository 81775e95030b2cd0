#!/bin/bash
# gpu_wgmma16.sh FINAL BUDGET_S BIN: (calls 97-100) rounds of 5 to 16 rows of 4-bit g64 weights on
# wgmma (TENSORFOLD_CUDA_WGMMA=1, which builds the module for sm_90a) against the decode kernels: backend-ops and
# tiny-mlx-4bit's suite with it on (the "rows alone / among others" checks compare it with the 1-row kernels bit for
# bit); 27B MLX4 quick benches (token shas, 1- and 16-row rounds) in turn; the rounds sweep each way. Needs the kernel
# cache filled for both arches: `precompile 13000 sm_90` and `precompile 13000 sm_90a`.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step check-wg 60 env TENSORFOLD_CUDA_WGMMA=1 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/check-wg.log" | head | sed "s/^/check-wg /"
grep -q "0 failed" "$OUT/check-wg.log" || { finish "$FINAL"; exit 1; }
step check-wg-all 60 env TENSORFOLD_CUDA_WGMMA=1 TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS=0 "$BIN" check --device cuda --ops \
  --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/check-wg-all.log" | head | sed "s/^/check-wg-all /"
grep -q "0 failed" "$OUT/check-wg-all.log" || { finish "$FINAL"; exit 1; }
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  quick q-main-$r /dev/shm/s27m4 "$BIN"
  quick q-wg-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_WGMMA=1
done
step rounds-main 60 "$BIN" bench --device cuda --model /dev/shm/s27m4 --rounds --repeat 1
step rounds-wg 60 env TENSORFOLD_CUDA_WGMMA=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 --rounds --repeat 1
step rounds-wg-nosplit 60 env TENSORFOLD_CUDA_WGMMA=1 TENSORFOLD_CUDA_WGMMA_SPLIT=0 "$BIN" bench --device cuda \
  --model /dev/shm/s27m4 --rounds --repeat 1
grep -hE "round of" "$OUT"/rounds-*.log | cut -c1-90
step prof-wg 60 env TENSORFOLD_CUDA_WGMMA=1 TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 \
  --decode-tokens 16 --repeat 1 --quick --prefill-lens 64
grep -E "project_wgmma|project_stream" "$OUT/prof-wg.log" | head -12 | sed "s/^/prof-wg /"
step prof-wg-nosplit 60 env TENSORFOLD_CUDA_WGMMA=1 TENSORFOLD_CUDA_WGMMA_SPLIT=0 TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench \
  --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 64
grep -E "project_wgmma" "$OUT/prof-wg-nosplit.log" | head -6 | sed "s/^/prof-wg-nosplit /"
rm -rf /dev/shm/s27m4
finish "$FINAL"
