#!/bin/bash
# gpu_call163.sh FINAL BUDGET_S BIN: the final kernels. The wgmma kernels (4-bit rounds and prompt chunks) start each
# group's sum with no C by default, the mma.sync kernels keep their C of +0 (no decode cost); call 161 found the
# tensor cores' zero sums +0 either way. Every check (backend-ops' zero-sign rows compare the two starts on signed
# zeros), then quick benches against TF_ZEROED_GROUPS (the kernels as they were) in turn, 27B and 9B MLX4, and 27B
# MLX4 16k prefills.
FINAL=${1:?out dir}; BUDGET=${2:-280}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
Z="TENSORFOLD_CUDA_DEFINES=-DTF_ZEROED_GROUPS"
grep -h "zero-sign rows: the decode" "$OUT"/check-ops.log
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m4-new-$r $M "$BIN"
  quick m4-zeroed-$r $M "$BIN" $Z
done
at_context new-16k $M 16384
at_context zeroed-16k $M 16384 $Z
rm -rf $M
M=/dev/shm/s9m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m9-new-$r $M "$BIN"
  quick m9-zeroed-$r $M "$BIN" $Z
done
rm -rf $M
finish "$FINAL"
