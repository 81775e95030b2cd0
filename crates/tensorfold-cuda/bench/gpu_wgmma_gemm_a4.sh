#!/bin/bash
# gpu_wgmma_gemm_a4.sh FINAL BUDGET_S BIN: (call 117) the wgmma prompt kernel for MLX 4-bit g64 weights (blocks of 2
# warpgroups by default): backend-ops and tiny-mlx-4bit's quick suite, the prompt checks with 3 warpgroups,
# tiny-mlx-4bit's and tiny-mlx-mixed's full suites with 2, 3 and off; every check and the tiny shas; the 27B MLX4
# quick bench with 2k and 16k prefills off / 2 / 3 warpgroups in turn, twice, and a 2048-row chunk's profile.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step ops-w3 30 env TENSORFOLD_CUDA_WGMMA_GEMM=3 TENSORFOLD_CUDA_OPS=prompt "$BIN" check --device cuda --ops-only
grep -E "^backend-ops|^FAIL" "$OUT/ops-w3.log" | cut -c1-200 | sed "s/^/ops-w3 /"
for f in tiny-mlx-4bit tiny-mlx-mixed; do
  for v in 2 3 0; do
    step full-$f-w$v 40 env TENSORFOLD_CUDA_WGMMA_GEMM=$v "$BIN" check --device cuda --model fixtures/$f
    grep -E "cases,|^oracle|panicked" "$OUT/full-$f-w$v.log" | sed "s/^/full-$f-w$v /"
  done
done
all_checks "$BIN"
tiny_shas "$BIN"
pre() {  # pre NAME ENV...
  local name=$1; shift
  step "$name" 60 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick \
    --prefill-lens 2048,16384
  grep -E 'prefill|decode, 1 stream \||round of' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  pre m4-off-$r TENSORFOLD_CUDA_WGMMA_GEMM=0
  pre m4-w2-$r
  pre m4-w3-$r TENSORFOLD_CUDA_WGMMA_GEMM=3
done
step prof-w2 60 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 4 \
  --repeat 1 --quick --prefill-lens 2048
sed -n '/profile of a 2048-row prompt chunk/,/^launches/p' "$OUT/prof-w2.log" | head -16 | sed "s/^/prof-w2 /"
rm -rf /dev/shm/s27m4
finish "$FINAL"
