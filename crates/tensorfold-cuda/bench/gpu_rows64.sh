#!/bin/bash
# gpu_rows64.sh FINAL BUDGET_S OLD NEW VAR: call 56. Why rounds of 32 and 64 rows got 3-4% slower (call 55): NEW
# (the final binary), NEW with 16 warps for matrices of up to 1024 outputs (TENSORFOLD_CUDA_MMA_WIDE=1024), VAR
# (NEW with the 8-tile kernel left to ptxas: 134 registers, no spill, 1 block an SM) and OLD (21dc682), 27B MLX4.
FINAL=${1:?out dir}; BUDGET=${2:-200}; OLD=${3:?old binary}; NEW=${4:?new binary}; VAR=${5:?variant binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
run() {
  step 27b-$1 25 env $3 "$2" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 64
  grep -E 'decode, 1 stream \||round of|streams' "$OUT/27b-$1.log" | sed "s/^/27b-$1 /"
}
run new "$NEW" X=1
run wide "$NEW" TENSORFOLD_CUDA_MMA_WIDE=1024
run var "$VAR" X=1
run old "$OLD" X=1
finish "$FINAL"
