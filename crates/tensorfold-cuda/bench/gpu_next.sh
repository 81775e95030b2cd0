#!/bin/bash
# gpu_next.sh FINAL BUDGET_S NEW OLD: the open questions of calls 25-30, in one call. Backend-ops and every equality
# suite with NEW; then on the 27B MLX 4-bit shape:
# - prefill of 2k and 16k tokens with OLD, NEW and NEW under TENSORFOLD_CUDA_PDL=0, in turn (call 29 measured 868
#   tok/s at 16k where call 24, another run, had 1,092);
# - quick runs of NEW with one output tile a block at every row count (TENSORFOLD_CUDA_MMA_STAGES=4) against the
#   default, with a profile of each, to choose the tile count per matrix at 16 rows (the 5120-output matrices run
#   160 blocks of two tiles there, at under 10 warps an SM).
FINAL=${1:?out dir}; BUDGET=${2:-540}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
prefill() {  # prefill NAME BIN [ENV...]
  local name=$1 bin=$2; shift 2
  step "$name" 60 env "$@" "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048,16384
  grep -E 'prefill|decode at' "$OUT/$name.log" | sed "s/^/$name /"
}
prefill 16k-old "$OLD"
prefill 16k-new "$NEW"
prefill 16k-nopdl "$NEW" TENSORFOLD_CUDA_PDL=0
for i in 1 2; do
  quick 27b-default-$i /tmp/s27m4 "$NEW"
  quick 27b-one-tile-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_STAGES=4
done
step profile-default 40 env TENSORFOLD_CUDA_PROFILE=1 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048
step profile-one-tile 40 env TENSORFOLD_CUDA_PROFILE=1 TENSORFOLD_CUDA_MMA_STAGES=4 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048
rm -rf /tmp/s27m4
finish "$FINAL"
