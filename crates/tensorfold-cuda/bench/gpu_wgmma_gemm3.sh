#!/bin/bash
# gpu_wgmma_gemm3.sh FINAL BUDGET_S BIN: (call 116) the wgmma prompt kernel for bf16 weights with each group's wgmmas
# waited for before the next group's A registers are loaded (call 115): backend-ops and tiny-mlx-4bit's quick suite,
# the prompt checks with 2 warpgroups a block, the bf16 fixture's full suite with 3, 2 and off; the 27B bf16
# prefill at 2k and 16k off / 3 / 2 warpgroups in turn, twice, and a 2048-row chunk's profile; every check and the
# tiny shas; the 27B MLX4 quick bench (its rounds read the B tiles in their new layout).
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step ops-w2 30 env TENSORFOLD_CUDA_WGMMA_GEMM=2 TENSORFOLD_CUDA_OPS=prompt "$BIN" check --device cuda --ops-only
grep -E "^backend-ops|^FAIL" "$OUT/ops-w2.log" | cut -c1-200 | sed "s/^/ops-w2 /"
for v in 3 2 0; do
  step full-bf16-w$v 40 env TENSORFOLD_CUDA_WGMMA_GEMM=$v "$BIN" check --device cuda --model fixtures/tiny-wrapper-bf16
  grep -E "cases,|^oracle|panicked" "$OUT/full-bf16-w$v.log" | sed "s/^/full-bf16-w$v /"
done
pre() {  # pre NAME ENV...
  local name=$1; shift
  step "$name" 60 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 8 --repeat 1 --quick \
    --prefill-lens 2048,16384
  grep -E 'prefill|decode, 1 stream \|' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
step synth-27b-bf16 170 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
for r in 1 2; do
  pre bf16-off-$r TENSORFOLD_CUDA_WGMMA_GEMM=0
  pre bf16-w3-$r
  pre bf16-w2-$r TENSORFOLD_CUDA_WGMMA_GEMM=2
done
step prof-w3 60 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 4 \
  --repeat 1 --quick --prefill-lens 2048
sed -n '/profile of a 2048-row prompt chunk/,/^launches/p' "$OUT/prof-w3.log" | head -16 | sed "s/^/prof-w3 /"
rm -rf /dev/shm/s27b
all_checks "$BIN"
tiny_shas "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q27m4 /dev/shm/s27m4 "$BIN"
rm -rf /dev/shm/s27m4
finish "$FINAL"
