#!/bin/bash
# Ran (call 90) with bench/logs/call90/s8_w8.patch applied; 8 stages lost and are not on main.
# gpu_s8.sh FINAL BUDGET_S BIN: call 90. The 8-warp weight stream with 8 stages a warp (7 groups in flight, copied
# before the previous kernel ends: TENSORFOLD_CUDA_MMA_STAGES=8 now takes the fixed-warp `_s8_m1_w8` kernels) against
# the default 4: 27B MLX4 and 9B MLX4 quick benches alternating, event profiles, then backend-ops and
# tiny-mlx-4bit's suite under each.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step check-s8 40 env TENSORFOLD_CUDA_MMA_STAGES=8 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases," "$OUT/check-s8.log" | head | sed "s/^/check-s8 /"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2 3; do
  quick q-s4-$r /dev/shm/s27m4 "$BIN"
  quick q-s8-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_MMA_STAGES=8
done
profile_decode prof-s4 /dev/shm/s27m4 "$BIN"
profile_decode prof-s8 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_MMA_STAGES=8
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for r in 1 2; do
  quick n-s4-$r /dev/shm/s9m4 "$BIN"
  quick n-s8-$r /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_MMA_STAGES=8
done
rm -rf /dev/shm/s9m4
finish "$FINAL"
