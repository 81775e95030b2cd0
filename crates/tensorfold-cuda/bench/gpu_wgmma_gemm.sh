#!/bin/bash
# gpu_wgmma_gemm.sh FINAL BUDGET_S BIN: (call 114) the wgmma prompt kernel for bf16 weights (project_wgmma_gemm.cu):
# backend-ops and tiny-mlx-4bit's quick suite with it (3 warpgroups a block, the default), the prompt checks and the
# bf16 fixture's full suite with 2; the 27B bf16 prefill at 16k with it off (TENSORFOLD_CUDA_WGMMA_GEMM=0) and on in
# turn, the profile of a 2048-row chunk each way; then every check and the tiny shas.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step ops-w2 30 env TENSORFOLD_CUDA_WGMMA_GEMM=2 TENSORFOLD_CUDA_OPS=prompt "$BIN" check --device cuda --ops-only
grep -E "^backend-ops|^FAIL" "$OUT/ops-w2.log" | sed "s/^/ops-w2 /"
for v in 3 2 0; do
  step full-bf16-w$v 40 env TENSORFOLD_CUDA_WGMMA_GEMM=$v "$BIN" check --device cuda --model fixtures/tiny-wrapper-bf16
  grep -E "cases,|^oracle|panicked" "$OUT/full-bf16-w$v.log" | sed "s/^/full-bf16-w$v /"
done
pre() {  # pre NAME LENS ENV...
  local name=$1 lens=$2; shift 2
  step "$name" 60 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 16 --repeat 1 --quick \
    --prefill-lens "$lens"
  grep -E 'prefill|decode, 1 stream \||loaded' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
step synth-27b-bf16 170 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pre bf16-off-1 16384 TENSORFOLD_CUDA_WGMMA_GEMM=0
pre bf16-w3-1 16384
pre bf16-w2-1 16384 TENSORFOLD_CUDA_WGMMA_GEMM=2
pre bf16-off-2 16384 TENSORFOLD_CUDA_WGMMA_GEMM=0
pre bf16-w3-2 16384
for v in 3 0; do
  step prof-w$v 60 env TENSORFOLD_CUDA_WGMMA_GEMM=$v TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda \
    --model /dev/shm/s27b --decode-tokens 4 --repeat 1 --quick --prefill-lens 2048
  sed -n '/profile of a 2048-row prompt chunk/,/^launches/p' "$OUT/prof-w$v.log" | head -16 | sed "s/^/prof-w$v /"
done
rm -rf /dev/shm/s27b
all_checks "$BIN"
tiny_shas "$BIN"
finish "$FINAL"
