#!/bin/bash
# gpu_unroll.sh FINAL BUDGET_S NEW OLD: call 79, project_stream's loop unrolled by its stage count (stage addresses
# known at compile time, pointers stepped by unsigned counts, 64 registers asked for; `_w8` kernels with 8 warps
# fixed, and without them: TENSORFOLD_CUDA_FIXED_WARPS=0) against main's loop (OLD):
# every check and the tiny fixtures' shas with NEW; 27B MLX4 quick benches alternating; the decode profile each
# way; Nsight Compute on the 1-row gate/up launch each way; 9B MLX4 quick benches each way.
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?binary}; OLD=${4:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q-old-1 /dev/shm/s27m4 "$OLD"
quick q-new-1 /dev/shm/s27m4 "$NEW"
quick q-old-2 /dev/shm/s27m4 "$OLD"
quick q-new-2 /dev/shm/s27m4 "$NEW"
quick q-runtime-warps /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_FIXED_WARPS=0
profile_decode prof-old /dev/shm/s27m4 "$OLD"
profile_decode prof-new /dev/shm/s27m4 "$NEW"
ncu_launches ncu-old project_stream_a4_g2_bf16_nt1_s4_m1 40 1 "$OLD" /dev/shm/s27m4 SpeedOfLight WarpStateStats \
  SchedulerStats Occupancy
ncu_launches ncu-new project_stream_a4_g2_bf16_nt1_s4_m1_w8 40 1 "$NEW" /dev/shm/s27m4 SpeedOfLight WarpStateStats \
  SchedulerStats Occupancy
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
quick n-old /dev/shm/s9m4 "$OLD"
quick n-new /dev/shm/s9m4 "$NEW"
rm -rf /dev/shm/s9m4
finish "$FINAL"
