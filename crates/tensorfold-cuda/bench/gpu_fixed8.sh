#!/bin/bash
# gpu_fixed8.sh FINAL BUDGET_S NEW OLD: call 81, the final weight stream of this change: the 1-tile loop unrolled by
# its stages in kernels built for exactly 8 warps (`_w8`, groups of 64), every other kernel's loop as on main
# (OLD); and the same kernels with the weights loaded straight into registers (`_w8_r`, TENSORFOLD_CUDA_REGS=1).
# Every check and the tiny fixtures' shas with NEW, and backend-ops again with the register kernels; 27B and 9B
# MLX4 quick benches alternating (NEW also with TENSORFOLD_CUDA_FIXED_WARPS=0, main's kernels by NEW's binary); the
# 27B decode profile with and without the register kernels. The register kernels left main after call 81: their runs
# need bench/logs/call81/registers.patch applied.
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?binary}; OLD=${4:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$NEW"
step check-ops-regs 60 env TENSORFOLD_CUDA_REGS=1 "$NEW" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|cases,|^FAIL" "$OUT/check-ops-regs.log" | sed "s/^/regs /"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  quick q-old-$r /dev/shm/s27m4 "$OLD"
  quick q-new-$r /dev/shm/s27m4 "$NEW"
  quick q-runtime-$r /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_FIXED_WARPS=0
  quick q-regs-$r /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_REGS=1
done
profile_decode prof-regs0 /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_REGS=0
profile_decode prof-regs1 /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_REGS=1
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for r in 1 2; do
  quick n-old-$r /dev/shm/s9m4 "$OLD"
  quick n-new-$r /dev/shm/s9m4 "$NEW"
  quick n-regs-$r /dev/shm/s9m4 "$NEW" TENSORFOLD_CUDA_REGS=1
done
rm -rf /dev/shm/s9m4
finish "$FINAL"
