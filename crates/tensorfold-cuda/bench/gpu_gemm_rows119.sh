#!/bin/bash
# gpu_gemm_rows119.sh FINAL BUDGET_S BIN: (call 119) with the wgmma prompt kernel, do rounds of 17 to 64 rows gain from
# it (TENSORFOLD_CUDA_GEMM_ROWS=17 or 33; default 65: prompt chunks only)? The bits are the same either way: the
# 4-bit fixtures' full suites with 17, then the 27B MLX4 bench (decode, rounds of 1 to 64 rows, streams, a 2k
# prefill) with the threshold at 65, 17 and 33 in turn.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
for f in tiny-mlx-4bit tiny-mlx-mixed tiny-wrapper-bf16; do
  step full-$f-r17 40 env TENSORFOLD_CUDA_GEMM_ROWS=17 "$BIN" check --device cuda --model fixtures/$f
  grep -E "cases,|^oracle|panicked" "$OUT/full-$f-r17.log" | sed "s/^/full-$f-r17 /"
done
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
rows() {  # rows NAME ENV...
  local name=$1; shift
  step "$name" 70 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 \
    --prefill-lens 2048 --round-rows 1,16,17,24,32,48,64
  grep -E 'round of|streams \||decode, 1 stream \||prefill' "$OUT/$name.log" | cut -c1-100 | sed "s/^/$name /"
}
rows r65-1
rows r17-1 TENSORFOLD_CUDA_GEMM_ROWS=17
rows r33-1 TENSORFOLD_CUDA_GEMM_ROWS=33
rows r65-2
rows r17-2 TENSORFOLD_CUDA_GEMM_ROWS=17
rm -rf /dev/shm/s27m4
finish "$FINAL"
