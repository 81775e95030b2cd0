#!/bin/bash
# gpu_gemm_stages.sh FINAL BUDGET_S BIN: call 93. The prompt kernel with 3 and 4 stages in dynamic shared memory
# (TENSORFOLD_CUDA_GEMM_STAGES) against its static 2 (bf16 and 4-bit g64): backend-ops and tiny-mlx-4bit's suite with
# each; prefill at 2k and 16k of the whole 27B bf16 shape and of 27B MLX4, the variants in turn. First, the probe of
# whether wgmma gives mma.sync's bits (bench/probe/run_wgmma_bits.sh, built here with nvcc).
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step wgmma-bits 60 bash "$(dirname "$0")/probe/run_wgmma_bits.sh"
grep -E "VERDICT|LAYOUT|error" "$OUT/wgmma-bits.log" | head -5 | sed "s/^/wgmma-bits /"
first_check "$BIN"
for d in 3 4; do
  step check-s$d 40 env TENSORFOLD_CUDA_GEMM_STAGES=$d "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
  grep -E "^backend-ops|^FAIL|cases," "$OUT/check-s$d.log" | head | sed "s/^/check-s$d /"
done
pre() {  # pre NAME MODEL LENS ENV...
  local name=$1 model=$2 lens=$3; shift 3
  step "$name" 50 env "$@" "$BIN" bench --device cuda --model "$model" --decode-tokens 16 --repeat 1 --quick --prefill-lens "$lens"
  grep -E 'prefill|decode, 1 stream \|' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
for r in 1 2; do
  for d in 2 3 4; do pre bf16-s$d-$r /dev/shm/s27b 2048,16384 TENSORFOLD_CUDA_GEMM_STAGES=$d; done
done
rm -rf /dev/shm/s27b
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for d in 2 3 4; do pre m4-s$d /dev/shm/s27m4 2048,16384 TENSORFOLD_CUDA_GEMM_STAGES=$d; done
rm -rf /dev/shm/s27m4
finish "$FINAL"
