#!/bin/bash
# Ran (calls 87, 88) with bench/logs/call87/swiglu_fused.patch applied; the fusion lost and is not on main.
# gpu_swiglu2.sh FINAL BUDGET_S BIN OLD: call 88. Cheaper signals for the gate/up launch that finishes the SwiGLU:
# one acq_rel atomic a block (the default build) and a fixed finisher that waits while the others only count
# (-DTF_SWIGLU_SPIN), against OLD (main) and the same binary with TENSORFOLD_CUDA_SWIGLU_FUSE=0; 27B MLX4 quick
# benches alternating, event profiles, backend-ops and tiny-mlx-4bit's suite with each build.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step check-spin 40 env TENSORFOLD_CUDA_DEFINES="-DTF_SWIGLU_SPIN" "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases," "$OUT/check-spin.log" | head | sed "s/^/check-spin /"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2 3; do
  quick q-old-$r /dev/shm/s27m4 "$OLD"
  quick q-new-$r /dev/shm/s27m4 "$BIN"
  quick q-spin-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DEFINES="-DTF_SWIGLU_SPIN"
  [ $r = 1 ] && quick q-off-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_SWIGLU_FUSE=0
done
profile_decode prof-new /dev/shm/s27m4 "$BIN"
profile_decode prof-spin /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DEFINES="-DTF_SWIGLU_SPIN"
rm -rf /dev/shm/s27m4
finish "$FINAL"
