#!/bin/bash
# gpu_wgmma_quick.sh FINAL BUDGET_S BIN: (calls 100-) the shorter loop of gpu_wgmma16.sh for tuning the wgmma kernel:
# its bits (backend-ops and tiny-mlx-4bit's suite with it on, for the big matrices and for all), then 27B MLX4
# quick benches and the rounds sweep each way, and a profile of its launches.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
for min in 1024 0; do
  step check-wg-$min 60 env TENSORFOLD_CUDA_WGMMA=1 TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS=$min "$BIN" check --device cuda \
    --ops --quick --model fixtures/tiny-mlx-4bit
  grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/check-wg-$min.log" | head | sed "s/^/check-wg-$min /"
  grep -q "0 failed" "$OUT/check-wg-$min.log" || { finish "$FINAL"; exit 1; }
done
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q-main /dev/shm/s27m4 "$BIN"
quick q-wg /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_WGMMA=1
step rounds-main 60 "$BIN" bench --device cuda --model /dev/shm/s27m4 --rounds --repeat 1
step rounds-wg 60 env TENSORFOLD_CUDA_WGMMA=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 --rounds --repeat 1
grep -hE "round of" "$OUT"/rounds-*.log | cut -c1-90
step prof-wg 60 env TENSORFOLD_CUDA_WGMMA=1 TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 \
  --decode-tokens 16 --repeat 1 --quick --prefill-lens 64
grep -E "project_wgmma|project_stream|wgmma_b" "$OUT/prof-wg.log" | head -14 | sed "s/^/prof-wg /"
rm -rf /dev/shm/s27m4
finish "$FINAL"
