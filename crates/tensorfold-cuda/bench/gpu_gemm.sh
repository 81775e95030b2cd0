#!/bin/bash
# gpu_gemm.sh FINAL BUDGET_S BIN: on the GPU machine, one call: backend-ops and every equality suite with BIN, then
# quick decode, 16-row rounds and prefill at 2k and 16k tokens with the prompt kernel off (TENSORFOLD_CUDA_GEMM=0)
# and on, in the same binary, on the 27B MLX 4-bit shape, the 9B shapes and a 16-layer cut of the 27B bf16 shape;
# a profile (1-row and 16-row rounds, a 2048-row prompt chunk) with it on.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
all_checks "$BIN"
prefills() {  # prefills NAME MODEL MODES
  for g in $3; do
    step "$1-gemm$g" 60 env TENSORFOLD_CUDA_GEMM=$g "$BIN" bench --device cuda --model "$2" --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048,16384
    grep -E 'prefill|decode, 1|round of' "$OUT/$1-gemm$g.log" | sed "s/^/$1 gemm=$g /"
  done
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
prefills 27b-mlx4 /tmp/s27m4 "0 1"
step profile-gemm1 40 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
prefills 9b-mlx4 /tmp/s9m4 "0 1"
rm -rf /tmp/s9m4
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --out /tmp/s9b
prefills 9b-bf16 /tmp/s9b "0 1"
rm -rf /tmp/s9b
step synth-27b-bf16-16l 60 "$BIN" synth --shape 27b --format bf16 --layers 16 --out /tmp/s27b16
prefills 27b-bf16-16layers /tmp/s27b16 "0 1"
rm -rf /tmp/s27b16
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
