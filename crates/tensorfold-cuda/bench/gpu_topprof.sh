#!/bin/bash
# gpu_topprof.sh FINAL BUDGET_S ONE THREE: call 39. Where a cut draw's time goes: the profile of 8 cut and 8
# penalised draws (TENSORFOLD_CUDA_PROFILE=1) with row_top in one block a row (ONE, the kept kernel) and in three
# kernels (THREE, commit 85da13c's, reverted), on the 9B MLX 4-bit shape.
FINAL=${1:?out dir}; BUDGET=${2:-200}; ONE=${3:?binary}; THREE=${4:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step synth-9b-mlx4 40 "$ONE" synth --shape 9b --format mlx4 --out /tmp/s9m4
for b in one three; do
  bin=$ONE; [ $b = three ] && bin=$THREE
  step profile-$b 60 env TENSORFOLD_CUDA_PROFILE=1 "$bin" bench --device cuda --model /tmp/s9m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048
  sed -n '/profile of 8 cut draws/,/^host:/p' "$OUT/profile-$b.log" | sed "s/^/$b /"
  grep -E "decode, 1" "$OUT/profile-$b.log" | sed "s/^/$b /"
done
rm -rf /tmp/s9m4
finish "$FINAL"
