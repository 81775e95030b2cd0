#!/bin/bash
# gpu_half.sh FINAL BUDGET_S NEW OLD: call 80, the weight stream's 1-tile loop unrolled with 8 warps fixed (`_w8`)
# and half tiles for launches of up to 512 tiles (`_w8_h`), against main (OLD): every check and the tiny fixtures'
# shas with NEW; 27B MLX4 quick benches alternating, NEW also without half tiles (TENSORFOLD_CUDA_HALF_TILES=0);
# the decode profile each way; Nsight Compute on the 1-row down projection each way; 9B MLX4 quick benches. Half
# tiles left main after call 80: this script needs bench/logs/call80/half_tiles.patch applied.
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?binary}; OLD=${4:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q-old-1 /dev/shm/s27m4 "$OLD"
quick q-new-1 /dev/shm/s27m4 "$NEW"
quick q-whole-1 /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_HALF_TILES=0
quick q-old-2 /dev/shm/s27m4 "$OLD"
quick q-new-2 /dev/shm/s27m4 "$NEW"
quick q-whole-2 /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_HALF_TILES=0
profile_decode prof-old /dev/shm/s27m4 "$OLD"
profile_decode prof-new /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_HALF_TILES=512
profile_decode prof-whole /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_HALF_TILES=0
# The 1-row down projection (the only 5120-output launch of 17,408 columns): its kernel differs by version.
ncu_launches ncu-old project_stream_a4_g2_bf16_nt1_s4_m1 20 3 "$OLD" /dev/shm/s27m4 SpeedOfLight WarpStateStats \
  Occupancy LaunchStats
ncu_launches ncu-new project_stream_a4_g2_bf16_nt1_s4_m1_w8_h 20 3 "$NEW" /dev/shm/s27m4 SpeedOfLight \
  WarpStateStats Occupancy LaunchStats
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
quick n-old /dev/shm/s9m4 "$OLD"
quick n-new /dev/shm/s9m4 "$NEW"
quick n-whole /dev/shm/s9m4 "$NEW" TENSORFOLD_CUDA_HALF_TILES=0
rm -rf /dev/shm/s9m4
finish "$FINAL"
