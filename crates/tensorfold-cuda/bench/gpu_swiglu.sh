#!/bin/bash
# Ran (calls 87, 88) with bench/logs/call87/swiglu_fused.patch applied; the fusion lost and is not on main.
# gpu_swiglu.sh FINAL BUDGET_S BIN OLD: call 87. The gate/up launch finishing the SwiGLU itself (project_swiglu)
# against the same binary with TENSORFOLD_CUDA_SWIGLU_FUSE=0 (two launches, the kernels' new epilogue unused) and
# against OLD (main before the change): 27B MLX4 and 9B MLX4 quick benches alternating, an event profile, then
# backend-ops, every fixture's suite and the tiny shas with the default.
FINAL=${1:?out dir}; BUDGET=${2:-420}; BIN=${3:?binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2 3; do
  quick q-old-$r /dev/shm/s27m4 "$OLD"
  quick q-off-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_SWIGLU_FUSE=0
  quick q-new-$r /dev/shm/s27m4 "$BIN"
done
profile_decode prof-new /dev/shm/s27m4 "$BIN"
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for r in 1 2; do
  quick n-old-$r /dev/shm/s9m4 "$OLD"
  quick n-new-$r /dev/shm/s9m4 "$BIN"
done
rm -rf /dev/shm/s9m4
all_checks "$BIN"
tiny_shas "$BIN"
finish "$FINAL"
