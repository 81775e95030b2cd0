#!/bin/bash
# Ran (call 91) with bench/logs/call91/s3_w8.patch applied; 3 stages were within 1% of 4 and are not on main.
# gpu_s3.sh FINAL BUDGET_S BIN: call 91. After 8 stages lost (call 90), fewer: the 8-warp weight stream with 3 stages
# a warp (2 groups in flight; TENSORFOLD_CUDA_MMA_STAGES=3, an experiment's switch), at 5 blocks an SM and at 6
# (-DTF_W8_BLOCKS=6, 40 registers), against the default 4 stages: 27B MLX4 and 9B MLX4 quick benches alternating
# (token shas check the bits), event profiles.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2 3; do
  quick q-s4-$r /dev/shm/s27m4 "$BIN"
  quick q-s3-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_MMA_STAGES=3
  quick q-s3b6-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_MMA_STAGES=3 TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=6"
done
profile_decode prof-s3 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_MMA_STAGES=3
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for r in 1 2; do
  quick n-s4-$r /dev/shm/s9m4 "$BIN"
  quick n-s3-$r /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_MMA_STAGES=3
  quick n-s3b6-$r /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_MMA_STAGES=3 TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=6"
done
rm -rf /dev/shm/s9m4
finish "$FINAL"
