#!/bin/bash
# gpu_wgmma_gemm2.sh FINAL BUDGET_S BIN: (call 115) call 114's wgmma prompt kernel gave other bits than the decode
# kernels on the H200 (the emulator agreed with them): the prompt checks with each build (TENSORFOLD_CUDA_WGMMA_GEMM_MODE
# 0: wgmmas running across groups, 1: each group waited for, 2: the last group's A registers kept alive, 3: as 1 with
# the shuffle's +0; WGMMA_GEMM=2: two warpgroups), then the 27B bf16 16k prefill with it off, mode 0 and mode 1.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
for m in 0 1 2 3; do
  step ops-m$m 30 env TENSORFOLD_CUDA_WGMMA_GEMM_MODE=$m TENSORFOLD_CUDA_OPS=prompt "$BIN" check --device cuda --ops-only
  grep -E "^backend-ops|^FAIL" "$OUT/ops-m$m.log" | cut -c1-200 | sed "s/^/ops-m$m /"
done
step ops-w2 30 env TENSORFOLD_CUDA_WGMMA_GEMM=2 TENSORFOLD_CUDA_OPS=prompt "$BIN" check --device cuda --ops-only
grep -E "^backend-ops|^FAIL" "$OUT/ops-w2.log" | cut -c1-200 | sed "s/^/ops-w2 /"
pre() {  # pre NAME LENS ENV...
  local name=$1 lens=$2; shift 2
  step "$name" 60 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 8 --repeat 1 --quick \
    --prefill-lens "$lens"
  grep -E 'prefill|decode, 1 stream \||loaded' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
step synth-27b-bf16 170 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pre bf16-m0 16384
pre bf16-off 16384 TENSORFOLD_CUDA_WGMMA_GEMM=0
pre bf16-m1 16384 TENSORFOLD_CUDA_WGMMA_GEMM_MODE=1
step prof-m0 60 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 4 \
  --repeat 1 --quick --prefill-lens 2048
sed -n '/profile of a 2048-row prompt chunk/,/^launches/p' "$OUT/prof-m0.log" | head -16 | sed "s/^/prof-m0 /"
rm -rf /dev/shm/s27b
finish "$FINAL"
